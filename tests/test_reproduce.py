"""stages.reproduce: outputs compared field by field, timings left out."""

from __future__ import annotations

import json

from stages.reproduce import compare, timing_key


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


def test_rows_sized_by_the_clock_are_counted_apart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "results/s.json", {"systems": {"glance": {"tau": 5}, "glance_auto": {"tau": 4}}})
    write(b, "results/s.json", {"systems": {"glance": {"tau": 5}, "glance_auto": {"tau": 6}}})
    rounds = '{"system": "glance", "accepted": 2}\n{"system": "glance_auto", "accepted": %d}\n'
    write(a, "results/r.jsonl", rounds % 1)
    write(b, "results/r.jsonl", rounds % 3 + '{"system": "glance_auto", "accepted": 0}\n')
    clocked = []
    assert compare(a, b, clocked) == ([], 2)
    assert clocked == ["results/s.json.systems.glance_auto.tau: 4 against 6"]


def test_timing_keys():
    for key in ("verify_ms", "ms_per_token", "tokens_per_s", "speedup", "train_seconds"):
        assert timing_key(key), key
    for key in ("tau", "accepted", "entropy", "rounds", "sha256", "budget"):
        assert not timing_key(key), key
