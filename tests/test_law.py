import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glance import DraftabilityLaw
from glance.core.law import _newton_slopes, _standardise, b1_interval, holds_thresholds, rank_bins

B0, B1, CAP = 2.0, 1.5, 15


def simulate(n, seed, b0=B0, b1=B1, cap=CAP):
    """Rounds drawn from the law itself: a ~ Geometric, cut at the cap."""
    rng = np.random.default_rng(seed)
    entropy = rng.uniform(0.0, 3.0, n)
    p = 1.0 / (1.0 + np.exp(-(b0 - b1 * entropy)))
    accepted = rng.geometric(1.0 - p) - 1  # failures before the first rejection
    if cap is not None:
        accepted = np.minimum(accepted, cap)
    return entropy, accepted, p


@pytest.fixture(scope="module")
def rounds():
    return simulate(20_000, seed=0)


@pytest.fixture(scope="module")
def law(rounds):
    entropy, accepted, _ = rounds
    return DraftabilityLaw.fit(entropy, accepted, cap=CAP)


def test_fit_recovers_known_coefficients(law, rounds):
    assert law.n == 20_000
    assert law.n_censored == int((rounds[1] == CAP).sum()) > 0
    assert law.b0 == pytest.approx(B0, rel=0.1)
    assert law.b1 == pytest.approx(B1, rel=0.1)
    assert law.converged
    ok, conditions = law.holds()
    assert ok, conditions


def test_censoring_is_what_makes_the_fit_right(rounds):
    # Reading capped rounds as exact lengths biases the slope; the cap fixes it.
    entropy, accepted, _ = rounds
    naive = DraftabilityLaw.fit(entropy, accepted)
    assert abs(naive.b1 - B1) > abs(DraftabilityLaw.fit(entropy, accepted, cap=CAP).b1 - B1)


def test_rounds_that_end_at_a_leaf_are_censored_not_rejections():
    # A tree whose paths run out early: each round's run is cut at a random
    # leaf depth below the cap. Reading the cut as a rejection biases b0 and
    # b1; marking it censored recovers the law.
    entropy, accepted, _ = simulate(20_000, seed=2)
    leaf = np.random.default_rng(3).integers(1, CAP + 1, accepted.shape)
    cut = accepted > leaf
    seen = np.where(cut, leaf, accepted)
    at_leaf = cut | (seen == leaf) & (seen < CAP)  # the run reached the leaf: no rejection seen
    naive = DraftabilityLaw.fit(entropy, seen, cap=CAP)
    honest = DraftabilityLaw.fit(entropy, seen, cap=CAP, censored=at_leaf)
    assert honest.b0 == pytest.approx(B0, rel=0.1) and honest.b1 == pytest.approx(B1, rel=0.1)
    assert abs(naive.b0 - B0) > 5 * abs(honest.b0 - B0)
    assert honest.n_censored == int((at_leaf | (seen == CAP)).sum())
    # fitted means cap a leaf round at its depth, as its observation is
    assert honest.r2_round <= honest.r2_ceiling + 1e-12 and honest.r2_decile > 0.9
    interval = b1_interval(
        entropy, seen, CAP, np.arange(entropy.size) // 50, resamples=50, seed=0, censored=at_leaf
    )
    assert interval.low < B1 < interval.high
    with pytest.raises(ValueError, match="censored must be booleans, one per round"):
        DraftabilityLaw.fit(entropy, seen, cap=CAP, censored=at_leaf[:-1])


def test_fit_without_cap_recovers_uncensored_data():
    entropy, accepted, _ = simulate(20_000, seed=1, cap=None)
    law = DraftabilityLaw.fit(entropy, accepted)
    assert law.n_censored == 0
    assert law.b0 == pytest.approx(B0, rel=0.1)
    assert law.b1 == pytest.approx(B1, rel=0.1)


def test_shuffled_entropy_fails_the_rank_condition(rounds):
    entropy, accepted, _ = rounds
    shuffled = np.random.default_rng(7).permutation(entropy)
    ok, conditions = DraftabilityLaw.fit(shuffled, accepted, cap=CAP).holds()
    assert not ok
    assert not conditions["rank_negative"]


