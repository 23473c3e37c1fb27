"""The paper-claims table: each verdict follows its rule from the files in
results/, and a missing file reads as not measured, never as a verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from glance.reporting.claims import claims, claims_markdown

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["caption", "textvqa", "infovqa", "docvqa", "chartqa"]


def _iv(est, low, high):
    return {"estimate": est, "low": low, "high": high}


def _results(
    tmp_path,
    taus=(3.0, 3.3, 3.7, 3.9, 4.6),
    b1=(0.3, 0.5, 0.7, 0.9, 1.2),
    arms=True,
    mismatch=0,
    holds=True,
    two_model=0.5,
):
    r = tmp_path / "results"
    r.mkdir()
    rows = {"glance": {"prompts": 100, "equal": 100 - mismatch, "MISMATCH": mismatch,
                       "control_differs": 0}}  # fmt: skip
    (r / "audit.json").write_text(json.dumps({"rows": rows}))
    table = {
        t: {"glance": {"tau": tau}, "tree_over_chain": _iv(1.4, 1.3, 1.5)}
        for t, tau in zip(TASKS, taus, strict=True)
    }
    (r / "main_table.json").write_text(json.dumps({"tasks": table}))
    fits = {
        t: {
            "b1": v,
            "holds": holds or t != "docvqa",
            "b1_interval": {"low": v - 0.1, "high": v + 0.1},
        }
        for t, v in zip(TASKS, b1, strict=True)
    }
    (r / "law.json").write_text(json.dumps({"tasks": fits, "pooled": {"holds": True}}))
    if arms:
        case = {"vs_eagle_tree": {"tau": _iv(2.0, 1.5, 2.5), "speed": _iv(1.1, 1.05, 1.2)}}
        lossy = {"matches_baseline": 0, "lossy": True, "divergence": {"prompts": 100}}
        pooled = {
            "vs_eagle_tree": {"tau": _iv(2.7, 2.0, 3.0)},
            "rows": {
                "two_model": {"speedup": _iv(two_model, two_model - 0.1, two_model + 0.1)},
                "relaxed_top2": lossy,
            },
        }
        free = {"vs_eagle_tree": {"tau": _iv(0.8, 0.7, 0.9), "speed": _iv(0.9, 0.85, 0.95)}}
        cases = {"caption": free, "docvqa": case, "chartqa": case}
        arms = {"cases": cases, "pooled": pooled, "budget": 32, "depth": 16}
        (r / "arms.json").write_text(json.dumps(arms))
    return r


def _verdicts(results):
    rows = claims(results, TASKS)["claims"]
    return {r["claim"]: r.get("verdict", r.get("verdict_speed")) for r in rows}


def test_a_world_that_agrees_with_the_paper_reproduces_every_measured_claim(tmp_path):
    verdicts = _verdicts(_results(tmp_path))
    measured = {c: v for c, v in verdicts.items() if v not in ("untestable on CPU", "not measured")}
    assert len(measured) == 11 and set(measured.values()) == {"reproduced"}, verdicts
    assert list(verdicts.values()).count("untestable on CPU") == 2


def test_verdicts_follow_their_rules(tmp_path):
    verdicts = _verdicts(_results(tmp_path, taus=(3.0, 3.3, 3.9, 3.7, 4.6), b1=(0.3, 0.5, 0.7,
                                  0.6, 0.35)))  # fmt: skip
    assert verdicts["GLANCE's tau is ordered by grounding over the five tasks"] == "contradicted"
    steep = "The law's slope b1 steepens with grounding (caption to chartqa)"
    assert verdicts[steep] == "contradicted"  # neither rising nor apart at the ends
    assert verdicts["holds() passes on every task and pooled"] == "reproduced"


def test_each_contradiction_is_named(tmp_path):
    verdicts = _verdicts(_results(tmp_path, mismatch=1, holds=False, two_model=1.3))
    wrong = {c for c, v in verdicts.items() if v == "contradicted"}
    assert wrong == {
        "Lossless: every audited prompt gives greedy's tokens",
        "holds() passes on every task and pooled",
        "The two-model arm is slower than autoregression (decode window)",
    }


def test_on_a_gpu_the_gpu_claims_are_not_untestable(tmp_path):
    rows = claims(_results(tmp_path), TASKS, device="cuda")["claims"]
    assert not [r for r in rows if r.get("verdict") == "untestable on CPU"]


def test_without_the_arms_their_claims_are_not_measured(tmp_path):
    table = claims(_results(tmp_path, arms=False), TASKS)
    arms = [r for r in table["claims"] if r["source"] == "results/arms.json"]
    assert len(arms) == 6 and {r["verdict"] for r in arms} == {"not measured"}
    (tmp_path / "x").mkdir()
    timed = [r for r in claims(_results(tmp_path / "x"), TASKS)["claims"] if "verdict_speed" in r]
    assert len(timed) == 3  # the speed claims: out of the bitwise reproducibility check
    assert "| not measured |" in claims_markdown(table)


def test_the_committed_claims_are_those_of_the_committed_results(tmp_path):
    results = ROOT / "results"
    if not (results / "claims.json").is_file():
        pytest.fail("results/claims.json is missing: dvc repro stages/arms/dvc.yaml")
    committed = json.loads((results / "claims.json").read_text())
    committed.pop("files", None)
    scratch = tmp_path / "r"
    scratch.mkdir()
    for name in ("audit.json", "main_table.json", "law.json", "arms.json"):
        shutil.copy(results / name, scratch / name)
    assert claims(scratch, committed["tasks"]) == committed
