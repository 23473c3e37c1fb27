"""Drafters: what proposes one round's candidates.

The decoder (:func:`glance.decode.speculate`) asks a :class:`Drafter` for each
block offset's best candidates, plans a tree from them, verifies it, commits
the accepted path, and hands the verify pass's hidden states back. The drafter
never sees the tree search, the target's cache or the walk, so any proposer
that fills the ``(depth, width)`` candidate table fits: the DFlash block head
(:class:`BlockDrafter`), the same head as a chain (``width=1``), a scripted
proposer in tests (:class:`glance.testing.ScriptedDrafter`), an autoregressive
feature head or n-gram lookup.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from glance.cache import KVCache
from glance.head import check_head_fits, context_features, lm_head, noise_embedding
from glance.tree import CandidateTree, search_tree, spine_leaf, splice

__all__ = ["BlockDrafter", "Drafter", "TreeDrafter"]


@runtime_checkable
class Drafter(Protocol):
    """Proposes per-offset candidates for one round.

    ``width``: candidates per offset. ``max_depth``: the deepest offset one
    proposal reaches (for a block head, ``block_size - 1``).
    """

    width: int
    max_depth: int

    def start(self, hidden_states) -> None:
        """Read the prefill pass's hidden states (every layer, every position)."""

    def propose(self, root: int, length: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, logprobs)``, each ``(depth, width)``, rows sorted best first,
        for offsets ``1..depth`` after ``root``, which sits at sequence index
        ``length`` (the target's cache holds the ``length`` tokens before it)."""

    def advance(self, hidden_states, rows: torch.Tensor) -> None:
        """Read the verify pass's hidden states at ``rows`` (the root and the
        accepted nodes), before the next :meth:`propose`."""


@runtime_checkable
class TreeDrafter(Protocol):
    """Proposes a whole tree per round, for drafters whose candidates at one
    depth depend on the tokens chosen above them (an autoregressive head
    growing a dynamic tree, :class:`glance.eagle.EagleDrafter`). The decoder
    verifies, walks and commits it exactly as a planned tree, so the output
    stays lossless.
    """

    width: int
    max_depth: int

    def start(self, hidden_states, input_ids: torch.Tensor) -> None:
        """Read the prefill's hidden states and the prompt's ``(1, n)`` ids."""

    def draft_tree(self, root: int, length: int, depth: int, budget: int) -> CandidateTree:
        """At most ``budget`` nodes at most ``depth`` deep after ``root``, which
        sits at sequence index ``length``; prefix-closed, packed parents-first."""

    def advance(self, hidden_states, rows: torch.Tensor) -> None:
        """As :meth:`Drafter.advance`; ``rows`` index the latest tree's rows."""


class BlockDrafter:
    """A ``dflash.DFlashDraftModel`` head as a :class:`Drafter`: one head pass
    over ``[root, MASK x depth]`` fills every offset, reading the target's
    hidden states at the head's kept layers. ``width=1`` is the chain."""

    def __init__(self, head, target, width: int):
        check_head_fits(head, target)
        self.head, self.target, self.width = head, target, int(width)
        self.max_depth = int(head.block_size) - 1
        self.layer_ids = list(head.target_layer_ids)
        self.output = lm_head(target)
        self.cache = KVCache(head.config)
        self.context = None  # features not yet in the head's cache
        self._last = None  # the latest proposal: (root, length, top ids)

    def start(self, hidden_states) -> None:
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
        self.cache.crop(first + context.shape[1])
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
