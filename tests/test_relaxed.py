"""The lossy acceptance rules: they extend the exact walk, and accept what they say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from glance.core.tree import CandidateTree, children_of, search_tree
from glance.decoding.loop import GREEDY, walk
from glance.decoding.relaxed import RULES, relaxed_walk
from glance.drafters.protocol import TableDrafter

VOCAB = 8  # small, so the target's choices are often in the tree


@st.composite
def verified_trees(draw):
    """A searched tree and random verify logits, some rows nudged toward a
    child's token so exact paths run deep."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    depth, k = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    ids = np.array([rng.permutation(VOCAB)[:k] for _ in range(depth)], dtype=np.int64)
    lp = -np.sort(rng.exponential(size=(depth, k)), axis=1)
    tree = search_tree(ids, lp, draw(st.integers(1, 40)))
    logits = torch.randn(
        len(tree) + 1, VOCAB, generator=torch.Generator().manual_seed(int(rng.integers(2**31)))
    )
    for i in range(-1, len(tree)):
        kids = children_of(tree, i)
        if kids and rng.random() < 0.6:
            logits[i + 1, tree.tokens[rng.choice(kids)]] += 3.0
    return tree, logits


def accepts(row: torch.Tensor, token: int, rule: str) -> bool:
    """The rule, read straight from its definition."""
    if rule == "p30":
        return bool(torch.softmax(row.float(), dim=-1)[token] >= 0.3)
    k = {"top2": 2, "top3": 3}[rule]
    return token in row.topk(k).indices.tolist()


def reference_walk(tree, logits, rule):
    """One step at a time, from :func:`children_of`."""
    path, node = [], -1
    while True:
        row = logits[node + 1]
        kids = children_of(tree, node)
        exact = [c for c in kids if tree.tokens[c] == int(row.argmax())]
        ok = exact or [c for c in kids if accepts(row, int(tree.tokens[c]), rule)]
        if not ok:
            return path
        node = max(ok, key=lambda c: (tree.logprobs[c], -c))
        path.append(node)


@settings(max_examples=60, deadline=None)
@given(verified_trees(), st.sampled_from(RULES))
def test_relaxed_path_extends_the_exact_path(case, rule):
    tree, logits = case
    path, bonus = relaxed_walk(tree, logits, rule)
    exact, _ = walk(tree, logits, GREEDY, None)
    assert path.dtype == np.int64 and isinstance(bonus, int)
    assert len(path) >= len(exact)
    assert path[: len(exact)].tolist() == exact.tolist()
    # A chain from the root: each node's parent is the node before it.
    assert tree.parents[path].tolist() == [-1, *path.tolist()][: len(path)]
    assert path.tolist() == reference_walk(tree, logits, rule)
    last = path[-1] + 1 if len(path) else 0
    assert bonus == int(logits[last].argmax())


def row_with_probs(probs: dict[int, float]) -> torch.Tensor:
    """Logits over ``VOCAB`` tokens whose softmax gives ``probs``, the rest of
    the mass spread evenly over the other tokens."""
    rest = (1.0 - sum(probs.values())) / (VOCAB - len(probs))
    p = torch.full((VOCAB,), rest, dtype=torch.float64)
    for token, q in probs.items():
        p[token] = q
    return p.log().float()


