"""The parts with no model: the candidate tree (and its C kernel), the
draftability law, the metric conventions, the budget planner's cost model,
pinned numerics. numpy and scipy only; never torch.
"""
