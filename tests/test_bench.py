"""The bench's parts that run without a model: the best fixed budget, the
efficiency against the round-cost limit, and the tables."""

import json

import pytest

from glance.experiments.bench import best_budget
from glance.experiments.results import efficiency
from glance.reporting.report import bench_markdown, context_cost_markdown


class Cfg:
    def __init__(self, results):
        self.paths = type("P", (), {"results": str(results)})()


def _sweep(tmp_path, task, speeds):
    folder = tmp_path / "sweep" / task
    folder.mkdir(parents=True)
    budgets = {str(b): {"speedup": {"estimate": s, "low": s, "high": s}} for b, s in speeds.items()}
    (folder / "summary.json").write_text(json.dumps({"budgets": budgets}))


def test_best_budget_is_the_sweeps_fastest(tmp_path):
    _sweep(tmp_path, "docvqa", {7: 2.0, 15: 2.4, 31: 2.3})
    assert best_budget(Cfg(tmp_path), "docvqa") == 15


def test_best_budget_names_a_missing_or_empty_sweep(tmp_path):
    with pytest.raises(SystemExit, match=r"sweep/chartqa/summary\.json: missing; run the sweep"):
        best_budget(Cfg(tmp_path), "chartqa")
    _sweep(tmp_path, "caption", {})
    with pytest.raises(SystemExit, match="'budgets' is empty"):
        best_budget(Cfg(tmp_path), "caption")


def test_efficiency_is_the_verify_share_of_the_window():
    # greedy: 100 tokens in 200 ms (2 ms a step); the row: 100 tokens in 25 rounds,
    # 100 ms in all, of which 60 ms verifying
    greedy = [{"new_tokens": 60}, {"new_tokens": 40}]
    calls = [
        {"new_tokens": 60, "rounds": (60, 15), "verify_ms": 36.0},
        {"new_tokens": 40, "rounds": (40, 10), "verify_ms": 24.0},
    ]
    e = efficiency(calls, [55.0, 45.0], greedy, [120.0, 80.0])
    assert e["t_step"] == pytest.approx(2.0) and e["t_verify"] == pytest.approx(2.4)
    assert e["tau"] == pytest.approx(4.0) and e["speedup"] == pytest.approx(2.0)
    assert e["limit"] == pytest.approx(4.0 * 2.0 / 2.4)
    assert e["value"] == pytest.approx(60.0 / 100.0)


def _row(tau=None, eff=None):
    sp = {"estimate": 1.5, "low": 1.2, "high": 1.8}
    window = {"ms_per_token": 1.0, "tokens_per_s": 1000.0, "speedup": sp, "auto_over": sp}
    row = {"tau": tau, "peak_mib": None, "end_to_end": window, "decode_only": window}
    return row | ({"efficiency": {"value": eff}} if eff is not None else {})


def test_bench_table_names_the_best_budget_and_shows_efficiency():
    cost = {
        "task": "textvqa",
        "n": 3,
        "lengths": [0, 512],
        "skipped": [1536],
        "rows": {
            "glance_auto": [
                {"context": c, "prompt_tokens": 90 + c, "ms_per_token": 1.0, "tau": 4.0,
                 "draft_ms": 1.0, "verify_ms": 2.0, "host_ms": 0.3} for c in (0, 512)
            ]
        },
    }  # fmt: skip
    result = {
        "tasks": {"docvqa": {"hf_greedy": _row(), "glance_best": _row(5.0, 0.66)}},
        "best_budget": {"docvqa": 15},
        "context_cost": cost,
    }
    text = bench_markdown(result)
    assert "| docvqa | glance_best (N=15) | 5.00 |" in text
    assert text.splitlines()[2].endswith("| 1.50x [1.20, 1.80] |  |")
    assert "| 0.66 |" in text and "auto over row, decode" in text
    assert "| 512 | 602 | glance_auto | 4.00 | 1.000 | 1.000 | 2.000 | 0.300 |" in text
    assert "Skipped (prompt and answer past the target's positions): [1536]" in text
    assert context_cost_markdown({"lengths": []}) == ""
