"""What the stages run: the comparison rows, their summaries and the
transformers/dflash baselines.
"""
