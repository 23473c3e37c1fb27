import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glance.core.budget import AUTO_SIZES, AcceptanceScale, VerifyCost, choose_budget
from glance.core.tree import build_budget_tree


def draft(seed, depth=15, k=8, temperature=3.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(depth, 200)) * temperature
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    top = np.argsort(-logp, axis=1)[:, :k]
    return top, np.take_along_axis(logp, top, axis=1)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from(AUTO_SIZES), st.floats(0.5, 6.0))
def test_first_n_nodes_of_a_big_tree_are_the_budget_n_tree(seed, n, temperature):
    ids, lp = draft(seed, temperature=temperature)
    big = build_budget_tree(ids, lp, 255, 8)
    small = build_budget_tree(ids, lp, n, 8)
    for name in ("tokens", "parents", "depths", "logprobs"):
        assert (getattr(big, name)[:n] == getattr(small, name)).all()


def test_flat_cost_takes_the_widest_tree():
    ids, lp = draft(0)
    tree = build_budget_tree(ids, lp, 255, 8)
    flat = VerifyCost(AUTO_SIZES, tuple(10.0 for _ in AUTO_SIZES))
    assert choose_budget(tree.logprobs, flat, draft_ms=2.0)[0] == 255


def test_steep_cost_takes_a_small_tree():
    ids, lp = draft(0, temperature=8.0)  # peaked: the spine carries most of the mass
    tree = build_budget_tree(ids, lp, 255, 8)
    steep = VerifyCost(AUTO_SIZES, tuple(1.0 + n for n in AUTO_SIZES))
    n, predicted = choose_budget(tree.logprobs, steep, draft_ms=1.0)
    assert n <= 15
    assert predicted == pytest.approx(np.exp(tree.logprobs[:n]).sum())


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 2**16),
    st.lists(st.floats(0.1, 100.0), min_size=len(AUTO_SIZES), max_size=len(AUTO_SIZES)),
    st.floats(0.0, 50.0),
    st.floats(0.05, 3.0),
)
def test_choice_maximises_expected_tokens_per_ms(seed, ms, draft_ms, alpha):
    ids, lp = draft(seed)
    tree = build_budget_tree(ids, lp, 255, 8)
    cost = VerifyCost(AUTO_SIZES, tuple(ms))
    n, _ = choose_budget(tree.logprobs, cost, draft_ms, alpha)
    p = np.exp(tree.logprobs)

    def rate(m):
        return (1 + alpha * p[:m].sum()) / (draft_ms + cost.at(m))

    assert n in AUTO_SIZES or n == len(tree)
    assert all(rate(n) >= rate(m) - 1e-12 for m in AUTO_SIZES if m <= len(tree))


def test_acceptance_scale_tracks_the_ratio():
    scale = AcceptanceScale()
    assert scale.alpha == 1.0
    scale.update(accepted=3, predicted=7.0)
    scale.update(accepted=1, predicted=1.0)
    assert scale.alpha == pytest.approx(5 / 9)
    assert len(scale.history) == 2


@pytest.mark.parametrize(
    "sizes, ms, match",
    [
        ((1, 3), (1.0,), "one time per size"),
        ((3, 1), (1.0, 2.0), "ascending"),
        ((1, 3), (1.0, 0.0), "positive"),
    ],
)
def test_verify_cost_rejects_bad_curves(sizes, ms, match):
    with pytest.raises(ValueError, match=match):
        VerifyCost(sizes, ms)


def test_a_fixed_draft_cost_replaces_the_measured_one():
    ids, lp = draft(3)
    tree = build_budget_tree(ids, lp, 255, 8)
    ms = tuple(1.0 + n / 20 for n in AUTO_SIZES)
    fixed = VerifyCost(AUTO_SIZES, ms, draft_ms=2.0)
    drafts = (0.0, 2.0, 400.0)
    got = {choose_budget(tree.logprobs, fixed, draft_ms=d)[0] for d in drafts}
    assert got == {choose_budget(tree.logprobs, VerifyCost(AUTO_SIZES, ms), 2.0)[0]}
    # without the fixed cost, these same draft times do move the choice
    free = VerifyCost(AUTO_SIZES, ms)
    assert len({choose_budget(tree.logprobs, free, draft_ms=d)[0] for d in drafts}) > 1


def test_a_fixed_book_never_measures():
    from glance.core.budget import VerifyCosts

    fixed = VerifyCost((1, 3), (1.0, 2.0), draft_ms=0.5)

    def measure():
        raise AssertionError("a fixed book measured")

    assert VerifyCosts(fixed=fixed).get(object(), measure) is fixed
    with pytest.raises(ValueError, match="draft_ms"):
        VerifyCost((1, 3), (1.0, 2.0), draft_ms=float("nan"))


def test_auto_planner_caps_each_scaled_node_at_one():
    """``budget="auto"`` scales the head's path probabilities by the running
    acceptance ratio, each capped at 1 (a node is accepted at most once), and
    predicts with the unscaled ones."""
    from glance.decoding.loop import _Planner

    ids, lp = draft(3, temperature=8.0)  # peaked: many path probabilities near 1
    cost = VerifyCost(AUTO_SIZES, tuple(1.0 + 0.05 * n for n in AUTO_SIZES), draft_ms=1.0)
    planner = _Planner("auto", cost)
    planner.scale.update(accepted=40, predicted=9.0)  # alpha = 41 / 10
    tree = planner.plan(ids, lp, draft_ms=1.0)
    full = build_budget_tree(ids, lp, 255, 8)
    capped = np.minimum(np.exp(full.logprobs) * planner.scale.alpha, 1.0)

    def rate(m):
        return (1 + capped[:m].sum()) / (1.0 + cost.at(m))

    assert len(tree) in AUTO_SIZES
    assert rate(len(tree)) >= max(rate(m) for m in AUTO_SIZES) - 1e-12
    assert planner.predicted == pytest.approx(np.exp(full.logprobs[: len(tree)]).sum())
    # uncapped, the scaled gain would be past the nodes' count and pick a wider tree
    uncapped, _ = choose_budget(full.logprobs, cost, 1.0, planner.scale.alpha)
    assert uncapped >= len(tree)