def test_ceiling_matches_the_true_conditional_mean(law, rounds):
    entropy, accepted, p = rounds
    # The best any function of entropy can do is the true E[min(a, cap) | H].
    true_mean = p * (1 - p**CAP) / (1 - p)
    resid = ((accepted - true_mean) ** 2).sum()
    true_r2 = 1 - resid / ((accepted - accepted.mean()) ** 2).sum()
    # In-sample, so a little above the truth, never far with 20k rounds.
    assert true_r2 <= law.r2_ceiling <= true_r2 + 0.01
    # The law is the true model here, so it nearly reaches the ceiling.
    assert law.r2_round == pytest.approx(true_r2, abs=0.01)
    assert law.r2_round <= law.r2_ceiling
    assert law.r2_decile > 0.99


def test_decile_curve(law, rounds):
    entropy, accepted, _ = rounds
    assert len(law.decile_count) == 10
    assert sum(law.decile_count) == law.n
    assert list(law.decile_entropy) == sorted(law.decile_entropy)
    assert law.decile_accepted[0] > law.decile_accepted[-1]
    low = entropy <= np.quantile(entropy, 0.1)
    assert law.decile_accepted[0] == pytest.approx(accepted[low].mean(), rel=0.02)
    se = accepted[low].std(ddof=1) / np.sqrt(low.sum())
    assert law.decile_se[0] == pytest.approx(se, rel=0.02)
    assert law.spearman_rho < 0 and law.spearman_p < 1e-10


def test_expected_is_vectorised(law):
    h = np.array([[0.0, 0.5], [1.0, 2.0]])
    out = law.expected(h)
    assert out.shape == (2, 2)
    assert np.allclose(out, np.exp(law.b0 - law.b1 * h))
    p = law.p(0.5)
    assert law.expected(0.5) == pytest.approx(p / (1 - p))
    assert isinstance(law.expected(0.05), float)
    capped = law.expected(h, cap=3)
    assert (capped < out).all() and (capped <= 3).all()
    assert law.expected(0.0, cap=1) == pytest.approx(law.p(0.0))


def test_json_round_trip(law, tmp_path):
    again = DraftabilityLaw.from_json(law.to_json())
    assert again == law
    path = tmp_path / "out" / "law.json"
    law.save(path)
    assert DraftabilityLaw.load(path) == law
    assert [p.name for p in path.parent.iterdir()] == ["law.json"]  # no temp files left
    data = json.loads(path.read_text())
    del data["b1"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"law\.json.*'b1' is missing"):
        DraftabilityLaw.load(path)


def test_nan_survives_json():
    law = DraftabilityLaw.fit(np.ones(60), np.arange(60) % 3)
    assert math.isnan(law.spearman_rho)
    again = DraftabilityLaw.from_json(law.to_json())
    assert math.isnan(again.spearman_rho)
    assert "NaN" not in law.to_json()


def test_degenerate_fits_do_not_hold():
    rng = np.random.default_rng(2)
    # Constant entropy.
    ok, cond = DraftabilityLaw.fit(np.ones(100), rng.integers(0, 5, 100)).holds()
    assert not ok and not cond["non_degenerate"]
    # Constant accepted length.
    ok, cond = DraftabilityLaw.fit(rng.uniform(0, 2, 100), np.full(100, 2)).holds()
    assert not ok and not cond["non_degenerate"]
    # Too few rounds, even with a real signal.
    entropy, accepted, _ = simulate(49, seed=3)
    ok, cond = DraftabilityLaw.fit(entropy, accepted, cap=CAP).holds()
    assert not cond["non_degenerate"]


def test_reversed_slope_fails():
    entropy, accepted, _ = simulate(5_000, seed=4, b0=-1.0, b1=-1.0)
    ok, cond = DraftabilityLaw.fit(entropy, accepted, cap=CAP).holds()
    assert not ok
    assert not cond["slope_positive"] and not cond["rank_negative"]


