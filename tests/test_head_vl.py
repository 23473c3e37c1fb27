"""Loading targets and heads, fit checks, and the decoders' input errors."""

from __future__ import annotations

import json

import pytest
import torch  # noqa: E402

import glance  # noqa: E402
from glance import testing as tiny  # noqa: E402
from glance.heads.block import check_head_fits, embeddings, lm_head  # noqa: E402
from glance.targets.vl import StreamPositions, VisionPositions, load_target  # noqa: E402


@pytest.fixture(scope="module")
def vl(checkpoints):
    target, _ = load_target(checkpoints["qwen3_vl"][0], dtype=torch.float64)
    head = glance.load_block_head(checkpoints["qwen3_vl"][1], target=target)
    ids, pixels, grid, types = tiny.image_prompt(target, [3, 4], [5, 6])
    return target, head, ids, VisionPositions(pixels, grid, types)


def test_load_target_picks_the_auto_class(checkpoints):
    import transformers as tf

    text, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float64)
    assert isinstance(text, tf.Qwen3ForCausalLM)
    vl, _ = load_target(checkpoints["qwen3_vl"][0], dtype=torch.float32)
    assert isinstance(vl, tf.Qwen3VLForConditionalGeneration)
    assert vl.dtype == torch.float32 and not vl.training
    assert not any(p.requires_grad for p in vl.parameters())


def test_load_target_rejects_a_folder_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_target(tmp_path)


def test_adapters_find_embeddings_and_lm_head(vl):
    target, *_ = vl
    assert embeddings(target) is target.model.language_model.embed_tokens
    assert lm_head(target) is target.lm_head


def test_head_checkpoint_loads_with_dflash_too(checkpoints):
    from dflash import DFlashDraftModel

    path = checkpoints["qwen3_vl"][1]
    config = json.loads((path / "config.json").read_text())
    assert set(config["dflash_config"]) >= {"target_layer_ids", "mask_token_id", "block_size"}
    head = DFlashDraftModel.from_pretrained(path)
    assert head.target_layer_ids == config["dflash_config"]["target_layer_ids"]


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("hidden_size", 32, "head hidden_size 32 != target hidden_size 64"),
        ("target_layer_ids", [0, 4], r"target_layer_ids \[0, 4\] must lie in \[0, 4\)"),
        ("mask_token_id", 96, "mask_token_id 96 .*vocab_size 96"),
        ("block_size", 1, "block_size 1 must be >= 2"),
    ],
)
def test_head_that_does_not_fit_is_named(vl, checkpoints, tmp_path, field, value, match):
    target, *_ = vl
    path = checkpoints["qwen3_vl"][1]
    config = json.loads((path / "config.json").read_text())
    if field == "hidden_size":
        head = tiny.build_head(target)
        head.config.hidden_size = value
        with pytest.raises(ValueError, match=match):
            check_head_fits(head, target)
        return
    config["dflash_config"][field] = value
    bad = tmp_path / "head"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "model.safetensors").symlink_to(path / "model.safetensors")
    with pytest.raises(ValueError, match=match):
        glance.load_block_head(bad, target=target)


def test_bad_requests_are_refused(vl):
    target, head, ids, positions = vl
    cases = [
        (dict(budget=0), "budget must be"),
        (dict(branch_k=0), "branch_k must be"),
        (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
        (dict(input_ids=ids.repeat(2, 1)), "batch size must be 1"),
        (dict(positions=None), "image tokens but positions is not a VisionPositions"),
        (dict(positions=StreamPositions()), "image tokens"),
        (dict(max_new_tokens=600), "exceeds the target's max_position_embeddings 512"),
        (dict(timing="wall"), "timing must be one of"),
    ]
    for change, match in cases:
        kwargs = dict(input_ids=ids, max_new_tokens=8, positions=positions)
        kwargs.update(change)
        call = {k: kwargs.pop(k) for k in ("budget", "branch_k") if k in kwargs}
        with pytest.raises(ValueError, match=match):
            glance.generate(head, target, **kwargs, **call)
        if not call:
            with pytest.raises(ValueError, match=match):
                glance.greedy_generate(target, **kwargs)


def test_vision_positions_carry_the_rope_delta(vl):
    target, _, ids, positions = vl
    kwargs, delta = positions.prefill(target, ids)
    rope = kwargs["position_ids"]
    assert rope.shape == (3, 1, ids.shape[1])
    # The image compresses positions: the last text token sits below its index.
    assert delta < 0
    assert int(rope[0, 0, -1]) == ids.shape[1] - 1 + delta
    rows = positions.rows(torch.tensor([ids.shape[1], ids.shape[1] + 1]), delta)
    assert rows.shape == (3, 1, 2)
    assert rows[:, 0, 0].tolist() == [ids.shape[1] + delta] * 3
