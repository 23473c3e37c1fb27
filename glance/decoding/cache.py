"""One small adapter over ``transformers``' ``DynamicCache`` for the decoder.

A round writes the whole candidate tree into the target's cache, then keeps
only the root and the accepted path. ``DynamicCache`` can crop its tail but not
gather positions, so the gather reaches into its layers' ``keys`` and
``values``; that is the only place in GLANCE that does.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["KVCache"]


class KVCache:
    """A model's ``DynamicCache`` (``.inner``, passed as ``past_key_values``)
    with the edits speculative decoding needs: :meth:`crop` and :meth:`keep`,
    and :meth:`drop_oldest` for a drafter's context window."""

    def __init__(self, config):
        from transformers import DynamicCache

        self.inner = DynamicCache(config=config)

    def __len__(self) -> int:
        return int(self.inner.get_seq_length())

    def crop(self, length: int) -> None:
        """Drop every position from ``length`` on."""
        extra = len(self) - length
        if extra > 0:
            self.inner.crop(-extra)

    def keep(self, start: int, rows: np.ndarray) -> None:
        """Keep positions ``[0, start)`` then ``start + rows``; drop the rest.

        ``rows`` is ascending (a root-to-leaf path, parents first), so entries
        already in place (``rows[i] == i``, the usual case along the best path)
        are not moved; only the rest are gathered down.
        """
        m = rows.shape[0]
        layers = self.inner.layers
        moved = np.flatnonzero(rows != np.arange(m))
        if moved.size:
            first = int(moved[0])
            src = torch.from_numpy(rows[first:] + start).to(layers[0].keys.device)
            for layer in layers:
                layer.keys[..., start + first : start + m, :] = layer.keys[..., src, :]
                layer.values[..., start + first : start + m, :] = layer.values[..., src, :]
        for layer in layers:
            layer.keys = layer.keys[..., : start + m, :]
            layer.values = layer.values[..., : start + m, :]

    def drop_oldest(self, n: int) -> None:
        """Drop the ``n`` oldest positions (a sliding window over the context);
        the rest keep their rotary positions, which were applied when cached."""
        if n > 0:
            for layer in self.inner.layers:
                layer.keys = layer.keys[..., n:, :]
                layer.values = layer.values[..., n:, :]
