"""A separate, smaller model as a drafter: the two-model arm.

It drafts a greedy chain with its own cache, and the decoder verifies and walks
it as any tree, so the output stays the target's own.
"""

from __future__ import annotations

import numpy as np
import torch

from glance.core.tree import CandidateTree
from glance.decoding.cache import KVCache
from glance.drafters.protocol import GrowingDrafter

__all__ = ["SmallModelDrafter"]


class SmallModelDrafter(GrowingDrafter):
    """The two-model arm's :class:`~glance.drafters.protocol.Drafter`: a
    smaller VLM with its own cache that drafts a greedy chain of up to
    ``depth`` tokens per round, verified by the same ``verify`` and ``walk``
    as GLANCE. It reads the prompt with its image itself, and re-reads the
    accepted tokens each round (its cache is cut back to the committed
    tokens before every draft)."""

    width = 1

    def __init__(self, model, positions, depth: int):
        self.model, self.positions, self.max_depth = model, positions, int(depth)

    def start(self, hidden_states, input_ids) -> None:
        self.cache, self.delta, self.length = KVCache(self.model.config), None, 0
        self.pending, self.drafted = input_ids.to(self.model.device), None

    def advance(self, hidden_states, rows) -> None:
        path = rows[1:].cpu().numpy() - 1
        self.pending = torch.from_numpy(self.drafted[path])[None].to(self.model.device)

    def _step(self, ids, first: int):
        if self.delta is None:  # the prompt, with its image
            kwargs, self.delta = self.positions.prefill(self.model, ids)
        else:
            index = torch.arange(first, first + ids.shape[1], device=ids.device)
            kwargs = {"position_ids": self.positions.rows(index, self.delta)}
        out = self.model(
            input_ids=ids,
            past_key_values=self.cache.inner,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return int(out.logits[0, -1].argmax())

    def draft_tree(self, root: int, length: int, depth: int, budget: int):

        self.cache.crop(self.length)
        if self.delta is None:
            self._step(self.pending, 0)
            self.length, self.pending = self.pending.shape[1], self.pending[:, :0]
        root_t = torch.tensor([[root]], device=self.model.device)
        token = self._step(torch.cat([self.pending, root_t], dim=1), self.length)
        self.length = length + 1  # committed: everything up to the root
        tokens = [token]
        for j in range(1, min(depth, budget)):
            tokens.append(
                self._step(torch.tensor([[tokens[-1]]], device=root_t.device), length + j)
            )
        k = len(tokens)
        self.drafted = np.array(tokens, dtype=np.int64)
        return CandidateTree(self.drafted, np.arange(-1, k - 1), np.arange(1, k + 1), np.zeros(k))
