"""Session-wide tiny models, saved once with save_pretrained and loaded back
through the same paths real checkpoints take."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from glance.core.numerics import Numerics

# The tests run under the pipeline's pinned numerics, set before torch loads:
# unpinned, MKL's results depend on how a tensor is aligned in memory, so a
# head loaded from safetensors can compute differently from the one saved.
# numpy is already loaded here; its settings reach the stage subprocesses.
# Under pytest-xdist (the default, see pyproject.toml) each worker has a core
# to itself, so one thread: two threads a worker would oversubscribe the cores.
#: the thread count this test process is pinned at (a stage run in-process
#: must be given the same, or it refuses to start)
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else Numerics().threads
os.environ.update(Numerics(threads=THREADS).env())

KINDS = ("qwen3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl")
#: the kinds a test on the ``world`` fixture runs on in the quick suite
#: (``-m "not slow"``): a text target and Qwen3-VL. The other two Qwen-VL
#: generations run in the full suite, which CI runs.
QUICK_KINDS = ("qwen3", "qwen3_vl")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is not None and spec.params.get("world", QUICK_KINDS[0]) not in QUICK_KINDS:
            item.add_marker(pytest.mark.slow)
        # A module-scoped fixture (the tiny pipeline's dvc repro, a trained head)
        # is built once per worker that needs it: keep its tests on one worker.
        defs = item._fixtureinfo.name2fixturedefs
        shared = sorted(name for name, d in defs.items() if d and d[-1].scope == "module")
        if shared:
            group = f"{item.module.__name__}:{','.join(shared)}"
            item.add_marker(pytest.mark.xdist_group(group))
    # The tiny pipeline's group is the longest (about ten minutes): start it first.
    items.sort(key=lambda item: "repro" not in item.fixturenames)


@dataclass
class World:
    kind: str
    target: object
    head: object
    input_ids: object
    positions: object  # None for text targets
    hf_kwargs: dict  # image inputs for target.generate
    reference: object  # target.generate(do_sample=False) ids, 96 new tokens


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    from glance import testing as tiny

    root = tmp_path_factory.mktemp("checkpoints")
    paths = {}
    for kind in KINDS:
        target = tiny.build_target(kind)
        head = tiny.build_head(target)
        target.save_pretrained(root / kind / "target")
        head.save_pretrained(root / kind / "head")
        paths[kind] = (root / kind / "target", root / kind / "head")
    return paths


def _prompt(kind, target):
    import torch

    from glance import testing as tiny
    from glance.targets.vl import VisionPositions

    before, after = [3, 17, 42, 8], [11, 29, 5, 60, 2]
    if kind == "qwen3":
        return torch.tensor([before + after]), None, {}
    ids, pixels, grid, types = tiny.image_prompt(target, before, after)
    positions = VisionPositions(pixels, grid, types)
    return ids, positions, dict(pixel_values=pixels, image_grid_thw=grid, mm_token_type_ids=types)


@pytest.fixture(scope="session", params=KINDS)
def world(request, checkpoints):
    import torch

    from glance import load_block_head
    from glance.targets.vl import load_target

    kind = request.param
    target_path, head_path = checkpoints[kind]
    target, processor = load_target(target_path, dtype=torch.float64)
    assert processor is None  # the tiny checkpoints ship no tokenizer
    head = load_block_head(head_path, target=target)
    input_ids, positions, hf_kwargs = _prompt(kind, target)
    reference = target.generate(input_ids, do_sample=False, max_new_tokens=96, **hf_kwargs)
    return World(kind, target, head, input_ids, positions, hf_kwargs, reference)
