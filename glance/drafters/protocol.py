"""The drafter protocol: what proposes one round's candidate tree.

The decoder (:func:`glance.decoding.loop.speculate`) starts a :class:`Drafter`
on the prompt, asks it for each round's :class:`~glance.core.tree.CandidateTree`,
verifies the tree, walks it, commits the accepted path, and hands the verify
pass's hidden states back. The drafter never sees the target's cache or the
walk.

A drafter that fills a ``(depth, width)`` candidate table (the DFlash block
head, the same head as a chain, a scripted proposer in tests, n-gram lookup)
derives from :class:`TableDrafter`: it writes :meth:`TableDrafter.propose`
and hands the table to the round's :class:`Plan`, which builds the budget tree
(or, with ``budget="auto"``, picks its size). A drafter whose candidates at
one depth depend on the tokens chosen above them (an autoregressive head
growing a dynamic tree, a second model's chain) builds its tree itself, with
at most ``plan.budget`` nodes.

Extending a tree past the block (``extend_budget``) is an optional
capability: a drafter that has it defines ``extend(tree, room, budget)``
(:class:`Extends`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from glance.core.tree import CandidateTree

__all__ = ["Drafter", "Extends", "GrowingDrafter", "Plan", "TableDrafter"]


class Plan(Protocol):
    """The round's planner, handed to :meth:`Drafter.draft`. ``budget``: the
    verified nodes per round, an int, or ``"auto"``."""

    budget: int | str

    def __call__(self, ids: np.ndarray, logprobs: np.ndarray) -> CandidateTree:
        """The round's tree from a ``(depth, width)`` candidate table."""


@runtime_checkable
class Drafter(Protocol):
    """Drafts one round's candidate tree.

    ``width``: candidates per depth. ``max_depth``: the deepest node one round
    reaches (for a block head, ``block_size - 1``).
    """

    width: int
    max_depth: int

    def start(self, hidden_states, input_ids: torch.Tensor) -> None:
        """Read the prefill pass's hidden states (every layer, every position)
        and the prompt's ``(1, n)`` ids."""

    def draft(self, root: int, length: int, depth: int, plan: Plan) -> CandidateTree:
        """The round's tree after ``root``, which sits at sequence index
        ``length`` (the target's cache holds the ``length`` tokens before it):
        at most ``depth`` deep, prefix-closed, packed parents-first."""

    def advance(self, hidden_states, rows: torch.Tensor) -> None:
        """Read the verify pass's hidden states at ``rows`` (the root, then the
        accepted nodes' rows of the latest tree), before the next draft."""


@runtime_checkable
class Extends(Protocol):
    """The optional capability behind ``extend_budget``."""

    def extend(self, tree: CandidateTree, room: int, budget: int) -> CandidateTree:
        """``tree`` with up to ``budget`` more nodes, at most ``room`` deeper."""


class TableDrafter:
    """A :class:`Drafter` that proposes per-offset candidates: subclasses set
    ``width`` and ``max_depth`` and write :meth:`propose`, :meth:`start` and
    :meth:`advance`; the round's :class:`Plan` makes the tree."""

    width: int
    max_depth: int

    def propose(self, root: int, length: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, logprobs)``, each ``(depth, width)``, rows sorted best first,
        for offsets ``1..depth`` after ``root``."""
        raise NotImplementedError

    def draft(self, root: int, length: int, depth: int, plan: Plan) -> CandidateTree:
        return plan(*self.propose(root, length, depth))


class GrowingDrafter:
    """A :class:`Drafter` that grows its own tree: subclasses set ``width``
    and ``max_depth`` and write :meth:`draft_tree`, :meth:`start` and
    :meth:`advance`. It takes a fixed budget only, never ``"auto"``."""

    width: int
    max_depth: int
    #: the loop refuses ``budget="auto"`` for this drafter before the prefill
    fixed_budget = True

    def draft_tree(self, root: int, length: int, depth: int, budget: int) -> CandidateTree:
        """At most ``budget`` nodes at most ``depth`` deep after ``root``."""
        raise NotImplementedError

    def draft(self, root: int, length: int, depth: int, plan: Plan) -> CandidateTree:
        refuse_auto(self, plan.budget)
        return self.draft_tree(root, length, depth, plan.budget)


def refuse_auto(drafter, budget) -> None:
    """A drafter with ``fixed_budget`` takes an int budget only."""
    if getattr(drafter, "fixed_budget", False) and isinstance(budget, str):
        raise ValueError(
            f"{type(drafter).__name__} grows its own tree: budget must be an int; "
            f"got budget={budget!r}"
        )
