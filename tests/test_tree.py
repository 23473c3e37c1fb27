import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import glance.core.tree
from glance.core.tree import (
    CandidateTree,
    Node,
    accept_path,
    as_tree,
    build_budget_tree,
    children_of,
    tree_mask,
    tree_positions,
)

# A small pool of values makes ties (and -inf) common, which is where trees break.
LOGPROBS = st.sampled_from([0.0, -0.5, -0.5, -1.0, -1.25, -2.0, -3.5, -math.inf])


@st.composite
def drafts(draw, max_depth=5, max_k=4):
    depth = draw(st.integers(0, max_depth))
    k = draw(st.integers(1, max_k))
    lp = np.array(
        draw(st.lists(LOGPROBS, min_size=depth * k, max_size=depth * k)), dtype=np.float64
    ).reshape(depth, k)
    if draw(st.booleans()):
        lp = -np.sort(-lp, axis=1)  # sorted rows take the fast path; unsorted the other
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    ids = np.array([rng.permutation(100)[:k] for _ in range(depth)], dtype=np.int64)
    ids = ids.reshape(depth, k)
    branch_k = draw(st.integers(1, k))
    return ids, lp, branch_k


def all_paths(ids, lp, branch_k):
    """Every path of every depth, scored left to right like the tree does."""
    order = np.argsort(-lp, axis=1, kind="stable")[:, :branch_k]
    out = []
    for depth in range(1, lp.shape[0] + 1):
        for ranks in itertools.product(range(branch_k), repeat=depth):
            score = 0.0
            for d, r in enumerate(ranks):
                score = score + lp[d, order[d, r]]
            out.append((tuple(int(ids[d, order[d, r]]) for d, r in enumerate(ranks)), score))
    return out


def path_tokens(tree, i):
    tokens = []
    while i >= 0:
        tokens.append(int(tree.tokens[i]))
        i = int(tree.parents[i])
    return tuple(reversed(tokens))


@settings(max_examples=400, deadline=None)
@given(drafts(), st.integers(1, 400))
def test_tree_is_the_top_budget_paths(draft, budget):
    ids, lp, branch_k = draft
    tree = build_budget_tree(ids, lp, budget=budget, branch_k=branch_k)
    paths = all_paths(ids, lp, branch_k)
    assert len(tree) == min(budget, len(paths))
    best = sorted((s for _, s in paths), reverse=True)[: len(tree)]
    assert sorted(tree.logprobs.tolist(), reverse=True) == best
    # Each node's score is its own path's score, and paths are distinct.
    score_of = dict(paths)
    kept = [path_tokens(tree, i) for i in range(len(tree))]
    assert len(set(kept)) == len(kept)
    for i, path in enumerate(kept):
        assert tree.logprobs[i] == score_of[path]


@settings(max_examples=300, deadline=None)
@given(drafts(max_depth=6, max_k=5), st.integers(1, 200))
def test_tree_is_prefix_closed_and_parents_first(draft, budget):
    ids, lp, branch_k = draft
    tree = build_budget_tree(ids, lp, budget=budget, branch_k=branch_k)
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        assert -1 <= parent < i
        expected_depth = 1 if parent < 0 else int(tree.depths[parent]) + 1
        assert tree.depths[i] == expected_depth
        if parent >= 0:
            assert tree.logprobs[parent] >= tree.logprobs[i]


@settings(max_examples=300, deadline=None)
@given(drafts(max_depth=6, max_k=5), st.integers(1, 80), st.integers(0, 5))
def test_mask_sees_exactly_the_ancestors(draft, budget, past_len):
    ids, lp, branch_k = draft
    tree = build_budget_tree(ids, lp, budget=budget, branch_k=branch_k)
    n = len(tree)
    mask = tree_mask(tree, past_len=past_len)
    assert mask.shape == (n + 1, past_len + n + 1)
    assert mask.dtype == np.float32
    hidden = np.finfo(np.float32).min
    assert ((mask == hidden) | ((mask == 0) & ~np.signbit(mask))).all()
    assert (mask[:, :past_len] == 0).all()
    seen = mask[:, past_len:] == 0
    for row in range(n + 1):
        expected = {0, row}
        i = row - 1
        while i >= 0:
            expected.add(i + 1)
            i = int(tree.parents[i])
        assert set(np.flatnonzero(seen[row]).tolist()) == expected
    # The same tree given as Node objects gives the same mask and positions.
    nodes = list(tree)
    assert (tree_mask(nodes, past_len=past_len) == mask).all()
    assert (tree_positions(nodes) == np.concatenate([[0], tree.depths])).all()


