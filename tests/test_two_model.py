"""The two-model arm's drafter: a separate small VLM, verified by GLANCE's loop."""

from __future__ import annotations

import torch

import glance
from glance import testing as tiny
from glance.drafters.small import SmallModelDrafter
from glance.targets.vl import StreamPositions


def _run(world, assistant, depth=6):
    drafter = SmallModelDrafter(assistant, world.positions or StreamPositions(), depth)
    return glance.generate(
        drafter,
        world.target,
        world.input_ids,
        64,
        budget=depth,
        positions=world.positions,
        return_stats=True,
    )


def test_a_small_drafter_model_is_lossless(world):
    kind = world.kind
    assistant = tiny.build_target(kind, seed=7, hidden=32, layers=2, dtype=world.target.dtype)
    out, stats = _run(world, assistant)
    assert torch.equal(out, world.reference[:, : out.shape[1]])
    assert all(r.tree_size <= 6 for r in stats.rounds)


def test_the_target_as_its_own_drafter_accepts_every_token(world):
    out, stats = _run(world, world.target, depth=6)
    assert torch.equal(out, world.reference[:, : out.shape[1]])
    # every round but the last accepts the whole chain (6 drafted + the bonus)
    assert all(r.committed == 7 for r in stats.rounds[:-1]), [r.committed for r in stats.rounds]
