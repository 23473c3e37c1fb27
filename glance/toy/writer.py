"""The fourth world's writer: free letters from distributions that vary by context.

Not used by any stage yet (issue 43, ``notes/issue43/README.md``). Today's
writer (:func:`glance.toy.tasks.free_word`) draws a free letter uniformly from
the ``m`` letters :data:`~glance.toy.tasks.SUCCESSORS` allows after the two
characters before it, so a position's entropy is either about 0 or ``ln m``.
Here every context ``(a, b)`` has its own distribution over ``K`` allowed
letters, drawn once from a symmetric Dirichlet whose concentration ``alpha``
grades a task: a small ``alpha`` gives peaked rows (low entropy, a clear
favourite), a large one flat rows. Within a task the rows' entropies, and the
margins between their first and second letters, spread continuously.

The rows are constants of the world (seeded), so a target can learn them
exactly; the writer returns, with each letter, the row it was drawn from, so a
target can be trained on the distribution itself and a position's entropy is
known. Needs numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glance.toy.tasks import ALPHABET, LETTERS, SUCCESSORS

__all__ = ["Rows", "free_letters", "row_entropy", "successor_rows"]


@dataclass(frozen=True)
class Rows:
    """Every context's distribution: ``ids[a, b]`` the ``K`` letters (indices
    into :data:`~glance.toy.tasks.LETTERS`) allowed after characters ``a, b``
    (indices into :data:`~glance.toy.tasks.ALPHABET`), ``probs[a, b]`` their
    probabilities, each row summing to 1."""

    ids: np.ndarray  # (A, A, K) int
    probs: np.ndarray  # (A, A, K) float64
    alpha: float


def successor_rows(alpha: float, k: int = 8, seed: int = 0) -> Rows:
    """The rows of a task with concentration ``alpha`` over ``k`` letters: the
    first ``k`` of :data:`~glance.toy.tasks.SUCCESSORS` for each context, with
    probabilities drawn from ``Dirichlet(alpha)`` by a generator seeded with
    ``[13, seed]``. Raises ``ValueError`` for ``alpha <= 0`` or ``k`` outside
    ``2..len(LETTERS)``."""
    if not alpha > 0 or not np.isfinite(alpha):
        raise ValueError(f"alpha: expected a finite number > 0; got {alpha!r}")
    if not 2 <= k <= len(LETTERS):
        raise ValueError(f"k: expected an integer in 2..{len(LETTERS)}; got {k!r}")
    n = len(ALPHABET)
    rng = np.random.default_rng([13, seed])
    probs = rng.dirichlet(np.full(k, float(alpha)), size=n * n).reshape(n, n, k)
    # a Dirichlet with a small alpha can give exact zeros: keep every allowed letter possible
    probs = np.maximum(probs, 1e-12)
    probs /= probs.sum(-1, keepdims=True)
    return Rows(SUCCESSORS[:, :, :k].copy(), probs, float(alpha))


def row_entropy(probs: np.ndarray) -> np.ndarray:
    """Entropy in nats of each distribution along the last axis of ``probs``."""
    p = np.asarray(probs, dtype=np.float64)
    return -(p * np.log(np.clip(p, 1e-300, 1.0))).sum(-1)


def free_letters(before: str, count: int, rows: Rows, rng: np.random.Generator):
    """``count`` free letters after the text ``before``, each drawn from its
    context's row. Returns ``(letters, dists)``: the letters as a string, and
    for each letter ``(ids, probs)``, the characters it could have been
    (strings) and their probabilities."""
    text = before[-2:].rjust(2)
    dists = []
    for _ in range(count):
        a, b = ALPHABET.index(text[-2]), ALPHABET.index(text[-1])
        ids, probs = rows.ids[a, b], rows.probs[a, b]
        pick = int(rng.choice(len(ids), p=probs))
        dists.append(([LETTERS[i] for i in ids], probs.copy()))
        text += LETTERS[int(ids[pick])]
    return text[2:], dists
