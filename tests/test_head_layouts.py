"""Heads from where users get them, and back: :func:`glance.export_head` writes
z-lab's DFlash layout and vLLM ``speculators``' DFlash layout, and both load
into the same ``DFlashDraftModel`` as GLANCE's own save, bit for bit at
float32, and decode losslessly."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

import glance
from glance import testing as tiny
from glance.targets.vl import VisionPositions, load_target


@pytest.fixture(scope="module")
def native(checkpoints):
    target, _ = load_target(checkpoints["qwen3_vl"][0], dtype=torch.float32)
    path = checkpoints["qwen3_vl"][1]
    head = glance.load_block_head(path, target=target)
    return target, head, path


def _config(path) -> dict:
    return json.loads((path / "config.json").read_text())


def _zlab(native_path, out):
    """Written as z-lab ships it (:func:`glance.export_head`, ``layout="zlab"``)."""
    head = glance.load_block_head(native_path, dtype=torch.float32)
    return glance.export_head(head, out, "zlab")


def _speculators(native_path, target, out, fused: bool):
    """Written as ``speculators`` saves a DFlash head, the target's embedding and
    LM head beside it, q/k/v optionally fused (:func:`glance.export_head`)."""
    head = glance.load_block_head(native_path, target=target)
    return glance.export_head(head, out, "speculators", target=target, fused_qkv=fused)


def _same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.target_layer_ids == b.target_layer_ids and a.block_size == b.block_size
    assert a.mask_token_id == b.mask_token_id


def _decode(target, head):
    ids, pixels, grid, types = tiny.image_prompt(target, [3, 17, 42], [11, 29, 5])
    kw = dict(positions=VisionPositions(pixels, grid, types))
    greedy = glance.greedy_generate(target, ids, 48, **kw)
    out = glance.generate(head, target, ids, 48, budget=15, branch_k=4, **kw)
    return greedy, out


@pytest.mark.parametrize("layout", ["zlab", "speculators", "speculators_fused_qkv"])
def test_a_foreign_layout_loads_bit_for_bit_and_decodes_losslessly(native, tmp_path, layout):
    target, head, path = native
    if layout == "zlab":
        foreign = _zlab(path, tmp_path / layout)
    else:
        foreign = _speculators(path, target, tmp_path / layout, fused=layout.endswith("qkv"))
    loaded = glance.load_block_head(foreign, target=target)
    _same_weights(head, loaded)
    greedy, out = _decode(target, loaded)
    assert torch.equal(out, greedy)
    assert torch.equal(out, _decode(target, head)[1])


def test_a_zlab_config_without_num_target_layers_takes_the_targets(native, tmp_path):
    target, head, path = native
    foreign = _zlab(path, tmp_path / "z")
    data = _config(foreign)
    del data["num_target_layers"]
    (foreign / "config.json").write_text(json.dumps(data))
    _same_weights(head, glance.load_block_head(foreign, target=target))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("draft_vocab_size", 32, "draft_vocab_size 32 != vocab_size .*reduced draft vocabulary"),
        ("target_hidden_size", 7, "target_hidden_size 7 != hidden_size"),
        ("sample_from_anchor", True, "sample_from_anchor true is not supported"),
        ("aux_hidden_state_layer_ids", [0, 2], r"\[0, 2\]: index 0 is the embedding output"),
        ("speculators_model_type", "eagle3", "speculators_model_type 'eagle3'; expected 'dflash'"),
    ],
)
def test_a_speculators_feature_dflash_cannot_express_is_named(
    native, tmp_path, field, value, match
):
    target, _, path = native
    foreign = _speculators(path, target, tmp_path / "s", fused=False)
    data = _config(foreign)
    data[field] = value
    (foreign / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        glance.load_block_head(foreign, target=target)


def test_a_speculators_head_that_does_not_fit_names_the_field_and_both_values(native, tmp_path):
    target, _, path = native
    foreign = _speculators(path, target, tmp_path / "s", fused=False)
    data = _config(foreign)
    data["mask_token_id"] = 10**6
    (foreign / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"mask_token_id 1000000 must be a token.*vocab_size"):
        glance.load_block_head(foreign, target=target)


def test_unexpected_weights_in_a_speculators_checkpoint_are_refused(native, tmp_path):
    from safetensors.torch import load_file

    target, _, path = native
    foreign = _speculators(path, target, tmp_path / "s", fused=False)
    state = load_file(str(foreign / "model.safetensors"))
    state["layers.0.self_attn.g_proj.weight"] = torch.zeros(2, 2)
    save_file(state, str(foreign / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected \['layers.0.self_attn.g_proj.weight'\]"):
        glance.load_block_head(foreign, target=target)


def test_a_speculators_export_is_refused_with_another_same_shape_target(native, tmp_path):
    """Issue 42: an export reloaded silently with a different target of the same shape."""
    target, _, path = native
    foreign = _speculators(path, target, tmp_path / "s", fused=False)
    other = tiny.build_target("qwen3_vl", seed=5).to(torch.float32)
    with pytest.raises(ValueError, match="embed_tokens.weight is not the target's embedding"):
        glance.load_block_head(foreign, target=other)
    glance.load_block_head(foreign, target=target)  # its own target: fine
