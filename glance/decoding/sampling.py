"""Sampling at temperature > 0, kept exact through the tree walk.

The processed distribution at a position is the target's logits through
``transformers``' own warpers, in the order its ``generate`` applies them:
temperature, then top-k (``top_k=0``: off), then top-p (``top_p=1``: off).

Draws are inverse-CDF draws from one stream of uniforms (:class:`Uniforms`):
output token ``i`` of a request uses uniform ``i``, whichever decoder made it.
So :func:`glance.greedy_generate` and :func:`glance.generate` with equal seeds
give the same text, not only the same distribution (up to float rounding at a
CDF boundary, which float64 makes vanishingly rare).

**The walk, and why it is exact.** At each node of the walk, starting at the
root, draw ``y`` from the target's processed distribution at that node. If a
child of the node carries ``y``, move to it and repeat; otherwise commit ``y``
as the bonus token and stop. The tree is fixed before any of these draws and
depends only on tokens already committed, and siblings carry distinct tokens
(top-k per offset). The target's row at a node is its distribution given the
context plus that node's path (the ancestor-only mask), so every committed
token, accepted or bonus, is one draw from the target's processed distribution
given everything committed before it. That is ancestral sampling from the
target: the output has the target's distribution exactly, whatever the draft.
Only the speed depends on the draft, through how often ``y`` lands on a child.
(This is the rule of Sequoia's greedy tree and of EAGLE's rule for a draft
with q = 1 on its candidates.)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Sampling", "Uniforms", "draw"]


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen. ``temperature == 0`` is greedy (argmax); ``top_k``
    and ``top_p`` then have no effect, as in ``transformers``' ``generate``."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        t, p, k = self.temperature, self.top_p, self.top_k
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            raise ValueError(f"temperature must be a finite number >= 0; got {t!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1]; got {p!r}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: off); got {k!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits):
        """``(R, V)`` processed probabilities (float32 or wider) of ``(R, V)`` logits."""
        import torch
        from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        scores = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
        scores = TemperatureLogitsWarper(float(self.temperature))(None, scores)
        if self.top_k:
            scores = TopKLogitsWarper(int(self.top_k))(None, scores)
        if self.top_p < 1:
            scores = TopPLogitsWarper(float(self.top_p))(None, scores)
        return torch.softmax(scores, dim=-1)


class Uniforms:
    """A request's stream of uniforms in [0, 1), drawn from ``generator`` in
    chunks (float64, on the generator's device). :meth:`peek` looks ahead
    without using them up; :meth:`advance` uses them up."""

    CHUNK = 64

    def __init__(self, generator=None, device=None):
        import torch

        self.generator = generator
        self.device = generator.device if generator is not None else torch.device(device or "cpu")
        self.buffer = torch.empty(0, dtype=torch.float64, device=self.device)

    def peek(self, n: int):
        import torch

        if self.buffer.shape[0] < n:
            more = max(self.CHUNK, n - self.buffer.shape[0])
            fresh = torch.rand(
                more, generator=self.generator, dtype=torch.float64, device=self.device
            )
            self.buffer = torch.cat([self.buffer, fresh])
        return self.buffer[:n]

    def advance(self, n: int) -> None:
        self.peek(n)
        self.buffer = self.buffer[n:]


def draw(probs, u):
    """Row ``r``'s token: the inverse CDF of ``probs[r]`` at ``u[r]``.

    ``probs`` is ``(R, V)``, ``u`` is ``(R,)`` in [0, 1). The CDF is summed in
    float64 and scaled to its own total, so rounding never picks a token of
    probability 0.
    """
    import torch

    cdf = probs.double().cumsum(-1)
    x = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    index = torch.searchsorted(cdf, x, right=True).squeeze(-1)
    return index.clamp_(max=probs.shape[-1] - 1)