@pytest.mark.parametrize(
    ("entropy", "accepted", "cap", "match"),
    [
        ([0.1, 0.2], [1], None, "one value per round"),
        ([0.1, math.nan], [1, 2], None, "round 1"),
        ([0.1, -0.2], [1, 2], None, ">= 0; round 1"),
        ([0.1, 0.2], [1, 2.5], None, "integers >= 0; round 1"),
        ([0.1, 0.2], [1, -1], None, "integers >= 0; round 1"),
        ([0.1, 0.2], [1, 4], 3, "exceeds cap at round 1"),
        ([0.1, 0.2], [1, 2], 0, "cap must be"),
        ([0.1], [1], None, "at least 2 rounds"),
    ],
)
def test_bad_input_is_named(entropy, accepted, cap, match):
    with pytest.raises(ValueError, match=match):
        DraftabilityLaw.fit(entropy, accepted, cap=cap)


def test_rank_bins_keep_ties_together():
    values = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    bins = rank_bins(values, 5)
    assert len(set(bins[:4].tolist())) == 1
    assert bins.tolist() == sorted(bins.tolist())
    assert bins.min() >= 0 and bins.max() == 4


def test_ceiling_curve_is_compact(law):
    assert len(law.ceiling_entropy) == len(law.ceiling_accepted) == 50
    assert list(law.ceiling_entropy) == sorted(law.ceiling_entropy)
    # One cap: the ceiling is the non-increasing isotonic fit, so are its bin means.
    assert np.all(np.diff(law.ceiling_accepted) <= 1e-12)
    assert 1 < law.ceiling_blocks < law.n


def _bound_holds(entropy, accepted, cap):
    law = DraftabilityLaw.fit(entropy, accepted, cap=cap)
    if math.isnan(law.r2_round):  # no spread in accepted, or the fit overflowed
        return law
    assert law.r2_round <= law.r2_ceiling + 1e-12, (law.r2_round, law.r2_ceiling)
    assert law.r2_ceiling <= 1.0 + 1e-12
    return law


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 120),
    seed=st.integers(0, 2**32 - 1),
    slope=st.floats(-3.0, 3.0),
    ties=st.booleans(),
    caps=st.sampled_from(["none", "scalar", "per_round"]),
)
def test_ceiling_bounds_the_law_on_random_rounds(n, seed, slope, ties, caps):
    rng = np.random.default_rng(seed)
    entropy = rng.exponential(1.0, n)
    if ties:
        entropy = np.round(entropy, 1)
    p = 1.0 / (1.0 + np.exp(-(rng.normal(1.0, 1.0) - slope * entropy)))
    accepted = rng.geometric(1.0 - np.clip(p, 1e-3, 0.999)) - 1
    cap = {"none": None, "scalar": int(rng.integers(1, 6)), "per_round": rng.integers(1, 6, n)}[
        caps
    ]
    if cap is not None:
        accepted = np.minimum(accepted, cap)  # many rounds censored
    _bound_holds(entropy, accepted, cap)


@pytest.mark.parametrize("seed", range(20))
def test_ceiling_bounds_the_law_when_the_law_is_wrong(seed):
    # A non-monotone truth (a bump) with heavy censoring: the law misfits, the bound holds.
    rng = np.random.default_rng(seed)
    entropy = rng.uniform(0.0, 4.0, 300)
    mean = 1.0 + 4.0 * np.exp(-((entropy - 2.0) ** 2))
    cap = rng.integers(1, 16, 300)
    accepted = np.minimum(rng.poisson(mean), cap)
    law = _bound_holds(entropy, accepted, cap)
    assert law.n_censored > 0


ROUNDS = sorted(Path(__file__).resolve().parent.parent.glob("results/decode/*/rounds.jsonl"))


