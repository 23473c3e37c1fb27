"""Damaged checkpoints are refused by field (issue 24, sections 6 and 7): a
cut or foreign safetensors file, a config ``dtype`` no model computes in, a
``block_size`` out of range, integer or non-finite weights. Each error names
the file and the key or tensor at fault, where before a bare
``SafetensorError`` or ``AttributeError`` came back, or the head loaded and
its acceptance collapsed."""

from __future__ import annotations

import json
import re
import shutil
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import glance
from glance import testing as tiny
from glance._weights import check_safetensors
from glance.heads.eagle import build_eagle_head, load_eagle_head

WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny text target and a sound block head and EAGLE head saved for it."""
    root = tmp_path_factory.mktemp("faults")
    target = tiny.build_target("qwen3")
    tiny.build_head(target).save_pretrained(root / "head")
    build_eagle_head(target, seed=1).save_pretrained(root / "eagle")
    return target, root


@pytest.fixture
def head(saved, tmp_path):
    """A copy of the sound block head, to damage."""
    target, root = saved
    return target, shutil.copytree(root / "head", tmp_path / "head")


def _refused(load, path, match):
    with pytest.raises(ValueError, match=match) as err:
        load()
    assert str(path) in str(err.value)
    return err


def _edit_config(folder, edit):
    data = json.loads((folder / "config.json").read_text())
    edit(data)
    (folder / "config.json").write_text(json.dumps(data))


def _edit_weights(folder, edit):
    state = load_file(folder / WEIGHTS)
    edit(state)
    save_file(state, folder / WEIGHTS, metadata={"format": "pt"})


def test_the_sound_head_passes_every_check(saved):
    target, root = saved
    assert check_safetensors(root / "head", "head") == [root / "head" / WEIGHTS]
    assert glance.load_block_head(root / "head", target=target).block_size == 8
    assert load_eagle_head(root / "eagle", target=target) is not None


# --- the weight files ---------------------------------------------------------


def test_a_truncated_weight_file_is_named_with_both_sizes(head):
    target, path = head
    file = path / WEIGHTS
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    match = rf"truncated: has {len(data) // 2} bytes, its header says {len(data)}"
    _refused(lambda: glance.load_block_head(path, target=target), file, match)


def test_a_file_cut_inside_its_header_is_named(head):
    target, path = head
    file = path / WEIGHTS
    file.write_bytes(file.read_bytes()[:40])
    _refused(lambda: glance.load_block_head(path), file, r"truncated: has 40 bytes, .* needs")


def test_trailing_bytes_after_the_data_are_named(head):
    target, path = head
    file = path / WEIGHTS
    file.write_bytes(file.read_bytes() + b"\0" * 5)
    _refused(lambda: glance.load_block_head(path, target=target), file, "5 trailing bytes")


def _pickle(file):
    torch.save({"fc.weight": torch.zeros(2, 2)}, file)


#: Files of other kinds under the weights' name: how each is written, and
#: what the error says.
FOREIGN = {
    "random-bytes": (lambda f: f.write_bytes(np.random.default_rng(0).bytes(4096)),
                     "not a safetensors file: its first 8 bytes give a header length"),
    "renamed-config-json": (lambda f: shutil.copy(f.parent / "config.json", f),
                            "not a safetensors file: its first 8 bytes"),
    "renamed-torch-pickle": (_pickle, "not a safetensors file: its first 8 bytes"),
    "empty": (lambda f: f.write_bytes(b""), "not a safetensors file: has 0 bytes"),
    "header-not-json": (lambda f: f.write_bytes(struct.pack("<Q", 4) + b"\xff\0ab"),
                        "not a safetensors file: header is not JSON"),
    "header-a-list": (lambda f: f.write_bytes(struct.pack("<Q", 2) + b"[]"),
                      "header is a JSON list, expected an object"),
}  # fmt: skip


@pytest.mark.parametrize("kind", FOREIGN)
def test_a_foreign_weight_file_is_named(head, kind):
    target, path = head
    file = path / WEIGHTS
    write, match = FOREIGN[kind]
    write(file)
    _refused(lambda: glance.load_block_head(path, target=target), file, match)


def test_a_missing_shard_is_named(head):
    target, path = head
    index = {"metadata": {}, "weight_map": {"fc.weight": "model-00002-of-00002.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    match = r"names shards that are not in the folder: \['model-00002-of-00002.safetensors'\]"
    _refused(lambda: glance.load_block_head(path, target=target), path, match)


# --- the config ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"), [("dtype", "float8"), ("dtype", "int8"), ("torch_dtype", "float8")]
)
def test_a_config_dtype_no_model_computes_in_is_named(head, key, value):
    target, path = head
    _edit_config(path, lambda c: c.update({key: value}))
    match = rf"config.json: {key} '{value}': expected a floating dtype, one of float16, bfloat16"
    _refused(lambda: glance.load_block_head(path, target=target), path / "config.json", match)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (10**6, "1000000 must be >= 2 and <= 64"),
        (0, "0 must be >= 2 and <= 64"),
        (-3, "-3 must be >= 2 and <= 64"),
        (8.5, r"8.5 must be an integer in \[2, 64\]"),
        ("8", r"'8' must be an integer in \[2, 64\]"),
        (True, r"True must be an integer in \[2, 64\]"),
    ],
    ids=["1e6", "0", "-3", "8.5", "string", "bool"],
)
def test_a_block_size_out_of_range_is_named(head, value, match):
    target, path = head
    _edit_config(path, lambda c: c["dflash_config"].update(block_size=value))
    # without a target too: check_head_fits would catch only 0 and -3, and only with one
    load = lambda: glance.load_block_head(path)  # noqa: E731
    _refused(load, path / "config.json", "dflash_config.block_size " + match)


def test_a_top_level_block_size_is_bounded_too(head):
    """z-lab's older releases keep block_size at the top level."""
    target, path = head

    def top(c):
        c["block_size"] = 10**6
        del c["dflash_config"]["block_size"]

    _edit_config(path, top)
    _refused(lambda: glance.load_block_head(path, target=target), path / "config.json",
             r"config.json: block_size 1000000 must be >= 2 and <= 64")  # fmt: skip


