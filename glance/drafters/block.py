"""The DFlash block head as a :class:`~glance.drafters.protocol.Drafter`: one head
pass fills every offset of a block.
"""

from __future__ import annotations

import numpy as np
import torch

from glance.core.tree import CandidateTree, search_tree, spine_leaf, splice
from glance.decoding.cache import KVCache
from glance.drafters.protocol import TableDrafter
from glance.heads.block import check_head_fits, context_features, lm_head, noise_embedding

__all__ = ["BlockDrafter"]


class BlockDrafter(TableDrafter):
    """A ``dflash.DFlashDraftModel`` head as a
    :class:`~glance.drafters.protocol.Drafter`: one head pass over ``[root,
    MASK x depth]`` fills every offset, reading the target's hidden states at
    the head's kept layers. ``width=1`` is the chain.

    ``window``: ``None`` (the head attends to the whole context), or the most
    context positions the head keeps in its cache; older ones are dropped
    after each pass, so a pass costs the same at any context length. The
    drafts change, the output does not (the target verifies every token)."""

    def __init__(self, head, target, width: int, window: int | None = None):
        check_head_fits(head, target)
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ValueError(f"draft_window must be None or an int >= 1; got {window!r}")
        self.head, self.target, self.width = head, target, int(width)
        self.max_depth = int(head.block_size) - 1
        self.layer_ids = list(head.target_layer_ids)
        self.output = lm_head(target)
        self.cache = KVCache(head.config)
        self.window, self.dropped = window, 0  # positions dropped from the cache's front
        self.context = None  # features not yet in the head's cache
        self._last = None  # the latest proposal: (root, length, top ids)

    def start(self, hidden_states, input_ids=None) -> None:
        self.context = context_features(hidden_states, self.layer_ids)

    def advance(self, hidden_states, rows: torch.Tensor) -> None:
        self.context = context_features(hidden_states, self.layer_ids)[:, rows]

    def _pass(self, block_ids: torch.Tensor, context, first: int) -> torch.Tensor:
        """One head pass; the cache keeps the context, not the block."""
        head, device = self.head, block_ids.device
        n = context.shape[1] + block_ids.shape[1]
        hidden = head(
            target_hidden=context,
            noise_embedding=noise_embedding(head, self.target, block_ids),
            position_ids=torch.arange(first, first + n, device=device)[None],
            past_key_values=self.cache.inner,
            use_cache=True,
        )
        self.cache.crop(first + context.shape[1] - self.dropped)
        if self.window is not None and len(self.cache) > self.window:
            extra = len(self.cache) - self.window
            self.cache.drop_oldest(extra)
            self.dropped += extra
        return hidden[0]

    def _top(self, hidden: torch.Tensor, width: int):
        logits = self.head.compute_logits(hidden, self.output)
        logp = torch.log_softmax(logits.float(), dim=-1)
        lp, ids = logp.topk(min(width, logp.shape[-1]), dim=-1)
        return ids.cpu().numpy(), lp.cpu().numpy()

    def propose(self, root: int, length: int, depth: int):
        device = self.target.device
        block = torch.full((1, depth + 1), int(self.head.mask_token_id), device=device)
        block[0, 0] = root
        hidden = self._pass(block, self.context, length - self.context.shape[1])
        ids, lp = self._top(hidden[1:], self.width)
        self._last = (root, length, ids)
        return ids, lp

    def extend(self, tree: CandidateTree, room: int, budget: int) -> CandidateTree:
        """``tree`` with up to ``budget`` more nodes below its spine leaf.

        The spine is the latest proposal's best token at every offset. When the
        tree holds the whole spine, one more head pass over ``[root, spine,
        MASK x room]`` (the spine revealed, not masked) prices the ``room``
        offsets after the block; their best-first subtree is spliced below the
        spine's leaf. Otherwise ``tree`` comes back unchanged, with no pass.
        Needs a head trained with a variable mask span.
        """
        root, length, ids = self._last
        depth = ids.shape[0]
        leaf = spine_leaf(tree, ids[:, 0])
        if leaf is None:
            return tree
        device = self.target.device
        block = torch.full((1, 1 + depth + room), int(self.head.mask_token_id), device=device)
        block[0, 0] = root
        block[0, 1 : depth + 1] = torch.from_numpy(np.ascontiguousarray(ids[:, 0])).to(device)
        hidden = self._pass(block, self.context[:, :0], length)
        more_ids, more_lp = self._top(hidden[depth + 1 :], ids.shape[1])
        return splice(tree, leaf, search_tree(more_ids, more_lp, budget))
