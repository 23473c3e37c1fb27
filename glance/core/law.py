"""The draftability law: accepted length as a function of the target's entropy.

For one decoding round let ``H`` be the target's next-token entropy at the root
(in nats) and ``a`` the number of drafted tokens the round accepted, without the
bonus token. The law models each further draft token as accepted with
probability ``p = sigmoid(b0 - b1 * H)``, independently, so that ``a`` is
geometric and::

    logit p = b0 - b1 * H        E[a | H] = p / (1 - p) = exp(b0 - b1 * H)

When a round could accept at most ``cap`` tokens (the block's last offset), a
round with ``a == cap`` only says that the true run was at least ``cap`` long:
it is right-censored, and the likelihood treats it so. So is a round that
ended without a rejection before its cap (``censored``: a tree path that ran
out at a leaf): it met no failure, only the end of what was drafted.

:meth:`DraftabilityLaw.fit` fits ``(b0, b1)`` by maximum likelihood and reports
the diagnostics the paper reads the fit against; :meth:`DraftabilityLaw.holds`
is the pass/fail bar, with the project's own thresholds as keyword defaults;
:func:`b1_interval` gives the slope a prompt-level bootstrap interval.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from dataclasses import MISSING, asdict, dataclass, fields

import numpy as np
from scipy import optimize, special, stats

from glance._io import atomic_write_text

__all__ = [
    "DraftabilityLaw",
    "SlopeInterval",
    "b1_interval",
    "check_law_record",
    "holds_thresholds",
    "rank_bins",
]

#: The ceiling's curve (for figures) is summarised in at most this many entropy bins.
CURVE_POINTS = 50


def rank_bins(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Assign each value to one of ``n_bins`` equal-count bins by rank.

    Tied values share their average rank and so always share a bin; bins may
    therefore be uneven, or empty, when many values tie. Returns int64 bin ids
    in ``[0, n_bins)``, shape ``values.shape``.
    """
    n = values.shape[0]
    ranks = stats.rankdata(values, method="average")  # 1..n
    return np.minimum((ranks - 0.5) * n_bins // n, n_bins - 1).astype(np.int64)


def _r2(y: np.ndarray, pred: np.ndarray, weights: np.ndarray | None = None) -> float:
    w = np.ones_like(y) if weights is None else weights
    mean = np.average(y, weights=w)
    total = float(np.sum(w * (y - mean) ** 2))
    if total == 0.0:
        return math.nan
    return 1.0 - float(np.sum(w * (y - pred) ** 2)) / total


def _expected(eta: np.ndarray, cap: np.ndarray | None) -> np.ndarray:
    # p/(1-p) = exp(eta); with a cap, E[min(a, cap)] = sum_{j=1..cap} p**j.
    odds = np.exp(eta)
    if cap is None:
        return odds
    return odds * -np.expm1(cap * -np.logaddexp(0.0, -eta))


def _as_rounds(entropy, accepted, cap, censored=None):
    h = np.asarray(entropy, dtype=np.float64)
    a = np.asarray(accepted, dtype=np.float64)
    if h.ndim != 1 or a.shape != h.shape:
        raise ValueError(
            "entropy and accepted must be 1-D with one value per round; "
            f"got shapes {h.shape} and {a.shape}"
        )
    if not np.isfinite(h).all():
        raise ValueError(f"entropy must be finite; round {int(np.argmin(np.isfinite(h)))} is not")
    if (h < 0).any():
        raise ValueError(f"entropy must be >= 0; round {int(np.argmax(h < 0))} is {h[h < 0][0]}")
    bad = ~np.isfinite(a) | (a < 0) | (a != np.round(a))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"accepted must be integers >= 0; round {i} is {a[i]}")
    if censored is not None:
        s = np.asarray(censored)
        if s.shape != h.shape or s.dtype != np.bool_:
            raise ValueError(
                f"censored must be booleans, one per round; got {s.dtype} of shape {s.shape}"
            )
    if cap is None:
        return h, a, None
    c = np.broadcast_to(np.asarray(cap, dtype=np.float64), h.shape)
    if (~np.isfinite(c) | (c < 1) | (c != np.round(c))).any():
        raise ValueError(f"cap must be an integer >= 1 (or one per round); got {cap!r}")
    over = a > c
    if over.any():
        i = int(np.argmax(over))
        raise ValueError(f"accepted exceeds cap at round {i}: {a[i]:g} > {c[i]:g}")
    return h, a, c


