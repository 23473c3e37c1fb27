"""The budget candidate tree, its attention mask and its acceptance walk.

One block draft gives, for each offset ``1..D`` of the block, the head's top-k
tokens and their log-probabilities. Offsets are conditionally independent given
the context, so a path ``(t_1, ..., t_d)`` is scored by the sum of its per-offset
log-probabilities. :func:`build_budget_tree` keeps the ``budget`` best-scoring
paths, which together form a tree rooted at the last committed token.

Index conventions used throughout:

* nodes are numbered ``0..N-1`` and packed parents-first (a node's parent always
  has a smaller index); ``parent == -1`` marks a child of the root;
* a node's ``depth`` is the block offset it sits at, ``1..D``; the root has depth 0;
* the verify pass sees the sequence ``[root, node_0, ..., node_{N-1}]``, so node
  ``i`` is row ``i + 1`` of the mask and of the target's outputs.

This module needs numpy only, so trees can be built and inspected with no model.
The search and the mask run in a small compiled kernel (``glance.core._ctree``) when
the install built it, and in the pure-Python reference below otherwise; both give
the same trees and masks, bit for bit, and the tests check that they do.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

try:
    from glance.core import _ctree
except ImportError:  # built without a C compiler: the Python reference is used
    _ctree = None

__all__ = [
    "Node",
    "CandidateTree",
    "accept_path",
    "as_tree",
    "build_budget_tree",
    "children_of",
    "first_nodes",
    "search_tree",
    "spine_leaf",
    "splice",
    "tree_mask",
    "tree_positions",
]


@dataclass(frozen=True, slots=True)
class Node:
    """One candidate: ``token`` at block offset ``depth``, below node ``parent``
    (``-1`` for the root), with path log-probability ``logprob``."""

    token: int
    depth: int
    parent: int
    logprob: float


class CandidateTree(Sequence):
    """A candidate tree: flat arrays, parents-first, that also read as nodes.

    Attributes (each of shape ``(N,)``): ``tokens`` (int64), ``parents`` (int64,
    ``-1`` for a child of the root), ``depths`` (int64, ``1..D``) and
    ``logprobs`` (float64 path log-probabilities). The decoder's hot path uses
    the arrays; indexing or iterating gives :class:`Node` objects, built on demand.
    """

    __slots__ = ("tokens", "parents", "depths", "logprobs")

    def __init__(self, tokens, parents, depths, logprobs):
        self.tokens = tokens
        self.parents = parents
        self.depths = depths
        self.logprobs = logprobs

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Node(
            int(self.tokens[i]), int(self.depths[i]), int(self.parents[i]), float(self.logprobs[i])
        )

    def __repr__(self) -> str:
        depth = int(self.depths.max()) if len(self) else 0
        return f"CandidateTree(size={len(self)}, depth={depth})"


_INT64_MAX = np.iinfo(np.int64).max


def _is_count(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def build_budget_tree(
    top_ids: np.ndarray, top_logprobs: np.ndarray, budget: int, branch_k: int
) -> CandidateTree:
    """Return the ``budget`` best candidate paths of one block draft.

    Args:
        top_ids: ``(D, k)`` integer token ids in ``[0, 2**63)``, row ``d`` for
            block offset ``d + 1``, distinct within a row.
        top_logprobs: ``(D, k)`` their log-probabilities, in ``[-inf, 0]``. Rows
            sorted in descending order (as ``torch.topk`` gives) take a fast path;
            other rows are sorted here, stably.
        budget: the number of nodes to keep, ``>= 1``.
        branch_k: how many of each offset's best entries may be used, ``1..k``.

    Returns:
        A :class:`CandidateTree` of ``min(budget, sum_{d=1..D} branch_k**d)``
        nodes, packed parents-first. A node's ``logprob`` is the sum of the
        per-offset log-probs along its path, added shallowest first; the kept
        nodes are the highest-scoring paths among the paths of every depth.

    Selection is best-first from the root: a node becomes a candidate only once
    its parent is kept, so the tree is prefix-closed by construction whatever the
    ties, and nodes are packed in the order they are kept. Ties are broken, in
    order, toward the shallower node, then toward the child of the parent packed
    earlier (the root first), then toward the better-ranked token, where rank is
    the position after a stable descending sort of the offset's log-probs (equal
    log-probs keep their input column order). ``-inf`` entries are legal and
    rank last, so they enter only when the budget exceeds the number of finite
    paths; the tree size never depends on them. ``D == 0`` gives an empty tree.
    NaN, ``+inf`` or positive log-probs, negative ids, ids past int64's range
    (from an unsigned array) and an id repeated within a row raise
    ``ValueError``: a row is a top-k, whose ids ``torch.topk`` gives distinct,
    and a repeat would make two siblings with one token.
    """
    ids = np.asarray(top_ids)
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.ndim != 2 or ids.shape != lp.shape:
        raise ValueError(
            f"top_ids and top_logprobs must both have shape (D, k); got {ids.shape} and {lp.shape}"
        )
    if ids.dtype.kind not in "iu":
        raise ValueError(f"top_ids must hold integer token ids; got dtype {ids.dtype}")
    if ids.size and ids.min() < 0:
        raise ValueError(f"top_ids must hold token ids >= 0; got {int(ids.min())}")
    # Unsigned ids past int64's range would wrap to negative ids in the tree.
    if ids.size and ids.dtype.kind == "u" and ids.max() > _INT64_MAX:
        raise ValueError(
            f"top_ids must hold token ids that fit in int64 (<= {_INT64_MAX}); got {int(ids.max())}"
        )
    if ids.shape[1] > 1:
        # A top-k has distinct ids per offset; a repeat would become two sibling
        # nodes with one token, spending budget twice on what the walk sees as one path.
        ordered = np.sort(ids, axis=1)
        repeats = np.argwhere(ordered[:, 1:] == ordered[:, :-1])
        if repeats.size:
            row, col = repeats[0]
            raise ValueError(
                "top_ids must hold distinct token ids in each row (a per-offset top-k); "
                f"row {row} repeats id {int(ordered[row, col])}"
            )
    if not _is_count(budget) or budget < 1:
        raise ValueError(f"budget must be an integer >= 1; got {budget!r}")
    depth_max, k = lp.shape
    if not _is_count(branch_k) or not 1 <= branch_k <= max(k, 1):
        raise ValueError(f"branch_k must be an integer in [1, k={k}]; got {branch_k!r}")
    if depth_max == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CandidateTree(empty, empty, empty, np.zeros(0, dtype=np.float64))
    # -inf is a legal log-probability (probability 0). NaN (max is NaN), +inf and
    # positive values are not: the search relies on scores never rising with depth.
    if not lp.max() <= 0.0:
        bad = np.argwhere(~(lp <= 0.0))[0]
        raise ValueError(
            "top_logprobs must be log-probabilities in [-inf, 0]; "
            f"got {lp[tuple(bad)]} at row {bad[0]}, column {bad[1]}"
        )
    if k > 1 and not (lp[:, 1:] <= lp[:, :-1]).all():
        order = np.argsort(-lp, axis=1, kind="stable")
        lp = np.take_along_axis(lp, order, axis=1)
        ids = np.take_along_axis(ids, order, axis=1)
    return _search(ids, lp, budget, branch_k)


def _search(ids: np.ndarray, lp: np.ndarray, budget: int, branch_k: int) -> CandidateTree:
    """The search of :func:`build_budget_tree` on checked inputs: rows sorted
    descending, log-probs in ``[-inf, 0]``, ``D >= 1``. The decoder calls it
    directly with ``torch.topk`` of a log-softmax, which satisfies all three."""
    depth_max, k = lp.shape
    size = _tree_size(depth_max, branch_k, budget)
    if _ctree is not None:
        parents = np.empty(size, dtype=np.int64)
        depths = np.empty(size, dtype=np.int64)
        ranks = np.empty(size, dtype=np.int64)
        negs = np.empty(size, dtype=np.float64)
        _ctree.best_first(
            np.ascontiguousarray(lp, dtype=np.float64),
            depth_max,
            k,
            branch_k,
            size,
            parents,
            depths,
            ranks,
            negs,
        )
    else:
        parents, depths, ranks, negs = _best_first(lp[:, :branch_k].tolist(), size)
    return CandidateTree(
        ids[depths - 1, ranks].astype(np.int64, copy=False), parents, depths, -negs
    )


def search_tree(top_ids: np.ndarray, top_logprobs: np.ndarray, budget: int) -> CandidateTree:
    """The decoder's fast path to :func:`build_budget_tree` with every column
    usable (``branch_k = k``), on inputs already in its form: rows sorted
    descending, log-probs in ``[-inf, 0]``, ``D >= 1``, as ``torch.topk`` of a
    log-softmax gives them. Nothing is checked."""
    return _search(top_ids, top_logprobs, budget, top_ids.shape[1])


def first_nodes(tree: CandidateTree, n: int) -> CandidateTree:
    """The first ``n`` nodes. For a best-first tree (as the search packs them)
    that is exactly the budget-``n`` tree, so one search serves every size."""
    return CandidateTree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.logprobs[:n])


def spine_leaf(tree: CandidateTree, spine: np.ndarray) -> int | None:
    """The node at the end of ``spine`` (one token per offset ``1..D``), walked
    from the root through ``tree``; ``None`` unless the whole spine is there."""
    spine = np.ascontiguousarray(spine, dtype=np.int64)
    choice = np.append(spine, -1)[np.concatenate(([0], tree.depths))]
    path = accept_path(tree, choice)
    return int(path[-1]) if len(path) == spine.shape[0] else None


def splice(tree: CandidateTree, leaf: int, sub: CandidateTree) -> CandidateTree:
    """``tree`` with ``sub`` hung below node ``leaf`` and packed after the
    existing nodes: ``sub``'s root children become ``leaf``'s children, its
    depths and path log-probabilities continue from ``leaf``'s."""
    n = len(tree)
    return CandidateTree(
        np.concatenate([tree.tokens, sub.tokens]),
        np.concatenate([tree.parents, np.where(sub.parents < 0, leaf, sub.parents + n)]),
        np.concatenate([tree.depths, sub.depths + tree.depths[leaf]]),
        np.concatenate([tree.logprobs, sub.logprobs + tree.logprobs[leaf]]),
    )


