"""What proposes a round's candidates: the protocol and every drafter (the block
head, the EAGLE-style head).
"""