@pytest.mark.skipif(not ROUNDS, reason="no committed rounds (dvc pull results/decode)")
@pytest.mark.parametrize("path", ROUNDS, ids=lambda p: p.parent.name)
def test_ceiling_bounds_the_law_on_committed_rounds(path):
    from glance.experiments.results import read_rounds

    entropy, accepted, cap = read_rounds(path, system="glance")
    law = _bound_holds(entropy, accepted, cap)
    assert math.isfinite(law.r2_round) and law.n_censored > 0


def test_thresholds_are_parameters(law):
    defaults = holds_thresholds()
    assert defaults == {"alpha": 0.05, "decile_r2": 0.9, "ceiling_share": 0.5, "min_rounds": 50}
    assert law.holds(**defaults) == law.holds()
    assert law.holds(min_rounds=law.n + 1)[1]["non_degenerate"] is False
    assert law.holds(alpha=law.spearman_p / 2)[1]["rank_negative"] is False
    # fit_clears passes by the deciles; lift both bars past what the fit reaches.
    ok, cond = law.holds(decile_r2=law.r2_decile + 1e-9)
    assert ok and cond["fit_clears"]  # still clears through the ceiling share
    ratio = law.r2_round / law.r2_ceiling
    ok, cond = law.holds(decile_r2=law.r2_decile + 1e-9, ceiling_share=ratio + 1e-9)
    assert not ok and not cond["fit_clears"]


@pytest.fixture(scope="module")
def clustered():
    """Rounds from 30 prompts, each with its own offset in b0 (so rounds of a
    prompt are correlated), and the prompt of each round."""
    rng = np.random.default_rng(11)
    prompts = np.repeat(np.arange(30), 40)
    entropy = rng.exponential(1.0, prompts.size)
    b0 = B0 + rng.normal(0.0, 0.5, 30)[prompts]
    p = 1.0 / (1.0 + np.exp(-(b0 - B1 * entropy)))
    accepted = np.minimum(rng.geometric(1.0 - p) - 1, CAP)
    return entropy, accepted, prompts


def test_b1_interval_contains_the_estimate_and_is_reproducible(clustered):
    entropy, accepted, prompts = clustered
    law = DraftabilityLaw.fit(entropy, accepted, cap=CAP)
    ci = b1_interval(entropy, accepted, CAP, prompts, resamples=400, seed=3)
    assert ci.estimate == pytest.approx(law.b1, rel=1e-6)
    assert ci.low < ci.estimate < ci.high and ci.low < B1 < ci.high
    assert (ci.clusters, ci.failed, ci.resamples, ci.level) == (30, 0, 400, 0.95)
    assert b1_interval(entropy, accepted, CAP, prompts, resamples=400, seed=3) == ci
    other = b1_interval(entropy, accepted, CAP, prompts, resamples=400, seed=4)
    assert (other.low, other.high) != (ci.low, ci.high)
    narrow = b1_interval(entropy, accepted, CAP, prompts, resamples=400, seed=3, level=0.5)
    assert ci.low < narrow.low < narrow.high < ci.high


def test_b1_interval_refit_equals_refit_on_repeated_rounds(clustered):
    # Weighting a round by its draw count is the same likelihood as repeating it.
    entropy, accepted, _ = clustered
    counts = np.random.default_rng(5).integers(0, 3, entropy.size)
    direct = DraftabilityLaw.fit(np.repeat(entropy, counts), np.repeat(accepted, counts), CAP)
    x, mean, scale = _standardise(entropy)
    a = accepted.astype(np.float64)
    trials = a + (a < CAP)
    start = np.array([0.0, 0.0])
    slope = _newton_slopes(x, a, trials, counts[None, :].astype(np.float64), start)
    assert slope[0] / scale == pytest.approx(direct.b1, rel=1e-6)


def test_b1_interval_rejects_bad_groups(clustered):
    entropy, accepted, prompts = clustered
    with pytest.raises(ValueError, match="one label per round"):
        b1_interval(entropy, accepted, CAP, prompts[:-1], resamples=10, seed=0)
    with pytest.raises(ValueError, match="resamples >= 1"):
        b1_interval(entropy, accepted, CAP, prompts, resamples=0, seed=0)


