"""Bad input to the library: strict checkpoints and early, named errors.

Each case asserts the error type and that the message names the file, field
or value; the loading cases also show that nothing is fetched or initialised
at random behind the caller's back.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import glance
from glance.heads.block import check_head_fits
from glance.targets.vl import load_target


@pytest.fixture(scope="module")
def text(checkpoints):
    target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float64)
    head = glance.load_block_head(checkpoints["qwen3"][1], target=target)
    return target, head


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


# --- strict checkpoints -------------------------------------------------------


def test_target_loader_refuses_a_head_checkpoint(checkpoints):
    with pytest.raises(ValueError, match=r"missing \[.*embed_tokens.*unexpected \[.*fc"):
        load_target(checkpoints["qwen3"][1], dtype=torch.float64)


def test_missing_and_unexpected_weights_are_named(checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file

    bad = _copy(checkpoints["qwen3"][0], tmp_path / "target")
    weights = load_file(bad / "model.safetensors")
    weights.pop("model.norm.weight")
    weights["model.stray.weight"] = torch.zeros(3)
    save_file(weights, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError) as err:
        load_target(bad, dtype=torch.float64)
    assert str(bad) in str(err.value)
    assert "missing ['model.norm.weight']" in str(err.value)
    assert "unexpected ['model.stray.weight']" in str(err.value)


def test_head_with_missing_weights_is_refused(text, checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file

    target, _ = text
    bad = _copy(checkpoints["qwen3"][1], tmp_path / "head")
    weights = load_file(bad / "model.safetensors")
    name = sorted(weights)[0]
    weights.pop(name)
    save_file(weights, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"head {bad}: .*missing \['{name}'\]"):
        glance.load_block_head(bad, target=target)


@pytest.mark.parametrize("which", ["target", "head"])
def test_pickle_weights_need_an_explicit_opt_in(checkpoints, tmp_path, which):
    from safetensors.torch import load_file

    src = checkpoints["qwen3"][0 if which == "target" else 1]
    path = _copy(src, tmp_path / which)
    weights = load_file(path / "model.safetensors")
    (path / "model.safetensors").unlink()
    torch.save(weights, path / "pytorch_model.bin")
    if which == "target":
        with pytest.raises(
            ValueError, match=r"pickle weights \['pytorch_model.bin'\].*allow_pickle"
        ):
            load_target(path, dtype=torch.float64)
        model, _ = load_target(path, dtype=torch.float64, allow_pickle=True)
        ref, _ = load_target(src, dtype=torch.float64)
    else:
        target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float64)
        with pytest.raises(ValueError, match=r"pickle weights \['pytorch_model.bin'\]"):
            glance.load_block_head(path, target=target)
        model = glance.load_block_head(path, target=target, allow_pickle=True)
        ref = glance.load_block_head(src, target=target)
    for (name, a), (_, b) in zip(model.state_dict().items(), ref.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_missing_local_path_fails_without_the_network(tmp_path, monkeypatch):
    import transformers

    def no_network(*args, **kwargs):
        raise AssertionError("tried to resolve the path through transformers")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_network)
    missing = tmp_path / "nowhere"
    for call in (lambda: load_target(missing), lambda: glance.load_block_head(missing)):
        with pytest.raises(FileNotFoundError, match=f"{missing}: no such checkpoint folder"):
            call()
    # A string that reads as a path is a path too, not a hub id.
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        load_target("./models/not-here")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_target(tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("vocab_size", 97, "head vocab_size 97 != target vocab_size 96"),
        ("num_target_layers", 7, r"head num_target_layers \(num_hidden_layers\) 7 != target"),
    ],
)
def test_head_config_that_does_not_fit_is_named(text, checkpoints, tmp_path, field, value, match):
    target, _ = text
    bad = tmp_path / "head"
    bad.mkdir()
    config = json.loads((checkpoints["qwen3"][1] / "config.json").read_text())
    config[field] = value
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "model.safetensors").symlink_to(checkpoints["qwen3"][1] / "model.safetensors")
    if field == "vocab_size":
        # the head's own vocabulary sets no weight shape: it borrows the target's
        assert not any(p.shape[0] == 96 for p in glance.load_block_head(bad).parameters())
    with pytest.raises(ValueError, match=match):
        glance.load_block_head(bad, target=target)


def test_head_of_another_dtype_is_named(text, checkpoints):
    target, _ = text
    head = glance.load_block_head(checkpoints["qwen3"][1], dtype=torch.float32)
    with pytest.raises(ValueError, match="head dtype torch.float32 != target dtype torch.float64"):
        check_head_fits(head, target)
    ids = torch.tensor([[3, 17, 42, 8]])
    with pytest.raises(ValueError, match="head dtype"):
        glance.generate(head, target, ids, 8)


# --- requests -----------------------------------------------------------------


def _request_cases(vocab):
    ok = torch.tensor([[3, 17, 42, 8]])
    return [
        (dict(input_ids=ok.float()), TypeError, "integer token ids; got dtype torch.float32"),
        (dict(input_ids=ok.bool()), TypeError, "integer token ids"),
        (dict(input_ids=[[3, 17]]), TypeError, "must be a torch.Tensor; got list"),
        (dict(input_ids=torch.tensor([[3, vocab]])), ValueError, f"token id {vocab}, outside"),
        (dict(input_ids=torch.tensor([[3, -1]])), ValueError, "token id -1, outside"),
        (dict(stop_token_ids="ab"), TypeError, "stop_token_ids must be an int or a list of ints"),
        (dict(stop_token_ids=[2, "x"]), TypeError, "stop_token_ids must be ints; got 'x'"),
        (dict(stop_token_ids=[2.0]), TypeError, "stop_token_ids must be ints; got 2.0"),
        (dict(stop_token_ids=[vocab]), ValueError, f"stop_token_ids \\[{vocab}\\] lie outside"),
        (dict(temperature=1.0, generator=123), TypeError, "generator must be a torch.Generator"),
        (dict(temperature=float("inf")), ValueError, "temperature must be a finite number"),
        (dict(temperature=float("nan")), ValueError, "temperature must be a finite number"),
    ]


def test_bad_requests_fail_early_with_our_words(text):
    target, head = text
    vocab = target.config.vocab_size
    for change, kind, match in _request_cases(vocab):
        kwargs = dict(input_ids=torch.tensor([[3, 17, 42, 8]]), max_new_tokens=8) | change
        for fn, args in (
            (glance.generate, (head, target)),
            (glance.chain_generate, (head, target)),
            (glance.greedy_generate, (target,)),
        ):
            with pytest.raises(kind, match=match):
                fn(*args, **kwargs)


def test_good_stop_ids_in_every_form_agree(text):
    target, head = text
    ids = torch.tensor([[3, 17, 42, 8]])
    ref = glance.greedy_generate(target, ids, 24)[0, 4:].tolist()
    stop = ref[5]
    first = ref.index(stop)
    for form in (stop, [stop], (stop,), np.array([stop]), [np.int64(stop)]):
        out = glance.generate(head, target, ids, 24, stop_token_ids=form)[0, 4:].tolist()
        assert out == ref[: first + 1]


def test_tree_refuses_negative_ids():
    from glance import build_budget_tree

    ids = np.array([[4, -2], [1, 2]])
    lp = np.log(np.array([[0.6, 0.4], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="top_ids must hold token ids >= 0; got -2"):
        build_budget_tree(ids, lp, budget=3, branch_k=2)
