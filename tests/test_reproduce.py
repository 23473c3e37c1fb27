"""stages.reproduce: outputs compared field by field, timings left out."""

from __future__ import annotations

import json

from glance.experiments.reproduce import compare, timing_key


def write(root, rel, data):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def test_timing_fields_are_left_out_and_every_other_field_is_compared(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    summary = {"tau": 4.6, "systems": {"glance": {"ms_per_token": 1.1, "speedup": {"low": 1}}}}
    write(a, "results/decode/x/summary.json", summary)
    write(b, "results/decode/x/summary.json", summary | {"systems": {"glance": {
        "ms_per_token": 9.9, "speedup": {"low": 3}}}})  # fmt: skip
    write(a, "results/decode/x/rounds.jsonl", '{"accepted": 3, "verify_ms": 1.0}\n')
    write(b, "results/decode/x/rounds.jsonl", '{"accepted": 3, "verify_ms": 2.0}\n')
    write(a, "models/head/model.safetensors", "abc")
    write(b, "models/head/model.safetensors", "abc")
    assert compare(a, b) == ([], 3)

    write(b, "results/decode/x/rounds.jsonl", '{"accepted": 4, "verify_ms": 2.0}\n')
    write(b, "models/head/model.safetensors", "abd")
    write(b, "results/law.json", {"b1": 0.3})
    found, n = compare(a, b)
    assert n == 3
    assert found == [
        "results/law.json: only in theirs",
        "models/head/model.safetensors: bytes differ",
        "results/decode/x/rounds.jsonl:1.accepted: 3 against 4",
    ]


def test_auto_rows_are_compared_like_every_other_row(tmp_path):
    """budget="auto" sizes its trees from target.auto_cost, a fixed table, so
    its rows must reproduce too."""
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "results/s.json", {"systems": {"glance": {"tau": 5}, "glance_auto": {"tau": 4}}})
    write(b, "results/s.json", {"systems": {"glance": {"tau": 5}, "glance_auto": {"tau": 6}}})
    rounds = '{"system": "glance", "accepted": 2}\n{"system": "glance_auto", "accepted": %d}\n'
    write(a, "results/r.jsonl", rounds % 1)
    write(b, "results/r.jsonl", rounds % 3)
    found, n = compare(a, b)
    assert n == 2
    assert found == [
        "results/r.jsonl:2.accepted: 1 against 3",
        "results/s.json.systems.glance_auto.tau: 4 against 6",
    ]


def test_timing_keys():
    for key in ("verify_ms", "ms_per_token", "tokens_per_s", "speedup", "train_seconds"):
        assert timing_key(key), key
    for key in ("tau", "accepted", "entropy", "rounds", "sha256", "budget"):
        assert not timing_key(key), key


def test_decode_outputs_are_reused_only_under_the_same_recipe(tmp_path):
    import pytest

    from glance.experiments.outputs import read_outputs, write_outputs

    path = tmp_path / "outputs.jsonl"
    recipe = {"budget": 63, "dtype": "float32", "numerics": {"aten": "default"}}
    write_outputs(path, recipe, {"ar": [[1, 2], [3]], "glance": [[1, 2], [3]]})
    assert read_outputs(path, recipe) == {
        ("ar", 1): [1, 2], ("ar", 2): [3], ("glance", 1): [1, 2], ("glance", 2): [3],
    }  # fmt: skip
    assert read_outputs(path, {**recipe, "budget": 31}) == {}
    assert read_outputs(path, {**recipe, "numerics": {"aten": "avx2"}}) == {}
    assert read_outputs(tmp_path / "missing.jsonl", recipe) == {}
    path.write_text(path.read_text() + '{"row": "chain", "prompt": 1}\n')
    with pytest.raises(SystemExit, match="outputs.jsonl, line 6"):
        read_outputs(path, recipe)


def test_the_unpinned_timing_stages_outputs_are_not_compared(tmp_path):
    """bench and compile run on the machine's own kernels: their tau may follow
    the machine too, so a difference there is no reproduction failure."""
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "results/bench.json", {"tasks": {"x": {"tau": 4.6}}, "numerics": {"cpu": "A"}})
    write(b, "results/bench.json", {"tasks": {"x": {"tau": 4.7}}, "numerics": {"cpu": "B"}})
    write(a, "results/law.json", {"tau": 4.6})
    write(b, "results/law.json", {"tau": 4.7})
    assert compare(a, b) == (["results/law.json.tau: 4.6 against 4.7"], 2)
