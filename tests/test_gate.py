"""The lossless gates: a row that leaves its baseline fails the run."""

from __future__ import annotations

import pytest

import stages.arms as arms


def _runs(greedy, glance, eagle):
    return {"greedy": [{"ids": greedy}], "glance": [{"ids": glance}], "eagle": [{"ids": eagle}]}


def test_a_row_that_leaves_greedy_fails_naming_row_prompt_and_token(monkeypatch):
    monkeypatch.setattr(arms, "run_row", lambda *a, **k: {"ids": [1, 2, 3, 4]})
    with pytest.raises(
        SystemExit, match=r"here: row eagle differs from greedy at new token 2 \(9 against 3\)"
    ):
        arms.gate(
            {}, None, (None, None, 4, []), _runs([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 9]), "here"
        )


def test_a_shorter_output_fails_at_its_end(monkeypatch):
    monkeypatch.setattr(arms, "run_row", lambda *a, **k: {"ids": [1, 2, 3]})
    with pytest.raises(SystemExit, match="row glance differs from greedy at new token 2 .end"):
        arms.gate({}, None, (None, None, 4, []), _runs([1, 2, 3], [1, 2], [1, 2, 3]), "here")


def test_no_gate_where_greedy_itself_is_not_reproducible(monkeypatch):
    monkeypatch.setattr(arms, "run_row", lambda *a, **k: {"ids": [7, 7]})
    arms.gate({}, None, (None, None, 4, []), _runs([1, 2], [1, 3], [1, 2]), "here")


def test_equal_rows_never_run_the_control(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("the control ran")

    monkeypatch.setattr(arms, "run_row", fail)
    arms.gate({}, None, (None, None, 4, []), _runs([1, 2], [1, 2], [1, 2]), "here")


def test_check_lossless_gates_each_row_against_its_own_baseline():
    from stages.common import check_lossless

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

    with pytest.raises(SystemExit, match=r"p: row glance@0.7 differs from ar@0.7 at new token 1"):
        check_lossless(bases, runs, "p", control)
    assert asked == ["ar@0.7"]