def _tree_size(depth_max: int, branch_k: int, budget: int) -> int:
    """``min(budget, sum_{d=1..depth_max} branch_k**d)``, without big powers."""
    total, level = 0, 1
    for _ in range(depth_max):
        level *= branch_k
        total += level
        if total >= budget:
            return budget
    return total


def _best_first(rows: list[list[float]], size: int):
    """The reference search: the ``size`` best nodes, as (parents, depths, ranks,
    negated scores) arrays. ``glance.core._ctree.best_first`` is its compiled twin."""
    # Best-first search over the implicit tree of all paths. Heap entries are
    # (-score, depth, parent index, rank): unique per node, and ordered exactly
    # by the documented tie-break. A node's next-ranked sibling is pushed only
    # when the node itself is kept, so each kept node adds at most two entries.
    depth_max, last = len(rows), len(rows[0]) - 1
    kept: list[tuple[float, int, int, int]] = []
    keep = kept.append
    heap = [(-rows[0][0], 1, -1, 0)]
    replace, push = heapq.heapreplace, heapq.heappush
    for index in range(size):
        entry = heap[0]
        keep(entry)
        neg, depth, parent, rank = entry
        sibling = None
        if rank < last:
            base = kept[parent][0] if parent >= 0 else 0.0
            sibling = (base - rows[depth - 1][rank + 1], depth, parent, rank + 1)
        if depth < depth_max:
            replace(heap, (neg - rows[depth][0], depth + 1, index, 0))
            if sibling is not None:
                push(heap, sibling)
        elif sibling is not None:
            replace(heap, sibling)
        else:
            heapq.heappop(heap)  # size caps the loop before the heap runs dry

    negs, depths, parents, ranks = zip(*kept, strict=True)
    return (
        np.array(parents, dtype=np.int64),
        np.array(depths, dtype=np.int64),
        np.array(ranks, dtype=np.int64),
        np.array(negs, dtype=np.float64),
    )


