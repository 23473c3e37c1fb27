"""``budget="auto"``: pick each round's tree size from measured cost and expected gain.

A wider tree is free only while the verify pass stays memory-bound; past that
point every node costs time. Like EAGLE's ``total_token=-1`` and Sequoia's
hardware-aware tree size, the decoder measures the verify pass once per target
(:class:`VerifyCost`), then trades that cost against what more nodes would buy.
A cost can also be given as a fixed table (``VerifyCosts(fixed=...)``, with a
fixed ``draft_ms``): then the tree sizes are a function of the inputs alone, so
the output and its statistics reproduce bit for bit on any machine, at the
price of a table that was measured elsewhere.

The gain comes from the draft itself. Nodes are packed best-first, so the first
``N`` nodes of a large tree are exactly the budget-``N`` tree, and under the
head's own marginals a node is accepted with the probability of its path; the
expected accepted length of the budget-``N`` tree is therefore the sum of the
first ``N`` path probabilities. Heads are not calibrated, so that sum is scaled
by ``alpha``, the ratio of accepted to predicted tokens over the rounds decoded
so far (:class:`AcceptanceScale`). Each round takes the ``N`` on the measured
grid that maximises ``(1 + alpha * S_N) / (draft + verify(N))``, expected tokens
per millisecond.

Needs numpy only.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

__all__ = ["AUTO_SIZES", "AcceptanceScale", "VerifyCost", "VerifyCosts", "choose_budget"]

#: tree sizes the verify pass is timed at, and that ``budget="auto"`` picks from
AUTO_SIZES = (1, 3, 7, 15, 31, 63, 127, 255)


@dataclass(frozen=True)
class VerifyCost:
    """Verify-pass milliseconds at each tree size (``sizes`` ascending).

    ``draft_ms``: a fixed draft-pass cost per round; ``None`` uses each
    round's measured draft time."""

    sizes: tuple[int, ...]
    ms: tuple[float, ...]
    draft_ms: float | None = None

    def __post_init__(self):
        if len(self.sizes) != len(self.ms) or not self.sizes:
            raise ValueError("VerifyCost needs one time per size, and at least one size")
        if any(b <= a for a, b in zip(self.sizes, self.sizes[1:], strict=False)):
            raise ValueError(f"VerifyCost sizes must be strictly ascending; got {self.sizes}")
        if not all(np.isfinite(self.ms)) or min(self.ms) <= 0:
            raise ValueError(f"VerifyCost times must be finite and positive; got {self.ms}")
        if self.draft_ms is not None and not (np.isfinite(self.draft_ms) and self.draft_ms >= 0):
            raise ValueError(f"VerifyCost draft_ms must be finite and >= 0; got {self.draft_ms}")

    def at(self, n) -> np.ndarray:
        """Verify milliseconds at tree size(s) ``n``, interpolated linearly."""
        return np.interp(n, self.sizes, self.ms)


class VerifyCosts:
    """A book of measured verify costs, one per target, device and dtype.

    The caller holds it and passes it to every ``budget="auto"`` call that
    should share one measurement (the stages keep one per run). Entries go
    with their target (weak keys). With ``fixed``, every target gets that cost
    and nothing is measured."""

    def __init__(self, fixed: VerifyCost | None = None):
        self._book: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.fixed = fixed

    def get(self, target, measure) -> VerifyCost:
        """The cost for ``target`` as it is now placed, from ``measure()`` the
        first time (or the fixed cost)."""
        if self.fixed is not None:
            return self.fixed
        key = (str(target.device), str(target.dtype))
        known = self._book.setdefault(target, {})
        if key not in known:
            known[key] = measure()
        return known[key]


@dataclass
class AcceptanceScale:
    """Running ratio of accepted to predicted tokens: ``(accepted + 1) / (predicted + 1)``.

    The ``+ 1`` keeps the first rounds near the head's own prediction."""

    accepted: float = 0.0
    predicted: float = 0.0
    history: list[float] = field(default_factory=list)

    @property
    def alpha(self) -> float:
        return (self.accepted + 1.0) / (self.predicted + 1.0)

    def update(self, accepted: int, predicted: float) -> None:
        self.accepted += accepted
        self.predicted += predicted
        self.history.append(self.alpha)


def choose_budget(
    path_logprobs: np.ndarray, cost: VerifyCost, draft_ms: float, alpha: float = 1.0
) -> tuple[int, float]:
    """The tree size to verify, and the accepted length it is expected to give.

    Args:
        path_logprobs: the nodes' path log-probabilities in packing order, from a
            tree built with the largest size on ``cost``'s grid.
        cost: the target's measured verify cost.
        draft_ms: the round's draft-pass time (a cost paid whatever ``N``);
            ``cost.draft_ms`` replaces it when set.
        alpha: the acceptance scale (see :class:`AcceptanceScale`).

    Returns:
        ``(N, predicted)``: ``N`` in ``cost.sizes`` (capped at the tree's size)
        and the unscaled expected accepted length ``S_N`` of its first ``N`` nodes.
    """
    lp = np.asarray(path_logprobs, dtype=np.float64)
    if lp.size == 0:
        return 0, 0.0
    gain = np.cumsum(np.exp(lp))
    sizes = np.array([n for n in cost.sizes if n < lp.size] + [lp.size])
    sizes = np.unique(sizes)
    if cost.draft_ms is not None:
        draft_ms = cost.draft_ms
    expected = 1.0 + alpha * gain[sizes - 1]
    rate = expected / (draft_ms + cost.at(sizes))
    best = int(sizes[int(np.argmax(rate))])
    return best, float(gain[best - 1])