def _as_speculators(path):
    """The head's config rewritten in the ``speculators`` layout (its weights
    already have dflash's names)."""

    def rewrite(data):
        dflash = data.pop("dflash_config")
        layer = dict(data)
        data.clear()
        data.update(
            speculators_model_type="dflash",
            transformer_layer_config=layer,
            aux_hidden_state_layer_ids=[i + 1 for i in dflash["target_layer_ids"]],
            mask_token_id=dflash["mask_token_id"],
            block_size=dflash["block_size"],
        )

    _edit_config(path, rewrite)


def test_a_speculators_head_is_checked_alike(head):
    target, path = head
    config = path / "config.json"
    load = lambda: glance.load_block_head(path, target=target)  # noqa: E731
    _as_speculators(path)
    assert load().block_size == 8
    _edit_config(path, lambda c: c.update(block_size=10**6))
    _refused(load, config, "config.json: block_size 1000000 must be >= 2 and <= 64")
    _edit_config(path, lambda c: c.update(block_size=8))
    _edit_config(path, lambda c: c["transformer_layer_config"].update(dtype="float8"))
    _refused(load, config, "transformer_layer_config.dtype 'float8': expected a floating dtype")
    _edit_config(path, lambda c: c["transformer_layer_config"].update(dtype="float64"))
    _edit_weights(path, lambda s: s["fc.weight"].view(-1)[0].fill_(float("inf")))
    _refused(load, path / WEIGHTS, "tensor 'fc.weight' holds 0 NaN and 1 infinite")
    _truncate(path)
    _refused(load, path / WEIGHTS, "truncated")


# --- the weights ---------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_named_with_their_file_and_tensor(head, value):
    target, path = head

    def poison(state):
        state["layers.0.mlp.down_proj.weight"][3, 5] = value

    _edit_weights(path, poison)
    kind = "1 NaN and 0 infinite" if value != value else "0 NaN and 1 infinite"
    match = rf"tensor 'layers.0.mlp.down_proj.weight' holds {kind} values"
    _refused(lambda: glance.load_block_head(path, target=target), path / WEIGHTS, match)


def test_weights_that_overflow_the_loaded_dtype_are_named(head):
    """float32 weights past float16's range load as infinities."""
    target, path = head

    def big(state):
        for name in state:
            state[name] = state[name].float()
        state["fc.weight"][0, 0] = 1e6

    _edit_weights(path, big)
    match = r"tensor 'fc.weight' holds 0 NaN and 1 infinite values as loaded in torch.float16"
    _refused(lambda: glance.load_block_head(path, dtype=torch.float16), path / WEIGHTS, match)


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int8, torch.bool, torch.float8_e4m3fn], ids=str
)
def test_non_floating_weights_are_named(head, dtype):
    target, path = head
    name = "layers.0.self_attn.q_proj.weight"

    _edit_weights(path, lambda s: s.update({name: torch.zeros(s[name].shape, dtype=dtype)}))
    match = rf"tensor '{re.escape(name)}' has dtype \w+; expected a floating dtype \(F16, BF16"
    _refused(lambda: glance.load_block_head(path, target=target), path / WEIGHTS, match)


# --- the EAGLE head -----------------------------------------------------------


def _truncate(path):
    file = path / WEIGHTS
    file.write_bytes(file.read_bytes()[:-7])


def _nan(path):
    _edit_weights(path, lambda s: s["gate_up.weight"].view(-1)[0].fill_(float("nan")))


def _integer(path):
    _edit_weights(path, lambda s: s.update({"fc.weight": s["fc.weight"].to(torch.int32)}))


#: Damage to an EAGLE head: what is done, the file named, what the error says.
EAGLE_DAMAGE = {
    "truncated": (_truncate, WEIGHTS, "truncated: has"),
    "config-float8": (lambda p: _edit_config(p, lambda c: c.update(dtype="float8")),
                      "config.json", "dtype 'float8': expected a floating dtype"),
    "nan": (_nan, WEIGHTS, "tensor 'gate_up.weight' holds 1 NaN"),
    "int32": (_integer, WEIGHTS, "tensor 'fc.weight' has dtype I32; expected a floating dtype"),
}  # fmt: skip


@pytest.mark.parametrize("kind", EAGLE_DAMAGE)
def test_a_damaged_eagle_head_is_named(saved, tmp_path, kind):
    target, root = saved
    damage, file, match = EAGLE_DAMAGE[kind]
    path = shutil.copytree(root / "eagle", tmp_path / "eagle")
    damage(path)
    err = _refused(lambda: load_eagle_head(path, target=target), path / file, match)
    assert str(err.value).startswith("eagle head ")