@dataclass(frozen=True)
class DraftabilityLaw:
    """A fitted law and its diagnostics. Build it with :meth:`fit`.

    Attributes:
        b0, b1: the coefficients of ``logit p = b0 - b1 * H``.
        n: number of rounds; ``n_censored`` of them were censored (reached
            their cap, or a leaf through ``censored``).
        r2_round: R² over rounds (unweighted) of the fitted mean, cap-aware when
            a cap was given, against the accepted length.
        r2_ceiling: the in-sample least-squares optimum of the same R² over all
            functions of (entropy, cap) monotone in entropy within each cap: an
            upper bound on ``r2_round`` by construction, and an optimistic one
            (see :func:`_isotonic_ceiling`).
        r2_decile: count-weighted R² of the fitted decile means against the
            observed decile means.
        spearman_rho, spearman_p: rank correlation of entropy and accepted length.
        decile_*: per entropy decile (non-empty ones only), the mean entropy, the
            mean accepted length, the fitted mean, the number of rounds and
            the standard error of the mean accepted length (rounds taken as
            independent; 0 for a decile of one round).
        ceiling_entropy, ceiling_accepted: the ceiling's fit for figures: mean
            entropy and mean ceiling prediction in up to ``CURVE_POINTS``
            equal-count entropy bins (caps mixed as in the rounds).
        ceiling_blocks: constant pieces in the ceiling's fit, summed over caps;
            its in-sample optimism grows with this count.
        entropy_constant, accepted_constant: whether either input had no spread.
        converged: whether the maximum-likelihood fit exists and the optimiser
            reached it with finite coefficients. It does not exist when the
            rounds are (quasi-)completely separated (see :func:`_separation`):
            the likelihood then keeps rising as ``b0`` or ``b1`` runs off to
            infinity, and the reported ``(b0, b1)`` are only where the optimiser
            stopped.
        reason: why ``converged`` is false (``""`` when it is true).
    """

    b0: float
    b1: float
    n: int
    n_censored: int
    r2_round: float
    r2_ceiling: float
    r2_decile: float
    spearman_rho: float
    spearman_p: float
    decile_entropy: tuple[float, ...]
    decile_accepted: tuple[float, ...]
    decile_fitted: tuple[float, ...]
    decile_count: tuple[int, ...]
    ceiling_entropy: tuple[float, ...]
    ceiling_accepted: tuple[float, ...]
    ceiling_blocks: int
    entropy_constant: bool
    accepted_constant: bool
    converged: bool
    reason: str = ""  # a later field: results written before it read as ""
    decile_se: tuple[float, ...] = ()  # later too: older results read as ()

    @classmethod
    def fit(cls, entropy, accepted, cap=None, censored=None) -> DraftabilityLaw:
        """Fit the law by maximum likelihood on one ``(entropy, accepted)`` pair per round.

        Args:
            entropy: ``(n,)`` the target's next-token entropy at each round's root.
            accepted: ``(n,)`` drafted tokens accepted per round, without the bonus.
            cap: ``None``, or the deepest offset a round could accept (a scalar or
                one per round); rounds with ``accepted == cap`` are censored.
            censored: ``None``, or ``(n,)`` booleans: rounds that ended without
                a rejection below their cap (a tree path ending at a leaf),
                censored too. ``n_censored`` counts both kinds.

        A round censored below its cap counts, in ``r2_*``, the deciles and
        the ceiling, with its accepted length as its cap: that is all its path
        offered. ``r2_ceiling`` is isotonic least squares in entropy within each cap
        value, in-sample, on the same rounds and R² as ``r2_round``. Its class
        holds the law's curve for any ``(b0, b1)``, so ``r2_round <=
        r2_ceiling``. It is biased upward (it fits noise as well), which makes
        the ceiling-share test stricter; see :func:`_isotonic_ceiling`.
        """
        h, a, c = _as_rounds(entropy, accepted, cap, censored)
        n = h.shape[0]
        if n < 2:
            raise ValueError(f"fit needs at least 2 rounds; got {n}")
        trials = _trials(a, c, censored)
        x, h_mean, h_scale = _standardise(h)
        theta, converged = _mle(x, a, trials)
        b1 = float(theta[1] / h_scale)
        b0 = float(theta[0] + b1 * h_mean)
        # The optimiser stops at a small gradient, which a divergent fit also
        # reaches: its success alone says nothing when no maximum exists.
        reason = _separation(h, a, trials)
        if not reason and not (math.isfinite(b0) and math.isfinite(b1)):
            reason = f"non-finite coefficients b0={b0}, b1={b1}"
        if not reason and not converged:
            reason = "the optimiser stopped before reaching the maximum likelihood"
        converged = not reason

        # A round censored below its cap (a leaf) could accept at most what it
        # did: its fitted mean, and the ceiling's, are capped there too.
        if c is not None and censored is not None:
            c = np.where(np.asarray(censored, dtype=bool) & (a < c), a, c)
        with np.errstate(over="ignore", invalid="ignore"):  # a runaway fit: NaN, as such
            fitted = _expected(b0 - b1 * h, c)
        deciles = rank_bins(h, 10)
        count = np.bincount(deciles, minlength=10)
        present = count > 0
        cnt = count[present].astype(np.float64)
        dec_h = np.bincount(deciles, weights=h, minlength=10)[present] / cnt
        dec_a = np.bincount(deciles, weights=a, minlength=10)[present] / cnt
        dec_f = np.bincount(deciles, weights=fitted, minlength=10)[present] / cnt
        sq = np.bincount(deciles, weights=a * a, minlength=10)[present] / cnt
        spread = np.maximum(sq - dec_a**2, 0.0) * cnt / np.maximum(cnt - 1, 1)
        dec_se = np.sqrt(spread / cnt)

        ceiling, blocks = _isotonic_ceiling(h, a, c)
        curve = rank_bins(h, min(CURVE_POINTS, n))
        ccount = np.bincount(curve)
        used = ccount > 0
        cur_h = np.bincount(curve, weights=h)[used] / ccount[used]
        cur_a = np.bincount(curve, weights=ceiling)[used] / ccount[used]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # constant input: NaN, reported as such
            rho, p_value = stats.spearmanr(h, a)

        return cls(
            b0=b0,
            b1=b1,
            n=n,
            n_censored=int(n - (trials - a).sum()),
            r2_round=_r2(a, fitted),
            r2_ceiling=_r2(a, ceiling),
            r2_decile=_r2(dec_a, dec_f, cnt),
            spearman_rho=float(rho),
            spearman_p=float(p_value),
            decile_entropy=tuple(dec_h.tolist()),
            decile_accepted=tuple(dec_a.tolist()),
            decile_fitted=tuple(dec_f.tolist()),
            decile_count=tuple(int(v) for v in count[present]),
            ceiling_entropy=tuple(cur_h.tolist()),
            ceiling_accepted=tuple(cur_a.tolist()),
            ceiling_blocks=blocks,
            entropy_constant=bool(np.ptp(h) == 0),
            accepted_constant=bool(np.ptp(a) == 0),
            converged=converged,
            reason=reason,
            decile_se=tuple(dec_se.tolist()),
        )

    def p(self, entropy) -> np.ndarray:
        """Per-token acceptance probability ``sigmoid(b0 - b1 * H)``, vectorised."""
        return special.expit(self.b0 - self.b1 * np.asarray(entropy, dtype=np.float64))

    def expected(self, entropy, cap=None):
        """``E[a | H] = p / (1 - p)``, vectorised over ``entropy``.

        With ``cap``, the mean of ``min(a, cap)`` instead. Returns a float for a
        scalar input and an array otherwise.
        """
        h = np.asarray(entropy, dtype=np.float64)
        c = None if cap is None else np.asarray(cap, dtype=np.float64)
        out = _expected(self.b0 - self.b1 * h, c)
        return float(out) if out.ndim == 0 else out

    def holds(
        self,
        *,
        alpha: float = 0.05,
        decile_r2: float = 0.9,
        ceiling_share: float = 0.5,
        min_rounds: int = 50,
    ) -> tuple[bool, dict[str, bool]]:
        """Whether the law holds on the fitted rounds, and each condition separately.

        Conditions:
            ``slope_positive``: ``b1 > 0``.
            ``rank_negative``: Spearman's rho < 0 with p < ``alpha``.
            ``fit_clears``: ``r2_decile >= decile_r2``, or ``r2_round >=
            ceiling_share * r2_ceiling`` with a positive ceiling.
            ``non_degenerate``: a converged fit (``converged``: not separated)
            with finite coefficients, at least ``min_rounds`` rounds, and
            neither entropy nor accepted length constant.

        The signs are the law's claim itself. The thresholds are the project's
        own choices, fixed before the measurements and derived from no theory;
        :func:`holds_thresholds` returns the defaults so results can record them:
            ``alpha=0.05``: the conventional test level, one test per fit.
            ``decile_r2=0.9``: the curve through the decile means must carry
                nine tenths of their spread.
            ``ceiling_share=0.5``: the two-parameter law must reach half of what
                the best monotone curve explains in-sample.
            ``min_rounds=50``: fewer rounds make rho and the deciles too noisy
                to judge a curve.
        """
        conditions = {
            "slope_positive": bool(self.b1 > 0),
            "rank_negative": bool(self.spearman_rho < 0 and self.spearman_p < alpha),
            "fit_clears": bool(
                self.r2_decile >= decile_r2
                or (self.r2_ceiling > 0 and self.r2_round >= ceiling_share * self.r2_ceiling)
            ),
            "non_degenerate": bool(
                self.converged
                and math.isfinite(self.b0)
                and math.isfinite(self.b1)
                and self.n >= min_rounds
                and not self.entropy_constant
                and not self.accepted_constant
            ),
        }
        return all(conditions.values()), conditions

    def to_dict(self) -> dict:
        """A JSON-ready dict (NaN becomes ``None``)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
            elif isinstance(value, float) and math.isnan(value):
                out[key] = None
        return out

    @classmethod
    def from_dict(cls, data: dict) -> DraftabilityLaw:
        """Inverse of :meth:`to_dict`; a missing field raises ``ValueError``,
        except one with a default (``reason``), which takes it."""
        values = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is not MISSING:
                    continue
                raise ValueError(f"DraftabilityLaw: field {f.name!r} is missing")
            value = data[f.name]
            if isinstance(value, list):
                value = tuple(value)
            elif value is None:
                value = math.nan
            values[f.name] = value
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> DraftabilityLaw:
        return cls.from_dict(json.loads(text))

    def save(self, path) -> None:
        """Write :meth:`to_json` to ``path`` atomically."""
        atomic_write_text(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path) -> DraftabilityLaw:
        with open(path, encoding="utf-8") as f:
            try:
                return cls.from_dict(json.load(f))
            except (json.JSONDecodeError, ValueError) as err:
                raise ValueError(f"{path}: {err}") from err


def holds_thresholds() -> dict[str, float]:
    """The keyword defaults of :meth:`DraftabilityLaw.holds`, by name.

    Read from the signature, so what a result file records as the thresholds
    cannot drift from what ``holds()`` applied."""
    params = inspect.signature(DraftabilityLaw.holds).parameters.values()
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}


@dataclass(frozen=True)
class SlopeInterval:
    """``b1`` with a bootstrap percentile interval (see :func:`b1_interval`)."""

    estimate: float
    low: float
    high: float
    level: float
    resamples: int
    clusters: int
    failed: int
    seed: int


def b1_interval(
    entropy,
    accepted,
    cap,
    groups,
    *,
    resamples: int,
    seed: int,
    level: float = 0.95,
    censored=None,
) -> SlopeInterval:
    """The law's slope with a cluster-bootstrap percentile interval over ``groups``.

    Rounds of one prompt share its image, question and answer, so they are not
    independent, and resampling single rounds would understate the spread. Each
    resample draws as many groups (prompts) as there are, with replacement, and
    refits ``(b0, b1)`` by maximum likelihood on the drawn rounds; the interval
    is the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the refitted
    ``b1``. With ~20 prompts a percentile interval is only roughly calibrated
    (it tends to undercover); read it as the spread across prompts.

    Each refit weights every round by its prompt's draw count, which is the same
    likelihood as refitting on the concatenated resample, and takes batched
    Newton steps from the full-sample fit (the likelihood is convex). A resample
    whose step has not fallen below 1e-10 after 50 steps is left out and counted
    in ``failed``. The same ``seed`` gives the same interval bit for bit.

    Args:
        entropy, accepted, cap, censored: as for :meth:`DraftabilityLaw.fit`.
        groups: ``(n,)`` the cluster of each round (any hashable labels).
    """
    h, a, c = _as_rounds(entropy, accepted, cap, censored)
    g = np.asarray(groups)
    if g.shape != h.shape:
        raise ValueError(f"groups must have one label per round; got {g.shape} for {h.shape}")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1; got {resamples}, {level}")
    _, cluster = np.unique(g, return_inverse=True)
    k = int(cluster.max()) + 1
    trials = _trials(a, c, censored)
    x, _, h_scale = _standardise(h)
    theta, _ = _mle(x, a, trials)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(k, np.full(k, 1.0 / k), size=resamples).astype(np.float64)
    chunk = max(1, 2_000_000 // h.shape[0])  # bounds the (chunk, n) work arrays
    slopes = np.concatenate(
        [
            _newton_slopes(x, a, trials, draws[i : i + chunk][:, cluster], theta)
            for i in range(0, resamples, chunk)
        ]
    )
    ok = slopes[np.isfinite(slopes)] / h_scale
    low, high = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2]) if ok.size else (math.nan,) * 2
    return SlopeInterval(
        estimate=float(theta[1] / h_scale),
        low=float(low),
        high=float(high),
        level=level,
        resamples=resamples,
        clusters=k,
        failed=int(resamples - ok.size),
        seed=seed,
    )


def _trials(a: np.ndarray, c: np.ndarray | None, censored=None) -> np.ndarray:
    # Bernoulli trials per round: the accepted ones plus the rejection, if seen.
    seen = np.ones_like(a, dtype=bool) if c is None else a < c
    if censored is not None:
        seen &= ~np.asarray(censored, dtype=bool)
    return a + seen.astype(np.float64)


def _standardise(h: np.ndarray) -> tuple[np.ndarray, float, float]:
    # Centred and scaled entropy keeps the optimiser well conditioned.
    mean, scale = float(h.mean()), float(h.std()) or 1.0
    return (h - mean) / scale, mean, scale


def _separation(h: np.ndarray, a: np.ndarray, trials: np.ndarray) -> str:
    """Why the maximum-likelihood ``(b0, b1)`` does not exist, or ``""`` when it does.

    Each round is ``a`` accepted trials (successes) and ``trials - a``
    rejections (failures) at its entropy. With one covariate and an intercept,
    the maximum is finite unless the two are (quasi-)completely separated: no
    success or no failure at all (``b0`` runs off to -inf or +inf), or every
    success at an entropy at or below every failure's (``b1`` runs off to +inf),
    or at or above it (``b1`` to -inf). Constant entropy is not separation: it
    leaves ``b1`` unidentified, which ``entropy_constant`` reports.
    """
    success, failure = a > 0, trials > a
    if not success.any():
        return "separation: no round accepted a token, so b0 runs off to -inf"
    if not failure.any():
        return "separation: every round reached its cap, so b0 runs off to +inf"
    if np.ptp(h) == 0:
        return ""
    low, high = h[success], h[failure]
    if low.max() <= high.min():
        return (
            f"separation: every accepted token is at entropy <= {low.max():g} and every "
            f"rejection at entropy >= {high.min():g}, so b1 runs off to +inf"
        )
    if low.min() >= high.max():
        return (
            f"separation: every accepted token is at entropy >= {low.min():g} and every "
            f"rejection at entropy <= {high.max():g}, so b1 runs off to -inf"
        )
    return ""


def _mle(x: np.ndarray, a: np.ndarray, trials: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(theta, converged)``: the maximum-likelihood ``(b0, b1)`` on standardised
    entropy ``x``; ``a`` successes out of ``trials`` per round."""

    def nll(theta):
        eta = theta[0] - theta[1] * x
        p = special.expit(eta)
        value = float(np.sum(trials * np.logaddexp(0.0, eta) - a * eta))
        g = trials * p - a
        return value, np.array([g.sum(), -(g * x).sum()])

    def hess(theta):
        eta = theta[0] - theta[1] * x
        w = trials * special.expit(eta) * special.expit(-eta)
        return np.array([[w.sum(), -(w * x).sum()], [-(w * x).sum(), (w * x * x).sum()]])

    pooled = a.sum() / max(trials.sum(), 1e-12)
    start = np.array([special.logit(np.clip(pooled, 1e-6, 1 - 1e-6)), 0.0])
    res = optimize.minimize(nll, start, jac=True, hess=hess, method="trust-exact")
    return res.x, bool(res.success)


