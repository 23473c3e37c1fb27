"""dflash's own decoding loop as an external reference for the chain."""

from __future__ import annotations

import time

import dflash.model as dflash_model  # noqa: E402
import pytest
import torch  # noqa: E402

import glance  # noqa: E402
from glance import testing as tiny  # noqa: E402
from glance.targets.vl import load_target  # noqa: E402


@pytest.fixture(scope="module")
def text_target(checkpoints):
    target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float64)
    return target, glance.load_block_head(checkpoints["qwen3"][1], target=target)


def dflash_reference(monkeypatch, head, target, input_ids, n_new, stops):
    # dflash times with torch.cuda.synchronize(); on a CPU build, time plainly.
    monkeypatch.setattr(dflash_model, "_cuda_time", time.perf_counter)
    out = dflash_model.dflash_generate(
        head, target, input_ids, n_new, stop_token_ids=stops, return_stats=True
    )
    return out.output_ids, out.acceptance_lengths


@pytest.mark.parametrize("oracle", [False, True])
@pytest.mark.parametrize("stop", [False, True])
def test_chain_matches_dflash_generate(monkeypatch, text_target, oracle, stop):
    target, head = text_target
    prompt = torch.tensor([[3, 17, 42, 8, 11, 29, 5]])
    greedy = glance.greedy_generate(target, prompt, 80)

    def fresh_head():
        if not oracle:
            return head
        # Corrupt random offsets so acceptance lengths vary from round to round;
        # each run gets its own head with the same seed, so the same draws.
        return tiny.OracleHead(target, greedy[0].tolist(), block_size=8, corrupt_rate=0.25)

    stops = [int(greedy[0, prompt.shape[1] + 40])] if stop else None
    ref_ids, ref_lengths = dflash_reference(monkeypatch, fresh_head(), target, prompt, 64, stops)
    head = fresh_head()
    ids, stats = glance.chain_generate(
        head, target, prompt, 64, stop_token_ids=stops, return_stats=True
    )
    assert ids.tolist() == ref_ids.tolist()
    assert [r.committed for r in stats.rounds] == ref_lengths
    if oracle:
        assert len(set(ref_lengths)) > 1


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_dflash_chain_on_a_vision_prompt_through_with_image(checkpoints, kind):
    # The bench's dflash row: dflash's loop, written for text targets, runs a VL
    # prompt through glance.experiments.baselines.WithImage and must equal our chain there,
    # round for round.
    from conftest import _prompt

    from glance.experiments.baselines import dflash_generate

    target, _ = load_target(checkpoints[kind][0], dtype=torch.float64)
    head = glance.load_block_head(checkpoints[kind][1], target=target)
    input_ids, positions, _ = _prompt(kind, target)
    new, (committed, rounds) = dflash_generate(head, target, input_ids, positions, 48, ())
    ids, stats = glance.chain_generate(
        head, target, input_ids, 48, positions=positions, return_stats=True
    )
    assert new == ids[0, input_ids.shape[1] :].tolist()
    assert rounds == len(stats.rounds) and committed == sum(r.committed for r in stats.rounds)