def as_tree(nodes: CandidateTree | Sequence[Node]) -> CandidateTree:
    """``nodes`` as a :class:`CandidateTree` (returned as is when it is one)."""
    if isinstance(nodes, CandidateTree):
        return nodes
    n = len(nodes)
    return CandidateTree(
        np.fromiter((x.token for x in nodes), dtype=np.int64, count=n),
        np.fromiter((x.parent for x in nodes), dtype=np.int64, count=n),
        np.fromiter((x.depth for x in nodes), dtype=np.int64, count=n),
        np.fromiter((x.logprob for x in nodes), dtype=np.float64, count=n),
    )


def children_of(nodes: CandidateTree | Sequence[Node], i: int) -> list[int]:
    """Indices of the children of node ``i`` (``-1`` for the root), ascending."""
    parents = as_tree(nodes).parents
    if not -1 <= i < parents.shape[0]:
        raise ValueError(f"node index must be in [-1, {parents.shape[0] - 1}]; got {i}")
    return np.flatnonzero(parents == i).tolist()


def _ancestor_bits(parents: list[int]) -> list[int]:
    """Row ``r`` of ``[root, node_0, ...]`` as an int whose bit ``c`` is set iff
    row ``r`` sees row ``c``. Parents-first packing makes this one sweep."""
    bits = [1]
    add = bits.append
    for row, parent in enumerate(parents, 1):
        add(bits[parent + 1] | (1 << row))
    return bits


