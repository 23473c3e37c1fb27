import math

import numpy as np
import pytest

from glance.metrics import (
    drop_warmup,
    geometric_mean,
    paired_bootstrap,
    pooled_tau,
    speedup,
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


def test_speedup_is_a_ratio_of_totals_after_warmup():
    baseline = drop_warmup([50.0, 2.0, 4.0, 6.0])  # 12 s measured
    method = drop_warmup([40.0, 1.0, 1.0, 2.0])  # 4 s measured
    assert speedup(baseline, method) == 3.0
    with pytest.raises(ValueError, match="paired"):
        speedup([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"method_times must be > 0; entry 1"):
        speedup([1.0, 2.0], [1.0, 0.0])


def test_tasks_combine_by_geometric_mean():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([1.5]) == pytest.approx(1.5)
    # Inverse speedups cancel under the geometric mean, not the arithmetic one.
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="> 0"):
        geometric_mean([2.0, -1.0])


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
