"""Metric conventions. Every number GLANCE reports follows these three rules.

1. **Warm-up.** The first sample of every run is a warm-up and is dropped
   (:func:`drop_warmup`): ``n`` reported samples are measured as ``n + 1``.
2. **Pooled accepted length.** A task's accepted length ``tau`` pools rounds:
   the committed tokens of all its prompts summed, over all their rounds summed
   (:func:`pooled_tau`). It is never a mean of per-prompt ratios, because
   prompts differ in how many rounds they take.
3. **Ratios.** A speedup is a ratio within one system: a method's time against
   the same system's own autoregressive baseline, measured in the same run
   (:func:`paired_bootstrap`), the ratio of total times. Speedups of several
   tasks combine by geometric mean, never arithmetic.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = [
    "RatioEstimate",
    "drop_warmup",
    "paired_bootstrap",
    "pooled_tau",
]


def _vector(name: str, values, *, positive: bool = False) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite; entry {int(np.argmin(np.isfinite(arr)))} is not")
    if positive and (arr <= 0).any():
        i = int(np.argmax(arr <= 0))
        raise ValueError(f"{name} must be > 0; entry {i} is {arr[i]}")
    return arr


def drop_warmup(samples) -> np.ndarray:
    """Drop the first (warm-up) sample of a run: ``(n + 1,)`` in, ``(n,)`` out."""
    arr = np.asarray(samples)
    if arr.ndim < 1 or arr.shape[0] < 2:
        raise ValueError(
            f"a run needs a warm-up sample plus at least one measured sample; got shape {arr.shape}"
        )
    return arr[1:]


def pooled_tau(committed, rounds) -> float:
    """Tokens committed per round, pooled: ``sum(committed) / sum(rounds)``.

    Args:
        committed: ``(n,)`` tokens committed per prompt (or per round).
        rounds: ``(n,)`` rounds taken per prompt (or ``1`` per round).
    """
    c = _vector("committed", committed)
    r = _vector("rounds", rounds)
    if c.shape != r.shape:
        raise ValueError(f"committed and rounds must match; got {c.shape} and {r.shape}")
    if (c < 0).any() or (r < 0).any():
        raise ValueError("committed and rounds must be >= 0")
    if r.sum() == 0:
        raise ValueError("pooled_tau needs at least one round")
    return float(c.sum() / r.sum())


@dataclass(frozen=True)
class RatioEstimate:
    """A speedup with its bootstrap interval: ``low <= estimate <= high`` typically."""

    estimate: float
    low: float
    high: float
    confidence: float
    n: int
    n_resamples: int
    seed: int


def paired_bootstrap(
    baseline_times,
    method_times,
    *,
    seed: int,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
) -> RatioEstimate:
    """The speedup ``sum(baseline) / sum(method)`` with a paired bootstrap interval.

    Prompts are resampled with replacement, keeping each prompt's baseline and
    method time together, and the interval is scipy's BCa interval of the ratio.
    Inputs are per-prompt times after :func:`drop_warmup`; ``seed`` makes the
    interval reproducible.
    """
    b = _vector("baseline_times", baseline_times, positive=True)
    m = _vector("method_times", method_times, positive=True)
    if b.shape != m.shape:
        raise ValueError(f"baseline and method times must be paired; got {b.shape} and {m.shape}")
    if b.shape[0] < 2:
        raise ValueError(f"paired_bootstrap needs at least 2 prompts; got {b.shape[0]}")

    def ratio(base, method, axis=-1):
        return base.sum(axis=axis) / method.sum(axis=axis)

    return _bca_ratio((b, m), ratio, seed=seed, n_resamples=n_resamples, confidence=confidence)


def paired_tau_ratio(
    committed_a,
    rounds_a,
    committed_b,
    rounds_b,
    *,
    seed: int,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
) -> RatioEstimate:
    """``pooled_tau(a) / pooled_tau(b)`` with a paired bootstrap interval.

    Each prompt's committed tokens and rounds under both systems are resampled
    together (scipy's BCa interval), as :func:`paired_bootstrap` does for times.
    Inputs are per-prompt counts after :func:`drop_warmup`.
    """
    arrays = [
        _vector(name, x, positive=True)
        for name, x in (
            ("committed_a", committed_a),
            ("rounds_a", rounds_a),
            ("committed_b", committed_b),
            ("rounds_b", rounds_b),
        )
    ]
    if len({x.shape for x in arrays}) != 1:
        raise ValueError(f"counts must be paired; got shapes {[x.shape for x in arrays]}")
    if arrays[0].shape[0] < 2:
        raise ValueError(f"paired_tau_ratio needs at least 2 prompts; got {arrays[0].shape[0]}")

    def ratio(ca, ra, cb, rb, axis=-1):
        return (ca.sum(axis=axis) / ra.sum(axis=axis)) / (cb.sum(axis=axis) / rb.sum(axis=axis))

    return _bca_ratio(arrays, ratio, seed=seed, n_resamples=n_resamples, confidence=confidence)


def _bca_ratio(arrays, ratio, *, seed: int, n_resamples: int, confidence: float) -> RatioEstimate:
    """``ratio(*arrays)`` with scipy's paired BCa bootstrap interval over prompts."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    with warnings.catch_warnings():
        # A zero-spread bootstrap distribution makes BCa warn; handled below.
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap(
            arrays,
            ratio,
            paired=True,
            vectorized=True,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    estimate = float(ratio(*arrays))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if np.ptp(res.bootstrap_distribution) == 0 or not (np.isfinite(low) and np.isfinite(high)):
        # Every resample gives the same ratio (one system is a constant multiple
        # of the other): the interval is that point, where BCa returns NaN.
        low = high = estimate
    return RatioEstimate(
        estimate=estimate,
        low=low,
        high=high,
        confidence=confidence,
        n=int(arrays[0].shape[0]),
        n_resamples=n_resamples,
        seed=seed,
    )


def offset_acceptance(accepted, cap, depth: int) -> list[float | None]:
    """P(offset k accepted | offset k reached), for k = 1..``depth``.

    A round reaches offset ``k`` when it accepted the ``k - 1`` before it and
    its effective cap allows ``k``. ``None`` where no round reached ``k``.
    """
    a = np.asarray(accepted, dtype=np.int64)
    c = np.asarray(cap, dtype=np.int64)
    out = []
    for k in range(1, depth + 1):
        reached = (a >= k - 1) & (c >= k)
        out.append(float((a[reached] >= k).mean()) if reached.any() else None)
    return out


def tau_ceiling(new_tokens, block: int) -> float:
    """The highest pooled tau that outputs of these lengths allow with a block of
    ``block`` tokens (``block - 1`` drafted plus the bonus per round). The first
    new token comes from the prefill, as in the decoders, and is not a round's."""
    n = _vector("new_tokens", new_tokens) - 1
    return float(n.sum() / np.ceil(n / block).sum())
