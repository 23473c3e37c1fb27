"""The row registry (``glance.experiments.rows``): every kind runs through one
call, returns one record, and the lossless kinds reproduce greedy decoding."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from glance.experiments.rows import (  # noqa: E402
    KINDS,
    Models,
    Prompt,
    Row,
    audit_rows,
    decode_rows,
    gated,
    run,
)

N_NEW = 24
RECORD = {"ids", "ms", "wall_ms", "new_tokens", "committed", "rounds", "draft_ms", "stats"}


def _prompt(world):
    return Prompt(world.input_ids, world.positions, N_NEW, [])


def test_every_lossless_kind_of_glance_s_loop_reproduces_greedy(world):
    import torch

    from glance.heads.scorer import build_scorer

    scorer = build_scorer(world.head, world.target, rank=4, top_k=4, seed=1)
    with torch.no_grad():
        scorer.successor.weight.normal_(0.0, 0.5)  # one that re-ranks
    models, prompt = Models(world.target, world.head, scorer=scorer), _prompt(world)
    want = world.reference[0, world.input_ids.shape[1] :][:N_NEW].tolist()
    rows = {
        "ar": Row("ar"),
        "glance": Row("glance", "ar", options={"budget": 15, "branch_k": 4}),
        "chain": Row("chain", "ar"),
        "auto": Row("glance", "ar", options={"budget": "auto"}),
        "scored": Row("scored", "ar", options={"budget": 15, "branch_k": 8}),
    }
    for name, row in rows.items():
        record = run(row, models, prompt)
        assert set(record) == RECORD, name
        assert record["ids"] == want, name
        assert record["new_tokens"] == len(want) and record["wall_ms"] >= record["ms"] > 0
        drafts = KINDS[row.kind].drafts
        assert (record["rounds"] is not None) == drafts, name
        if drafts:
            assert record["committed"] == len(want) - 1  # the prefill's token is no round's
            assert record["draft_ms"] > 0


def test_a_one_token_answer_has_no_round_and_no_draft_time(world):
    """max_new_tokens=1: the prefill gives the only token, so no round drafts."""
    models = Models(world.target, world.head)
    prompt = Prompt(world.input_ids, world.positions, 1, [])
    want = world.reference[0, world.input_ids.shape[1] :][:1].tolist()
    for kind in ("glance", "chain"):
        record = run(Row(kind, "ar"), models, prompt)
        assert record["ids"] == want and record["rounds"] == 0 and record["draft_ms"] is None


def test_a_relaxed_row_is_not_gated_and_extra_options_override_the_row(world):
    models, prompt = Models(world.target, world.head), _prompt(world)
    row = Row("glance", "ar", options={"budget": 15, "branch_k": 4})
    small = run(row, models, prompt, budget=1)
    assert small["stats"].rounds[0].tree_size == 1
    rows = {"ar": Row("ar"), "r": Row("relaxed", "ar", options={"accept": "top2"})}
    assert gated(rows) == {}
    assert gated({**rows, "g": row}) == {"g": "ar"}


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="row kind: expected one of"):
        Row("nonsense")


def test_decode_rows_follow_the_settings():
    rows = decode_rows(63, 8, 0.0, chain=True, auto=True, extend=63, sampled=[0.0, 0.7])
    assert list(rows) == [
        "ar", "glance", "chain", "glance_auto", "glance_extend", "ar@0.7", "glance@0.7", "chain@0.7"
    ]  # fmt: skip
    assert rows["glance_extend"].options["extend_budget"] == 63
    assert rows["glance@0.7"].baseline == "ar@0.7" and rows["glance@0.7"].temperature == 0.7
    assert gated(rows)["chain@0.7"] == "ar@0.7" and "ar" not in gated(rows)
    # extend_budget already extends glance: no separate row; budget="auto": no auto row
    assert set(decode_rows("auto", 8, 0.0, extend_budget=8, chain=False, auto=True, extend=63)) == {
        "ar",
        "glance",
    }
    # the scorer's row at a fixed budget only, gated against greedy
    scored = decode_rows(63, 8, 0.0, chain=False, scored=True)
    assert scored["glance_scored"].kind == "scored" and gated(scored)["glance_scored"] == "ar"
    assert "glance_scored" not in decode_rows("auto", 8, 0.0, chain=False, scored=True)


def test_the_audit_runs_every_row_the_decode_stage_gates():
    decode = decode_rows(63, 8, 0.0, chain=True, auto=True, extend=63, sampled=[0.7], scored=True)
    audit = audit_rows(63, 8, [1], [0.7], extend=63, auto=True, scored=[63, 32])
    assert audit["glance_scored@N=32"].options == {"budget": 32}  # the arms' budget too
    assert set(gated(decode)) <= set(gated(audit))
    for name in gated(decode):
        assert audit[name].options == {
            k: v for k, v in decode[name].options.items() if k != "extend_budget" or v
        }
