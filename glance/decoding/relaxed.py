"""Lossy acceptance rules for the tree walk: the "relaxed heads" arm.

:func:`glance.decoding.loop.walk` accepts a drafted token only when it is the target's
own choice, which is why speculative decoding there is lossless. The rules here
accept more, and are named so that nobody takes them for the default:

* ``"top2"``: a drafted child is accepted when its token is among the target's
  2 highest logits at its parent's row;
* ``"top3"``: likewise among the 3 highest;
* ``"p30"``: accepted when the target's probability for the token (a float32
  softmax of the parent's row) is at least 0.3.

They are lossy: decoding with them does not give the target's greedy output.
The cause is the rule, not arithmetic. Each time a rule commits a token the
target would not have chosen, every later token is conditioned on a prefix
greedy decoding never reaches, so the two outputs diverge from there on, even
if all later choices are exact. The paper uses them to show that relaxed
acceptance buys its longer accepted paths by giving up the greedy output.

:func:`relaxed_walk` never accepts less than the exact walk: where the target's
own choice is among a node's children it takes that child, so the exact path is
always a prefix of the relaxed one.
"""

from __future__ import annotations

import numpy as np

from glance.core.tree import CandidateTree

__all__ = ["RULES", "first_divergence", "relaxed_walk"]

RULES = ("top2", "p30", "top3")

_TOP_K = {"top2": 2, "top3": 3}
_P_MIN = {"p30": 0.3}


def _allowed(logits, rule: str):
    """``(1 + N, 1 + k)`` int64: per row the target's argmax, then the tokens
    ``rule`` accepts there (``-1`` pads rows with fewer)."""
    import torch  # here, so that the rule names import without torch

    choice = logits.argmax(dim=-1, keepdim=True)  # as glance.decoding.loop.walk picks it
    vocab = logits.shape[-1]
    if rule in _TOP_K:
        ok = logits.topk(min(_TOP_K[rule], vocab), dim=-1).indices
    else:
        p_min = _P_MIN[rule]
        # No more than floor(1 / p_min) tokens can reach p_min, so a top-k holds them all.
        top = torch.softmax(logits.float(), dim=-1).topk(min(int(1 / p_min), vocab), dim=-1)
        ok = torch.where(top.values >= p_min, top.indices, -1)
    return torch.cat([choice, ok], dim=-1)


def relaxed_walk(tree: CandidateTree, logits, rule: str):
    """The path a lossy acceptance ``rule`` (one of :data:`RULES`) takes
    through ``tree``, greedy only.

    Args:
        tree: the candidate tree that was verified.
        logits: the verify pass's ``(1 + N, V)`` logits on any device (row 0:
            the root, row ``i + 1``: node ``i``).
        rule: ``"top2"``, ``"top3"`` or ``"p30"`` (see the module docstring).

    Returns:
        ``(path, bonus)`` as :func:`glance.decoding.loop.walk` returns them: ``path``
        the int64 array of accepted node indices, root to leaf, and ``bonus``
        the target's argmax at the last accepted row (row 0 for an empty path).

    From the root, each step takes the child whose token is the target's
    argmax if there is one, and otherwise the child ``rule`` accepts with the
    highest ``tree.logprobs`` (ties: the lowest index); it stops at a node
    with no acceptable child.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    n = len(tree)
    if logits.ndim != 2 or logits.shape[0] != n + 1:
        raise ValueError(
            f"logits must have shape (1 + N, V) = ({n + 1}, V); got {tuple(logits.shape)}"
        )
    allowed = _allowed(logits, rule).cpu().numpy()  # the walk's one host sync
    parents, tokens = tree.parents, tree.tokens
    at_parent = allowed[parents + 1]
    is_choice = tokens == at_parent[:, 0]
    ok = np.flatnonzero(is_choice | (tokens[:, None] == at_parent[:, 1:]).any(axis=1))
    # Each parent's best acceptable child: its choice first, then the best path
    # log-prob; lexsort is stable, so equal keys keep the lower index.
    order = ok[np.lexsort((-tree.logprobs[ok], ~is_choice[ok], parents[ok]))]
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = parents[order[1:]] != parents[order[:-1]]
    best = np.full(n + 1, -1, dtype=np.int64)
    best[parents[order[first]] + 1] = order[first]
    best = best.tolist()
    path = []
    node = best[0]
    while node >= 0:
        path.append(node)
        node = best[node + 1]
    bonus = int(allowed[path[-1] + 1 if path else 0, 0])
    return np.array(path, dtype=np.int64), bonus


def first_divergence(target, input_ids, positions, reference, output) -> dict | None:
    """Where ``output`` (new token ids from a lossy rule) first leaves
    ``reference`` (the greedy ones), and how the target ranked the token
    taken there; ``None`` when they are equal.

    The target is run on the prompt plus the common prefix, so the figures
    are the greedy decoder's own view at that step: ``rank`` of the taken
    token (0 would be the argmax) and ``logit_gap``, the argmax's logit minus
    the taken token's. A gap far above float32 rounding says the rule, not
    arithmetic, made the difference.
    """
    import torch

    from glance.targets.vl import VisionPositions

    n = min(len(reference), len(output))
    i = next((j for j in range(n) if reference[j] != output[j]), n)
    if i == n and len(reference) == len(output):
        return None
    prefix = torch.cat([input_ids[0].cpu(), torch.tensor(reference[:i], dtype=torch.long)])[None]
    if isinstance(positions, VisionPositions) and positions.mm_token_type_ids is not None:
        types = torch.zeros_like(prefix)
        types[:, : input_ids.shape[1]] = positions.mm_token_type_ids
        positions = VisionPositions(
            positions.pixel_values, positions.image_grid_thw, types, **positions.extra
        )
    prefix = prefix.to(target.device)
    kwargs = {} if positions is None else positions.prefill(target, prefix)[0]
    with torch.no_grad():
        logits = target(input_ids=prefix, logits_to_keep=1, **kwargs).logits[0, -1].float()
    if i == n:  # one output stopped where the other went on
        return {"index": i, "greedy_token": None, "token": None, "rank": None, "logit_gap": None}
    want, took = int(reference[i]), int(output[i])
    return {
        "index": i,
        "greedy_token": want,
        "token": took,
        "rank": int((logits > logits[took]).sum()),
        "logit_gap": float(logits[want] - logits[took]),
        "prob": float(torch.softmax(logits, -1)[took]),
    }