def _newton_slopes(x, a, trials, weights, start, *, steps: int = 50, tol: float = 1e-10):
    """``(R,)`` standardised slopes maximising the likelihood weighted by each
    row of ``weights`` ``(R, n)``, NaN where Newton did not converge."""
    theta = np.tile(start, (weights.shape[0], 1))
    step = np.full_like(theta, np.inf)
    with np.errstate(all="ignore"):  # a diverging row ends as NaN, counted as failed
        for _ in range(steps):
            p = special.expit(theta[:, :1] - theta[:, 1:] * x)
            g = weights * (trials * p - a)
            w = weights * trials * p * (1.0 - p)
            g0, g1 = g.sum(1), -(g @ x)
            h00, h01, h11 = w.sum(1), -(w @ x), w @ (x * x)
            det = h00 * h11 - h01 * h01
            step = np.stack([(h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det], 1)
            theta = theta - step
            if (np.abs(step).max(1) < tol).all():
                break
    return np.where(np.abs(step).max(1) < tol, theta[:, 1], np.nan)


def _isotonic_ceiling(h: np.ndarray, a: np.ndarray, c: np.ndarray | None) -> tuple[np.ndarray, int]:
    """The ceiling's prediction per round ``(n,)`` and its number of constant pieces.

    Class: every ``f(H, cap)`` that, for each cap value, is monotone in ``H``,
    in one direction shared by all caps. It contains the law's prediction for
    any ``(b0, b1)``: ``E[min(a, cap)] = sum_{j <= cap} p**j`` rises with ``p``,
    and ``p = sigmoid(b0 - b1 * H)`` is monotone in ``H`` with the sign of
    ``-b1``, the same at every cap. Least squares over the class splits by cap
    value and, within one, is a weighted isotonic regression of the mean accepted
    length at each distinct entropy (tied entropies must share a value, as they
    do under the law); PAVA solves it exactly. So on the same rounds, with the
    same unweighted R², ``r2_round <= r2_ceiling`` up to rounding, always.

    Bias: it is the in-sample optimum, so it fits noise too and overstates the
    population R² of the best monotone curve, by roughly ``blocks * var / SST``,
    most where a cap value has only a few rounds. An overstated ceiling makes
    ``holds()``'s ``ceiling_share`` test stricter, never easier. It bounds only
    monotone curves: a function of entropy that rises and falls could explain
    more, but the law cannot reach it either.
    """
    caps = np.zeros_like(h) if c is None else c
    best, best_sse, best_blocks = None, math.inf, 0
    for increasing in (False, True):
        pred, blocks = np.empty_like(a), 0
        for value in np.unique(caps):
            rows = np.flatnonzero(caps == value)
            _, tie = np.unique(h[rows], return_inverse=True)  # sorted by entropy
            count = np.bincount(tie).astype(np.float64)
            res = optimize.isotonic_regression(
                np.bincount(tie, weights=a[rows]) / count, weights=count, increasing=increasing
            )
            pred[rows] = res.x[tie]
            blocks += len(res.blocks) - 1
        sse = float(np.sum((a - pred) ** 2))
        if sse < best_sse:
            best, best_sse, best_blocks = pred, sse, blocks
    return best, best_blocks


def check_law_record(data: dict, path) -> dict:
    """``data``, a ``law.json`` read from ``path``, after checking that every
    fit it records (``pooled``, ``tasks.<name>`` and the same under
    ``scored``) agrees with itself: ``holds`` and each of ``conditions`` must
    be what :meth:`~glance.core.law.DraftabilityLaw.holds` gives on the
    recorded fields with the recorded ``thresholds``. A fit that failed
    (``error``) is left as it is. Raises ``ValueError`` naming the file and
    the field."""
    for where, record in _fits(data):
        _check_fit(record, f"{path}: {where}")
    return data


def _fits(data: dict):
    """``(dotted key, fit record)`` for every fit in a ``law.json``."""
    for prefix, part in (("", data), ("scored.", data.get("scored"))):
        if not isinstance(part, dict):
            continue
        if "pooled" in part:
            yield f"{prefix}pooled", part["pooled"]
        for name, record in (part.get("tasks") or {}).items():
            yield f"{prefix}tasks.{name}", record


def _check_fit(record, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a fit (an object); got {type(record).__name__}")
    if "error" in record:
        return
    thresholds = record.get("thresholds")
    if not isinstance(thresholds, dict) or set(thresholds) != set(holds_thresholds()):
        raise ValueError(
            f"{where}.thresholds: expected {sorted(holds_thresholds())}; got {thresholds!r}"
        )
    try:
        ok, conditions = DraftabilityLaw.from_dict(record).holds(**thresholds)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: not a fit of the law ({err})") from err
    recorded = record.get("conditions")
    if not isinstance(recorded, dict):
        raise ValueError(f"{where}.conditions: expected {sorted(conditions)}; got {recorded!r}")
    for name, value in conditions.items():
        if recorded.get(name) is not value:
            raise ValueError(
                f"{where}.conditions.{name}: records {recorded.get(name)!r}, but the fit it "
                f"records gives {value} (b1 {record.get('b1')!r})"
            )
    if record.get("holds") is not ok:
        raise ValueError(
            f"{where}.holds: records {record.get('holds')!r}, but the fit it records gives "
            f"{ok} (conditions {conditions})"
        )