def _task_fit(b0, low, high, seed, b1=B1, n=1500):
    from glance.experiments.law_fit import fit

    rng = np.random.default_rng(seed)
    h = rng.uniform(low, high, n)
    p = 1.0 / (1.0 + np.exp(-(b0 - b1 * h)))
    a = np.minimum(rng.geometric(1.0 - p) - 1, CAP)
    prompts = np.repeat(np.arange(n // 50), 50)
    return fit(h, a, np.full(n, CAP), prompts, a >= CAP, resamples=200, seed=0)


def test_the_law_of_two_rows_is_compared_by_b1_and_grounding_order():
    """Two rows' fits of the same three tasks: a scorer that lifts every task
    alike (b0 up, b1 the same) keeps b1's interval and the grounding order; one
    that lifts the least draftable task past the others changes the order."""
    from glance.experiments.law_fit import compare_laws, grounding_order

    tasks = {"caption": (2.0, 2.6), "docvqa": (0.8, 1.5), "chartqa": (0.0, 0.6)}
    plain = {name: _task_fit(2.0, lo, hi, i) for i, (name, (lo, hi)) in enumerate(tasks.items())}
    assert grounding_order(plain) == ["caption", "docvqa", "chartqa"]
    lifted = {
        name: _task_fit(2.5, lo, hi, 10 + i) for i, (name, (lo, hi)) in enumerate(tasks.items())
    }
    pooled = _task_fit(2.0, 0.0, 2.6, 99)
    both = compare_laws(
        {"pooled": pooled, "tasks": plain},
        {"pooled": _task_fit(2.5, 0.0, 2.6, 98), "tasks": lifted},
    )
    assert both["same_grounding_order"] and both["b1_intervals_overlap"]
    assert abs(both["b1"]["glance_scored"] - B1) < 0.3
    reordered = dict(lifted, caption=_task_fit(6.0, 2.0, 2.6, 5))
    assert grounding_order(reordered)[0] != "caption"
    other = compare_laws({"pooled": pooled, "tasks": plain}, {"pooled": pooled, "tasks": reordered})
    assert not other["same_grounding_order"]


def test_the_law_table_shows_the_scorers_fit_and_the_comparison():
    from glance.experiments.law_fit import compare_laws
    from glance.reporting.readme import law_table

    tasks = {"caption": (2.0, 2.6), "chartqa": (0.0, 0.6)}
    plain = {n: _task_fit(2.0, lo, hi, i) for i, (n, (lo, hi)) in enumerate(tasks.items())}
    law = {"pooled": _task_fit(2.0, 0.0, 2.6, 7), "tasks": plain}
    assert "scorer" not in law_table(law)
    law["scored"] = {"pooled": _task_fit(2.5, 0.0, 2.6, 8), "tasks": plain}
    law["scored_vs_glance"] = compare_laws(law, law["scored"])
    text = law_table(law)
    assert text.count("| pooled |") == 2 and "consistency scorer's rounds" in text
    assert f"Pooled b1: {law['pooled']['b1']:.2f} without the scorer" in text
    assert "caption, chartqa without the scorer; caption, chartqa with it (the same)" in text


def test_the_regime_reports_how_much_root_entropy_varies_among_uncertain_rounds():
    from glance.experiments.results import regime, root_entropy_iqr

    # rounds at or below 0.05 nats are left out: a copy-heavy task's many
    # near-certain rounds would otherwise pull both quartiles to zero
    assert root_entropy_iqr([0.0, 0.01, 0.05, 1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0
    assert root_entropy_iqr([0.0, 0.02]) is None
    rounds = [{"system": "glance", "entropy": h, "stop": "rejection"} for h in (0.0, 1.0, 2.0)]
    rounds += [{"system": "chain", "entropy": 9.0, "accepted": 1, "cap": 15}]
    out = regime({"ar": [{"new_tokens": 120}]}, rounds, block=16)
    assert out["root_entropy"] == 1.0 and out["root_entropy_iqr"] == 0.5