def tree_mask(
    nodes: CandidateTree | Sequence[Node], past_len: int = 0, dtype=np.float32
) -> np.ndarray:
    """The additive attention mask for one verify pass over a candidate tree.

    Query rows are ``[root, node_0, ..., node_{N-1}]``; key columns are
    ``[past (past_len), root, node_0, ..., node_{N-1}]``. A row sees the whole
    past, the root, its ancestors and itself.

    Returns:
        ``(N+1, past_len+N+1)`` array of ``dtype``: ``0`` where a row sees and
        ``np.finfo(dtype).min`` (the most negative finite value) elsewhere. The
        rows' position offsets come from :func:`tree_positions`.
    """
    if past_len < 0:
        raise ValueError(f"past_len must be >= 0; got {past_len}")
    parents = as_tree(nodes).parents
    n1 = parents.shape[0] + 1
    dtype = np.dtype(dtype)
    if _ctree is not None and dtype in _C_MASK_DTYPES:  # one pass, past columns included
        mask = np.empty((n1, past_len + n1), dtype=dtype)
        _ctree.additive_mask(
            np.ascontiguousarray(parents, dtype=np.int64),
            past_len,
            mask,
            dtype.itemsize,
            float(np.finfo(dtype).min),
        )
        return mask
    if _ctree is not None:
        visible = np.empty((n1, n1), dtype=np.uint8)
        _ctree.ancestor_visible(np.ascontiguousarray(parents, dtype=np.int64), visible)
    else:
        bad = np.flatnonzero((parents < -1) | (parents >= np.arange(n1 - 1)))
        if bad.size:
            raise ValueError(
                f"parents must be packed parents-first; node {bad[0]} has parent {parents[bad[0]]}"
            )
        bits = _ancestor_bits(parents.tolist())
        width = (n1 + 7) // 8
        packed = np.frombuffer(b"".join([b.to_bytes(width, "little") for b in bits]), np.uint8)
        visible = np.unpackbits(packed, bitorder="little").reshape(n1, 8 * width)[:, :n1]
    zero, hidden = _mask_values(np.dtype(dtype))
    tree_part = np.where(visible.view(bool), zero, hidden)
    if past_len == 0:
        return tree_part
    mask = np.zeros((n1, past_len + n1), dtype=dtype)
    mask[:, past_len:] = tree_part
    return mask


_C_MASK_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@functools.cache
def _mask_values(dtype: np.dtype) -> tuple[np.generic, np.generic]:
    return dtype.type(0), np.finfo(dtype).min


def tree_positions(nodes: CandidateTree | Sequence[Node]) -> np.ndarray:
    """Position offsets of ``[root, node_0, ...]`` from the root: ``(N+1,)`` int64.

    A node's offset is its depth, so every path sees the positions it would have
    as a plain sequence.
    """
    depths = as_tree(nodes).depths
    out = np.zeros(depths.shape[0] + 1, dtype=np.int64)
    out[1:] = depths
    return out


def accept_path(nodes: CandidateTree | Sequence[Node], target_next: np.ndarray) -> np.ndarray:
    """The longest path the target itself would take through the tree.

    Args:
        nodes: the candidate tree.
        target_next: ``(N+1,)`` the target's chosen next token after each row
            ``[root, node_0, ...]`` of the verify pass.

    Returns:
        int64 node indices along the accepted path, shallowest first (empty when
        the root's choice is not in the tree). The bonus token is
        ``target_next[path[-1] + 1]``, or ``target_next[0]`` for an empty path.

    A node is accepted when its token is the target's choice after its parent and
    its parent is accepted. Siblings normally hold distinct tokens; where they
    repeat one, the deepest accepted node wins, then the lowest index.
    """
    tree = as_tree(nodes)
    parents = tree.parents
    target_next = np.asarray(target_next)
    if target_next.shape != (len(tree) + 1,):
        raise ValueError(
            f"target_next must have shape (N+1,) = ({len(tree) + 1},); got {target_next.shape}"
        )
    if _ctree is not None:
        return np.array(
            _ctree.accept(
                np.ascontiguousarray(parents, dtype=np.int64),
                np.ascontiguousarray(tree.depths, dtype=np.int64),
                np.ascontiguousarray(tree.tokens, dtype=np.int64),
                np.ascontiguousarray(target_next, dtype=np.int64),
            ),
            dtype=np.int64,
        )
    accepted = tree.tokens == target_next[parents + 1]
    # Parents-first packing: one ascending sweep carries acceptance down paths.
    for i in np.flatnonzero(accepted & (parents >= 0)).tolist():
        accepted[i] = accepted[parents[i]]
    if not accepted.any():
        return np.zeros(0, dtype=np.int64)
    leaf = int(np.flatnonzero(accepted)[np.argmax(tree.depths[accepted])])
    path = [leaf]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return np.array(path[::-1], dtype=np.int64)
