"""The calibrate command (glance.toy.calibrate) end to end at toy sizes: every
decode it reports was checked against greedy decoding, and its records land."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")


@pytest.mark.slow
def test_a_tiny_try_reports_every_task_and_writes_its_records(tmp_path):
    from glance.toy.__main__ import main

    sizes = {
        "target_steps": 2,
        "init": None,
        "greedy": 2,
        "sampled": 2,
        "heldout": 2,
        "head_steps": 3,
        "n": 1,
        "context": 0,
    }
    out = tmp_path / "try.json"
    main(
        [
            "calibrate",
            "--knobs",
            json.dumps({"space": 0.25, "voices": {"chartqa": [2, 3, 1.5]}}),
            "--sizes",
            json.dumps(sizes),
            "--out",
            str(out),
            "--keep",
            str(tmp_path / "kept"),
        ]
    )
    result = json.loads(out.read_text())
    assert set(result["tasks"]) == {"caption", "textvqa", "infovqa", "docvqa", "chartqa"}
    assert all(t["lossless"] for t in result["tasks"].values())
    assert result["knobs"]["voices"]["chartqa"] == {"words": 2, "letters": 3, "beta": 1.5}
    assert result["sizes"]["target"]["steps"] == 2 and result["sizes"]["head_steps"] == 3
    rounds = json.loads(out.with_suffix(".rounds.json").read_text())
    assert all(len(r) >= 1 and len(r[0]) == 4 for r in rounds.values())
    assert (tmp_path / "kept" / "target" / "model.safetensors").is_file()
    assert (tmp_path / "kept" / "head" / "model.safetensors").is_file()
