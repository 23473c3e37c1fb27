import math

import numpy as np
import pytest

from glance.core.metrics import (
    drop_warmup,
    paired_bootstrap,
    pooled_tau,
)


def test_warmup_is_dropped():
    # Four measured samples: three reported.
    assert drop_warmup([9.0, 1.0, 2.0, 3.0]).tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="warm-up"):
        drop_warmup([1.0])


def test_tau_pools_rounds_not_prompts():
    # Prompt A: 12 tokens in 3 rounds (4/round); prompt B: 2 tokens in 1 round.
    # Pooled: 14 / 4 = 3.5. The mean of per-prompt ratios would be 3.0.
    assert pooled_tau([12, 2], [3, 1]) == 3.5
    # Per-round form: each round counts once.
    assert pooled_tau([5, 4, 3, 2], [1, 1, 1, 1]) == 3.5
    with pytest.raises(ValueError, match="at least one round"):
        pooled_tau([0], [0])
    with pytest.raises(ValueError, match="must match"):
        pooled_tau([1, 2], [1])


def test_paired_bootstrap_is_seeded_and_covers_the_truth():
    rng = np.random.default_rng(0)
    baseline = rng.uniform(1.0, 3.0, 100)
    method = baseline / 1.5 * rng.lognormal(0.0, 0.1, 100)
    first = paired_bootstrap(baseline, method, seed=11)
    assert first == paired_bootstrap(baseline, method, seed=11)
    assert first.estimate == pytest.approx(baseline.sum() / method.sum())
    assert first.low < first.estimate < first.high
    assert first.low < 1.5 < first.high
    assert first.high - first.low < 0.1
    assert first.n == 100 and first.confidence == 0.95
    other = paired_bootstrap(baseline, method, seed=12)
    assert (other.low, other.high) != (first.low, first.high)


def test_paired_bootstrap_pairs_prompts():
    # Times vary wildly across prompts but the per-prompt ratio is fixed: a
    # paired bootstrap sees no uncertainty, an unpaired one would.
    baseline = np.array([1.0, 10.0, 100.0, 5.0])
    result = paired_bootstrap(baseline, baseline / 2.0, seed=0)
    assert (result.estimate, result.low, result.high) == (2.0, 2.0, 2.0)


def test_paired_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2 prompts"):
        paired_bootstrap([1.0], [1.0], seed=0)
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([1.0, math.nan], [1.0, 1.0], seed=0)
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0, 2.0], [1.0, 1.0], seed=0, confidence=1.5)


def test_paired_tau_ratio_is_the_ratio_of_pooled_taus_with_an_interval():
    from glance.core.metrics import paired_tau_ratio, pooled_tau

    rng = np.random.default_rng(0)
    committed = rng.integers(80, 140, size=20)
    tree_rounds = rng.integers(15, 30, size=20)
    chain_rounds = tree_rounds + rng.integers(5, 15, size=20)
    est = paired_tau_ratio(committed, tree_rounds, committed, chain_rounds, seed=1, n_resamples=500)
    want = pooled_tau(committed, tree_rounds) / pooled_tau(committed, chain_rounds)
    assert est.estimate == pytest.approx(want)
    assert est.low < est.estimate < est.high and est.low > 1
    with pytest.raises(ValueError, match="paired"):
        paired_tau_ratio(committed, tree_rounds, committed[:5], chain_rounds, seed=1)


def test_offset_acceptance_conditions_on_reaching_the_offset():
    from glance.core.metrics import offset_acceptance

    # rounds: accepted 0 (cap 15), 2 (cap 15), 3 (cap 3: censored), 5 (cap 15)
    acc = offset_acceptance([0, 2, 3, 5], [15, 15, 3, 15], 6)
    assert acc[0] == pytest.approx(3 / 4)  # offset 1: all reached, 3 accepted
    assert acc[2] == pytest.approx(2 / 3)  # offset 3: reached by 2, 3, 5; 2 is rejected there
    assert acc[3] == pytest.approx(1.0)  # offset 4: the capped round never reached it
    assert acc[5] == 0.0  # offset 6: the accepted-5 round reached it and was rejected
    assert offset_acceptance([0], [15], 3)[1:] == [None, None]  # never reached


def test_tau_ceiling_is_what_the_lengths_allow():
    from glance.core.metrics import tau_ceiling

    # 33 new tokens: 1 from the prefill, 32 in two full rounds of 16
    assert tau_ceiling([33], 16) == pytest.approx(16.0)
    # 18 new tokens: 17 in at least two rounds
    assert tau_ceiling([18], 16) == pytest.approx(8.5)
    assert tau_ceiling([33, 18], 16) == pytest.approx((32 + 17) / 4)
