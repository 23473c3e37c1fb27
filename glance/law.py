"""The draftability law: accepted length as a function of the target's entropy.

For one decoding round let ``H`` be the target's next-token entropy at the root
(in nats) and ``a`` the number of drafted tokens the round accepted, without the
bonus token. The law models each further draft token as accepted with
probability ``p = sigmoid(b0 - b1 * H)``, independently, so that ``a`` is
geometric and::

    logit p = b0 - b1 * H        E[a | H] = p / (1 - p) = exp(b0 - b1 * H)

When a round could accept at most ``cap`` tokens (the block's last offset), a
round with ``a == cap`` only says that the true run was at least ``cap`` long:
it is right-censored, and the likelihood treats it so.

:meth:`DraftabilityLaw.fit` fits ``(b0, b1)`` by maximum likelihood and reports
the diagnostics the paper reads the fit against; :meth:`DraftabilityLaw.holds`
is the pass/fail bar.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, fields

import numpy as np
from scipy import optimize, special, stats

from glance._io import atomic_write_text

__all__ = ["DraftabilityLaw", "rank_bins"]

#: ``fit_clears`` accepts a count-weighted decile R² at or above this.
DECILE_R2_BAR = 0.9
#: ``non_degenerate`` needs at least this many rounds.
MIN_ROUNDS = 50
#: The ceiling uses at most this many entropy bins.
MAX_CEILING_BINS = 50


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


def _as_rounds(entropy, accepted, cap):
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
        n: number of rounds; ``n_censored`` of them reached their cap.
        r2_round: R² over rounds of the fitted mean (cap-aware when a cap was
            given) against the accepted length.
        r2_ceiling: the share of round-level variance any function of entropy
            alone could explain, estimated by cross-fitted binned means (see
            :meth:`fit`), over ``ceiling_bins`` bins.
        r2_decile: count-weighted R² of the fitted decile means against the
            observed decile means.
        spearman_rho, spearman_p: rank correlation of entropy and accepted length.
        decile_*: per entropy decile (non-empty ones only), the mean entropy, the
            mean accepted length, the fitted mean and the number of rounds.
        entropy_constant, accepted_constant: whether either input had no spread.
        converged: whether the optimiser reported success.
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
    ceiling_bins: int
    entropy_constant: bool
    accepted_constant: bool
    converged: bool

    @classmethod
    def fit(cls, entropy, accepted, cap=None, *, folds: int = 5, seed: int = 0) -> DraftabilityLaw:
        """Fit the law by maximum likelihood on one ``(entropy, accepted)`` pair per round.

        Args:
            entropy: ``(n,)`` the target's next-token entropy at each round's root.
            accepted: ``(n,)`` drafted tokens accepted per round, without the bonus.
            cap: ``None``, or the deepest offset a round could accept (a scalar or
                one per round); rounds with ``accepted == cap`` are censored.
            folds: folds for the cross-fitted ceiling.
            seed: seeds the fold assignment of the ceiling.

        The ceiling bins entropy into ``clip(ceil(n ** (1/3)), 2, 50)``
        equal-count bins by rank (the usual rate for a histogram regression of a
        smooth curve) and predicts each round by the mean accepted length of its
        bin computed on the other folds only, so noise in the bin means lowers
        the estimate rather than inflating it.
        """
        h, a, c = _as_rounds(entropy, accepted, cap)
        n = h.shape[0]
        if n < 2:
            raise ValueError(f"fit needs at least 2 rounds; got {n}")
        uncensored = np.ones(n) if c is None else (a < c).astype(np.float64)
        trials = a + uncensored

        # Centre and scale entropy so the optimiser sees a well-conditioned problem.
        h_mean = float(h.mean())
        h_scale = float(h.std()) or 1.0
        x = (h - h_mean) / h_scale

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
        b1 = float(res.x[1] / h_scale)
        b0 = float(res.x[0] + b1 * h_mean)

        fitted = _expected(b0 - b1 * h, c)
        deciles = rank_bins(h, 10)
        count = np.bincount(deciles, minlength=10)
        present = count > 0
        cnt = count[present].astype(np.float64)
        dec_h = np.bincount(deciles, weights=h, minlength=10)[present] / cnt
        dec_a = np.bincount(deciles, weights=a, minlength=10)[present] / cnt
        dec_f = np.bincount(deciles, weights=fitted, minlength=10)[present] / cnt

        n_bins = int(np.clip(math.ceil(n ** (1 / 3)), 2, MAX_CEILING_BINS))
        r2_ceiling = _cross_fitted_r2(h, a, n_bins, folds, seed)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # constant input: NaN, reported as such
            rho, p_value = stats.spearmanr(h, a)

        return cls(
            b0=b0,
            b1=b1,
            n=n,
            n_censored=int(n - uncensored.sum()),
            r2_round=_r2(a, fitted),
            r2_ceiling=r2_ceiling,
            r2_decile=_r2(dec_a, dec_f, cnt),
            spearman_rho=float(rho),
            spearman_p=float(p_value),
            decile_entropy=tuple(dec_h.tolist()),
            decile_accepted=tuple(dec_a.tolist()),
            decile_fitted=tuple(dec_f.tolist()),
            decile_count=tuple(int(v) for v in count[present]),
            ceiling_bins=n_bins,
            entropy_constant=bool(np.ptp(h) == 0),
            accepted_constant=bool(np.ptp(a) == 0),
            converged=bool(res.success),
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

    def holds(self) -> tuple[bool, dict[str, bool]]:
        """Whether the law holds on the fitted rounds, and each condition separately.

        Conditions:
            ``slope_positive``: ``b1 > 0``.
            ``rank_negative``: Spearman's rho < 0 with p < 0.05.
            ``fit_clears``: ``r2_decile >= 0.9``, or ``r2_round >= 0.5 * r2_ceiling``
            with a positive ceiling.
            ``non_degenerate``: finite coefficients, at least 50 rounds, and
            neither entropy nor accepted length constant.
        """
        conditions = {
            "slope_positive": bool(self.b1 > 0),
            "rank_negative": bool(self.spearman_rho < 0 and self.spearman_p < 0.05),
            "fit_clears": bool(
                self.r2_decile >= DECILE_R2_BAR
                or (self.r2_ceiling > 0 and self.r2_round >= 0.5 * self.r2_ceiling)
            ),
            "non_degenerate": bool(
                math.isfinite(self.b0)
                and math.isfinite(self.b1)
                and self.n >= MIN_ROUNDS
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
        """Inverse of :meth:`to_dict`; a missing field raises ``ValueError``."""
        values = {}
        for f in fields(cls):
            if f.name not in data:
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


def _cross_fitted_r2(h, a, n_bins: int, folds: int, seed: int) -> float:
    """Out-of-fold R² of per-bin mean accepted length (see ``DraftabilityLaw.fit``)."""
    n = h.shape[0]
    if n < 2 * folds or folds < 2:
        return math.nan
    bins = rank_bins(h, n_bins)
    fold = np.random.default_rng(seed).permutation(n) % folds
    pred = np.empty(n)
    for f in range(folds):
        train, test = fold != f, fold == f
        count = np.bincount(bins[train], minlength=n_bins)
        total = np.bincount(bins[train], weights=a[train], minlength=n_bins)
        means = np.where(count > 0, total / np.maximum(count, 1), a[train].mean())
        pred[test] = means[bins[test]]
    return _r2(a, pred)
