"""Drafters: what proposes one round's candidates.

The decoder (:func:`glance.decoding.loop.speculate`) asks a :class:`Drafter` for each
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

from glance.core.tree import CandidateTree

__all__ = ["Drafter", "TreeDrafter"]


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
    growing a dynamic tree, :class:`glance.drafters.eagle.EagleDrafter`). The decoder
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