def test_mask_dtype_minimum():
    tree = build_budget_tree(np.array([[5, 6]]), np.log([[0.6, 0.4]]), budget=2, branch_k=2)
    mask = tree_mask(tree, past_len=1, dtype=np.float64)
    assert mask.dtype == np.float64
    hidden = np.finfo(np.float64).min
    # Columns: [past, root, node_0, node_1]; the two nodes are siblings.
    assert mask.tolist() == [[0, 0, hidden, hidden], [0, 0, 0, hidden], [0, 0, hidden, 0]]


def test_tie_break_is_documented_order():
    half = math.log(0.5)
    ids = np.array([[10, 11], [20, 21]])
    lp = np.array([[half, half], [half, half]])
    tree = build_budget_tree(ids, lp, budget=4, branch_k=2)
    # Shallower first; then the child of the earlier-packed parent; then rank.
    assert [(n.token, n.depth, n.parent) for n in tree] == [
        (10, 1, -1),
        (11, 1, -1),
        (20, 2, 0),
        (21, 2, 0),
    ]


def test_unsorted_rows_give_the_sorted_tree():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 50))
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    top = np.argsort(-lp, axis=1)[:, :6]
    top_lp = np.take_along_axis(lp, top, axis=1)
    sorted_tree = build_budget_tree(top, top_lp, budget=40, branch_k=4)
    perm = rng.permutation(6)
    shuffled = build_budget_tree(top[:, perm], top_lp[:, perm], budget=40, branch_k=4)
    assert list(sorted_tree) == list(shuffled)


def test_nodes_read_as_a_sequence():
    tree = build_budget_tree(np.array([[1, 2], [3, 4]]), np.log([[0.9, 0.1], [0.8, 0.2]]), 3, 2)
    assert isinstance(tree, CandidateTree)
    assert tree[0] == Node(token=1, depth=1, parent=-1, logprob=pytest.approx(math.log(0.9)))
    assert [n.token for n in tree] == [1, 3, 4]
    assert as_tree(list(tree)).tokens.tolist() == tree.tokens.tolist()
    assert children_of(tree, -1) == [0]
    assert children_of(list(tree), 0) == [1, 2]
    assert children_of(tree, 2) == []
    with pytest.raises(ValueError, match="node index"):
        children_of(tree, 3)


def test_budget_larger_than_all_paths_returns_them_all():
    tree = build_budget_tree(np.array([[1, 2], [3, 4]]), np.log([[0.5, 0.5], [0.5, 0.5]]), 99, 2)
    assert len(tree) == 2 + 4


def test_minus_inf_paths_rank_last_but_count():
    lp = np.array([[0.0, -math.inf], [-0.1, -math.inf]])
    tree = build_budget_tree(np.array([[1, 2], [3, 4]]), lp, budget=3, branch_k=2)
    assert tree.tokens.tolist() == [1, 3, 2]
    assert tree.logprobs.tolist() == [0.0, -0.1, -math.inf]


def test_empty_block_gives_empty_tree():
    tree = build_budget_tree(np.zeros((0, 4), dtype=np.int64), np.zeros((0, 4)), 5, 2)
    assert len(tree) == 0
    assert tree_mask(tree, past_len=2).tolist() == [[0, 0, 0]]
    assert tree_positions(tree).tolist() == [0]
    assert accept_path(tree, np.array([7])).tolist() == []


@pytest.mark.parametrize(
    ("ids", "lp", "budget", "branch_k", "match"),
    [
        ([[1, 2]], [[-0.1, -1.0]], 0, 1, "budget"),
        ([[1, 2]], [[-0.1, -1.0]], 1.5, 1, "budget"),
        ([[1, 2]], [[-0.1, -1.0]], 2, 0, "branch_k"),
        ([[1, 2]], [[-0.1, -1.0]], 2, 3, "branch_k"),
        ([[1, 2]], [[-0.1, math.nan]], 2, 2, "column 1"),
        ([[1, 2]], [[math.inf, -1.0]], 2, 2, r"\[-inf, 0\]"),
        ([[1, 2]], [[0.5, -1.0]], 2, 2, r"\[-inf, 0\]"),
        ([[1, 2]], [[-0.1]], 2, 1, "shape"),
        ([[1.0, 2.0]], [[-0.1, -1.0]], 2, 1, "integer token ids"),
    ],
)
def test_bad_input_is_named(ids, lp, budget, branch_k, match):
    with pytest.raises(ValueError, match=match):
        build_budget_tree(np.array(ids), np.array(lp), budget, branch_k)


def naive_walk(tree, target_next):
    path, current = [], -1
    while True:
        want = target_next[current + 1]
        step = [c for c in children_of(tree, current) if tree.tokens[c] == want]
        if not step:
            return path
        current = step[0]
        path.append(current)


