"""The block head with a causal consistency scorer behind its tree.

:class:`ScoredBlockDrafter` runs the same single head pass as
:class:`~glance.drafters.block.BlockDrafter`, keeps the same top-``K``
candidates per offset, and grows the tree best-first by a path score whose
every step is :func:`glance.heads.scorer.step_scores`: the head's marginal
re-weighted by the scorer's state, which has run along the tokens the path
chose before. A step's score is at most 0, so the tree stays prefix-closed
and packed parents-first; verification and the walk are those of every
other drafter, so the output is unchanged.
"""

from __future__ import annotations

import heapq

import numpy as np
import torch

from glance.core.tree import CandidateTree
from glance.drafters.block import BlockDrafter
from glance.drafters.protocol import refuse_auto
from glance.heads.scorer import check_scorer_fits

__all__ = ["ScoredBlockDrafter", "ScorerTables", "scored_tree"]


class ScorerTables:
    """A scorer's host-side tables, for the tree search: ``embed`` ``(V, r)``,
    ``recurrence`` ``(r, r)`` (applied as ``state @ recurrence``)."""

    def __init__(self, embed: np.ndarray, recurrence: np.ndarray):
        self.embed = embed
        self.recurrence = recurrence

    @classmethod
    def of(cls, scorer) -> ScorerTables:
        """The tables of a :class:`~glance.heads.scorer.CausalScorer`, in float64."""
        grab = lambda t: t.detach().to("cpu", torch.float64).numpy()  # noqa: E731
        return cls(grab(scorer.embed.weight), grab(scorer.recurrence.weight).T.copy())

    def step(self, state: np.ndarray, token: int) -> np.ndarray:
        """The state after ``token``, from the one before (``(r,)``)."""
        return np.tanh(state @ self.recurrence + self.embed[token])


def _steps(logprobs: np.ndarray, pair: np.ndarray) -> np.ndarray:
    """:func:`glance.heads.scorer.step_scores` in numpy, for one parent's children."""
    shifted = logprobs + pair
    top = shifted.max()
    norm = top + np.log(np.exp(shifted - top).sum())
    best = logprobs.max()
    mass = best + np.log(np.exp(logprobs - best).sum())
    return np.minimum(shifted - norm + mass, 0.0)


def scored_tree(
    ids: np.ndarray,
    logprobs: np.ndarray,
    gates: np.ndarray,
    successors: np.ndarray,
    tables: ScorerTables,
    *,
    root: int,
    budget: int,
) -> CandidateTree:
    """The ``budget`` best paths by summed step score, packed parents-first.

    ``ids`` and ``logprobs`` are the ``(D, K)`` candidates and their full
    log-probabilities; ``gates`` the ``(D, r)`` factors ``1 + W h_k``;
    ``successors`` the ``(D, K, r)`` successor rows of the candidates;
    ``tables`` the scorer's recurrence; ``root`` the token before offset 1.
    Ties go to the shallower node, then to the child of the earlier-packed
    parent, then to the better step score, as in
    :func:`glance.core.tree.build_budget_tree`.
    """
    depth_max, k = ids.shape
    children: list[tuple[np.ndarray, np.ndarray]] = []  # per kept node: (order, step scores)

    def expand(state: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        pair = successors[depth - 1] @ (state * gates[depth - 1])
        steps = _steps(logprobs[depth - 1], pair)
        order = np.argsort(-steps, kind="stable")
        return order, steps[order]

    zero = np.zeros(tables.recurrence.shape[0])
    first = expand(tables.step(zero, root), 1)
    states = []
    heap = [(-float(first[1][0]), 1, -1, 0)]
    tokens, parents, depths, scores = [], [], [], []
    while heap and len(tokens) < budget:
        neg, depth, parent, rank = heapq.heappop(heap)
        order, steps = first if parent < 0 else children[parent]
        index = len(tokens)
        token = int(ids[depth - 1, order[rank]])
        tokens.append(token)
        parents.append(parent)
        depths.append(depth)
        scores.append(-neg)
        base = 0.0 if parent < 0 else scores[parent]
        if rank + 1 < k:  # the next-best sibling enters only once this node is kept
            heapq.heappush(heap, (-(base + float(steps[rank + 1])), depth, parent, rank + 1))
        if depth < depth_max:
            before = tables.step(zero, root) if parent < 0 else states[parent]
            state = tables.step(before, token)
            mine = expand(state, depth + 1)
            heapq.heappush(heap, (neg - float(mine[1][0]), depth + 1, index, 0))
        else:
            state, mine = zero, (np.zeros(0, dtype=np.int64), np.zeros(0))
        states.append(state)
        children.append(mine)
    return CandidateTree(
        np.array(tokens, dtype=np.int64),
        np.array(parents, dtype=np.int64),
        np.array(depths, dtype=np.int64),
        np.array(scores, dtype=np.float64),
    )


class ScoredBlockDrafter(BlockDrafter):
    """A :class:`~glance.drafters.block.BlockDrafter` whose tree is ranked by a
    :class:`~glance.heads.scorer.CausalScorer`. ``width`` candidates per
    offset (the scorer's ``top_k`` unless given). It takes a fixed budget only."""

    fixed_budget = True

    def __init__(self, head, target, scorer, width: int | None = None, window=None):
        check_scorer_fits(scorer, head, target)
        super().__init__(head, target, int(width or scorer.config.top_k), window)
        self.scorer = scorer
        self.tables = ScorerTables.of(scorer)

    def draft(self, root: int, length: int, depth: int, plan) -> CandidateTree:
        refuse_auto(self, plan.budget)
        device = self.target.device
        block = torch.full((1, depth + 1), int(self.head.mask_token_id), device=device)
        block[0, 0] = root
        hidden = self._pass(block, self.context, length - self.context.shape[1])[1:]
        logits = self.head.compute_logits(hidden, self.output)
        logp = torch.log_softmax(logits.float(), dim=-1)
        lp, ids = logp.topk(min(self.width, logp.shape[-1]), dim=-1)
        gates = 1.0 + self.scorer.hidden_projection(hidden.to(self.scorer.dtype))
        successors = self.scorer.successor(ids)
        ids_np = ids.cpu().numpy()
        self._last = (root, length, ids_np)
        return scored_tree(
            ids_np,
            lp.cpu().numpy().astype(np.float64),
            gates.to("cpu", torch.float64).numpy(),
            successors.to("cpu", torch.float64).numpy(),
            self.tables,
            root=int(root),
            budget=int(plan.budget),
        )

    def propose(self, root: int, length: int, depth: int):
        raise TypeError("ScoredBlockDrafter grows its own tree: call draft")