def flat_tree(tokens, logprobs) -> CandidateTree:
    """Children of the root only."""
    n = len(tokens)
    return CandidateTree(
        np.array(tokens, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.ones(n, dtype=np.int64),
        np.array(logprobs, dtype=np.float64),
    )


# At the root the target ranks token 3 (0.38), then 5 (0.35), then 7 (0.25).
ROOT = {3: 0.38, 5: 0.35, 7: 0.25}


def test_second_choice_is_accepted_only_by_the_relaxed_rules():
    tree = flat_tree([7, 5], [math.log(0.6), math.log(0.3)])  # 7 drafted likelier than 5
    logits = torch.stack([row_with_probs(ROOT)] + [row_with_probs({1: 0.9})] * 2)
    exact, exact_bonus = walk(tree, logits, GREEDY, None)
    assert exact.tolist() == [] and exact_bonus == 3
    for rule in ("top2", "p30"):  # 7 is third, at 0.25: only 5 is acceptable
        path, bonus = relaxed_walk(tree, logits, rule)
        assert path.tolist() == [1] and bonus == 1
    if "top3" in RULES:  # both acceptable: the likelier draft wins
        assert relaxed_walk(tree, logits, "top3")[0].tolist() == [0]


def test_p30_threshold():
    logits = torch.stack([row_with_probs(ROOT), row_with_probs({2: 0.9})])
    assert relaxed_walk(flat_tree([5], [0.0]), logits, "p30")[0].tolist() == [0]  # 0.35
    assert relaxed_walk(flat_tree([7], [0.0]), logits, "p30")[0].tolist() == []  # 0.25


def test_target_choice_beats_a_likelier_draft():
    tree = flat_tree([5, 3], [math.log(0.7), math.log(0.2)])
    logits = torch.stack([row_with_probs(ROOT)] + [row_with_probs({4: 0.9})] * 2)
    for rule in RULES:
        path, bonus = relaxed_walk(tree, logits, rule)
        assert path.tolist() == [1] and bonus == 4


def test_empty_tree_gives_the_root_choice():
    empty = np.zeros(0, dtype=np.int64)
    tree = CandidateTree(empty, empty, empty, np.zeros(0))
    path, bonus = relaxed_walk(tree, row_with_probs(ROOT)[None], "top2")
    assert path.tolist() == [] and bonus == 3


def test_unknown_rule_is_named():
    tree = flat_tree([5], [0.0])
    logits = torch.zeros(2, VOCAB)
    with pytest.raises(ValueError, match="top9") as err:
        relaxed_walk(tree, logits, "top9")
    assert all(rule in str(err.value) for rule in RULES)


def test_logits_rows_must_match_the_tree():
    with pytest.raises(ValueError, match="logits"):
        relaxed_walk(flat_tree([5], [0.0]), torch.zeros(3, VOCAB), "top2")


# --- through the decoder ------------------------------------------------------


class _SecondChoice(TableDrafter):
    """A table drafter that proposes the greedy reference, except the
    target's SECOND choice at the first offset of every round."""

    width, max_depth = 1, 6

    def __init__(self, reference, second):
        self.reference, self.second = reference, second

    def start(self, hidden_states, input_ids=None):
        pass

    def advance(self, hidden_states, rows):
        pass

    def propose(self, root, length, depth):
        ids = np.array(
            [[self.reference[min(length + 1 + j, len(self.reference) - 1)]] for j in range(depth)]
        )
        ids[0, 0] = self.second[min(length + 1, len(self.second) - 1)]
        return ids, np.zeros((depth, 1))


def test_a_relaxed_rule_breaks_greedy_equality_and_the_exact_walk_does_not(world):
    from glance.decoding.loop import Options, speculate

    ref = world.reference[0]
    second = _second_choices(world)
    drafter = _SecondChoice(ref.tolist(), second)
    n = 48

    def run(accept):
        return speculate(
            drafter,
            world.target,
            world.input_ids,
            Options(n, 8, accept=accept),
            positions=world.positions,
        )

    exact = run("exact")
    assert torch.equal(exact, ref[None, : exact.shape[1]])
    relaxed = run("top2")
    assert not torch.equal(relaxed, ref[None, : relaxed.shape[1]])
    # Where it first differs, it took the target's second choice: a rule, not arithmetic.
    first = int((relaxed[0] != ref[: relaxed.shape[1]]).nonzero()[0])
    assert int(relaxed[0, first]) == second[first]


def _second_choices(world):
    """The target's second-ranked token at each index of the greedy reference
    (index ``p`` holds what would follow ``reference[:p]``)."""
    ref = world.reference
    positions = world.positions
    kwargs = {}
    if positions is not None:
        from glance.targets.vl import VisionPositions

        types = torch.zeros_like(ref)
        types[:, : positions.mm_token_type_ids.shape[1]] = positions.mm_token_type_ids
        full = VisionPositions(positions.pixel_values, positions.image_grid_thw, types)
        kwargs, _ = full.prefill(world.target, ref)
    with torch.no_grad():
        logits = world.target(input_ids=ref, **kwargs).logits[0]
    top2 = logits.topk(2, dim=-1).indices[:, 1].tolist()
    return [0] + top2  # logits at p - 1 rank the token at p


def test_relaxed_options_are_checked():
    from glance.decoding.loop import Options
    from glance.decoding.sampling import Sampling

    with pytest.raises(ValueError, match="lossy rule"):
        Options(8, accept="top5")
    with pytest.raises(ValueError, match="temperature must be 0"):
        Options(8, accept="top2", sampling=Sampling(0.7))
    assert Options(8).accept == "exact"