@settings(max_examples=300, deadline=None)
@given(drafts(max_depth=6, max_k=5), st.integers(1, 80), st.integers(0, 2**16))
def test_accept_path_is_the_greedy_walk(draft, budget, seed):
    ids, lp, branch_k = draft
    tree = build_budget_tree(ids, lp, budget=budget, branch_k=branch_k)
    rng = np.random.default_rng(seed)
    target_next = rng.integers(0, 100, size=len(tree) + 1)
    if len(tree) and rng.random() < 0.8:
        # Make the target follow a chosen node's path, so deep accepts happen.
        i = int(rng.integers(len(tree)))
        while i >= 0:
            target_next[int(tree.parents[i]) + 1] = tree.tokens[i]
            i = int(tree.parents[i])
    path = accept_path(tree, target_next)
    assert path.tolist() == naive_walk(tree, target_next)


def test_accept_path_rejects_wrong_shape():
    tree = build_budget_tree(np.array([[1, 2]]), np.log([[0.5, 0.5]]), 2, 2)
    with pytest.raises(ValueError, match=r"shape \(N\+1,\)"):
        accept_path(tree, np.array([1, 2]))


def test_compiled_kernel_is_built():
    # The README's install compiles glance._ctree; without it every tree falls
    # back to the (slower) Python reference, which the benchmark would not show.
    import glance.core.tree

    assert glance.core.tree._ctree is not None


@st.composite
def wide_drafts(draw):
    depth = draw(st.integers(1, 16))
    k = draw(st.integers(1, 10))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(depth, 50)) * rng.uniform(0.5, 8.0)
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    top = np.argsort(-logp, axis=1)[:, :k]
    lp = np.take_along_axis(logp, top, axis=1)
    if draw(st.booleans()):  # coarse values: ties everywhere
        lp = np.round(lp * 2) / 2
        lp[lp > 0] = 0.0
    return top.astype(np.int64), lp, draw(st.integers(1, k))


@pytest.mark.skipif(
    glance.core.tree._ctree is None,
    reason="no compiled kernel in this install (test_compiled_kernel_is_built fails instead)",
)
@settings(max_examples=300, deadline=None)
@given(st.one_of(drafts(max_depth=6, max_k=5), wide_drafts()), st.integers(1, 300))
def test_compiled_kernel_equals_python_reference(draft, budget):
    import glance.core.tree

    ids, lp, branch_k = draft
    compiled = build_budget_tree(ids, lp, budget=budget, branch_k=branch_k)
    # float32 and float64 take the kernel's additive mask; float16 its visibility matrix.
    dtypes = (np.float32, np.float64, np.float16)
    masks = [tree_mask(compiled, past, dtype=d) for past, d in zip((2, 3, 1), dtypes, strict=True)]
    # A target that mostly agrees with the tree, so accepted paths are deep.
    rng = np.random.default_rng(budget)
    target_next = np.concatenate([[0], compiled.tokens])[rng.permutation(len(compiled) + 1)]
    if len(compiled):
        target_next[: len(compiled)] = np.where(
            rng.random(len(compiled)) < 0.7, compiled.tokens, target_next[: len(compiled)]
        )
    walk = accept_path(compiled, target_next)
    kernel, glance.core.tree._ctree = glance.core.tree._ctree, None
    try:
        reference = build_budget_tree(ids, lp, budget=budget, branch_k=branch_k)
        reference_masks = [
            tree_mask(reference, past, dtype=d) for past, d in zip((2, 3, 1), dtypes, strict=True)
        ]
        reference_walk = accept_path(reference, target_next)
    finally:
        glance.core.tree._ctree = kernel
    for name in ("tokens", "parents", "depths", "logprobs"):
        a, b = getattr(compiled, name), getattr(reference, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for mask, reference_mask in zip(masks, reference_masks, strict=True):
        assert mask.dtype == reference_mask.dtype
        assert mask.tobytes() == reference_mask.tobytes()
    assert walk.dtype == reference_walk.dtype and walk.tolist() == reference_walk.tolist()


@pytest.mark.parametrize("compiled", [True, False])
def test_mask_rejects_a_tree_not_packed_parents_first(compiled, monkeypatch):
    import glance.core.tree

    if not compiled:
        monkeypatch.setattr(glance.core.tree, "_ctree", None)
    for parent in (1, -2):
        nodes = [Node(1, 1, parent, -0.1), Node(2, 1, -1, -0.2)]
        with pytest.raises(ValueError, match="parents-first"):
            tree_mask(nodes)
