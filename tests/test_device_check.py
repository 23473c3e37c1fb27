"""``glance.testing.device_check`` in its reduced mode: the GPU check's code path, run
on the CPU under test (the full mode needs CUDA and is documented in the README)."""

from __future__ import annotations

import json

import pytest

from glance.testing import device_check


def test_the_reduced_check_runs_and_writes_its_three_tables(tmp_path, capsys):
    result = device_check.main(["--reduced", "--device", "cpu", "--out", str(tmp_path)])
    lossless = json.loads((tmp_path / "lossless.json").read_text())
    cost = json.loads((tmp_path / "verify_cost.json").read_text())
    assert lossless["reduced"] and set(lossless["checks"]) == {
        f"{d}/{k}" for d in ("float32", "bfloat16") for k in ("qwen3_vl", "qwen2_5_vl")
    }
    for name, c in lossless["checks"].items():
        assert c["equal"] + c["control_differs"] + c["mismatch"] == c["prompts"] == 2
        if name.startswith("float32/"):
            assert c["equal"] == 2  # bitwise at float32
    assert cost["sizes"] == [1, 2, 4, 8, 16] and len(cost["verify_ms"]) == 5
    assert all(t > 0 for t in cost["verify_ms"]) and cost["parameters"] > 0
    assert result["verify_cost"]["sizes"] == cost["sizes"]
    printed = capsys.readouterr().out
    assert "| float32/qwen3_vl | 2 | 2 |" in printed and "| tree size | ms |" in printed
    training = json.loads((tmp_path / "train_cost.json").read_text())
    assert training["steps"] == 2 and training["tokens_per_second"] > 0
    assert training["head_parameters"] > 0 and training["peak_gib"] is None  # CPU: no GPU peak
    assert "head training, float32, 2 rows of 64 tokens:" in printed


def test_the_full_check_refuses_to_run_without_cuda(tmp_path):
    with pytest.raises(SystemExit):
        device_check.main(["--device", "cpu", "--out", str(tmp_path)])
    assert not (tmp_path / "lossless.json").exists()


def test_the_full_check_uses_qwen3_vl_8b_dimensions():
    from transformers import Qwen3Config

    config = Qwen3Config(**device_check.QWEN3_VL_8B_TEXT)
    # parameters of the language model, embeddings and head untied: about 8.2B
    h, i, v, n = config.hidden_size, config.intermediate_size, config.vocab_size, 36
    attn = h * 128 * (32 + 8 + 8) + 32 * 128 * h
    total = n * (attn + 3 * h * i) + 2 * v * h
    assert config.num_hidden_layers == 36 and 7.5e9 < total < 8.5e9
