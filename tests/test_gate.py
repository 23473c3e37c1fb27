"""The lossless gate (``glance.experiments.gate.check_lossless``): a row that leaves its
baseline fails the run, naming the row, the prompt and the first differing token."""

from __future__ import annotations

import pytest

from glance.experiments.gate import NotLossless, check_lossless, verdict

GREEDY_BASE = {"greedy": None, "glance": "greedy", "eagle": "greedy"}


def _runs(greedy, glance, eagle):
    return {"greedy": [{"ids": greedy}], "glance": [{"ids": glance}], "eagle": [{"ids": eagle}]}


def test_a_row_that_leaves_greedy_fails_naming_row_prompt_and_token():
    runs = _runs([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 9])
    with pytest.raises(
        NotLossless, match=r"here: row eagle differs from greedy at new token 2 \(9 against 3\)"
    ):
        check_lossless(GREEDY_BASE, runs, "here", lambda base: [1, 2, 3, 4])


def test_a_shorter_output_fails_at_its_end():
    runs = _runs([1, 2, 3], [1, 2], [1, 2, 3])
    with pytest.raises(
        NotLossless, match="row glance differs from greedy at new token 2 .end against 3"
    ):
        check_lossless(GREEDY_BASE, runs, "here", lambda base: [1, 2, 3])


def test_no_gate_where_the_baseline_itself_is_not_reproducible():
    check_lossless(GREEDY_BASE, _runs([1, 2], [1, 3], [1, 2]), "here", lambda base: [7, 7])


def test_equal_rows_never_run_the_control():
    def fail(base):
        raise AssertionError("the control ran")

    check_lossless(GREEDY_BASE, _runs([1, 2], [1, 2], [1, 2]), "here", fail)


def test_each_row_is_gated_against_its_own_baseline():
    runs = {
        "ar": [{"ids": [1, 2]}],
        "glance": [{"ids": [1, 2]}],
        "ar@0.7": [{"ids": [5, 6]}],
        "glance@0.7": [{"ids": [5, 7]}],
    }
    bases = {"ar": None, "glance": "ar", "ar@0.7": None, "glance@0.7": "ar@0.7"}
    asked = []

    def control(base):
        asked.append(base)
        return runs[base][-1]["ids"]

    with pytest.raises(NotLossless, match=r"p: row glance@0.7 differs from ar@0.7 at new token 1"):
        check_lossless(bases, runs, "p", control)
    assert asked == ["ar@0.7"]


def test_the_audit_plans_every_lossless_row_with_its_baseline():
    from glance.experiments.rows import audit_rows as plan

    rows = plan(63, 8, [1, 7], [0.7], extend=63, auto=True)
    bases = {name: r.baseline for name, r in rows.items()}
    assert bases == {
        "ar": None, "glance": "ar", "glance_auto": "ar", "chain": "ar", "glance_extend": "ar",
        "glance@N=1": "ar", "glance@N=7": "ar",
        "ar@0.7": None, "glance@0.7": "ar@0.7", "chain@0.7": "ar@0.7",
    }  # fmt: skip
    assert rows["glance@N=7"].options == {"budget": 7, "branch_k": 8}
    assert rows["glance_extend"].options["extend_budget"] == 63
    assert rows["glance_auto"].options["budget"] == "auto"
    assert all(r.lossless == (r.baseline is not None) for r in rows.values())
    # budget="auto" as the configured budget: no separate auto row; no extension row without one
    assert set(plan("auto", 8, [], [], 0, True)) == {
        "ar",
        "glance",
        "chain",
    }


def test_an_audit_verdict_blames_the_decoder_only_when_the_control_agrees():
    assert verdict([1, 2], [1, 2], [1, 2]) == "equal"
    assert verdict([1, 3], [1, 2], [1, 2]) == "MISMATCH"
    assert verdict([1, 3], [1, 2], [1, 4]) == "control_differs"
