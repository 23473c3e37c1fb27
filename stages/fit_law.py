"""Fit the draftability law per task and pooled, from GLANCE's measured rounds.

Reads ``results/decode/<task>/rounds.jsonl`` (rounds of ``system == "glance"``),
each with its effective ``cap``: the most drafted tokens the round could accept,
the block's limit or the tokens left before the output's end, whichever is
smaller. A round that reached its cap is censored, not a rejection. Writes
``results/law.json``: per task and pooled, b0, b1, r2_round, r2_ceiling, the
decile curve, the ceiling's bin means, Spearman, and ``holds()`` with its four
conditions; and ``results/law_deciles.csv`` (task, entropy, accepted,
fitted, count) for ``dvc plots``. A task whose rounds cannot be fitted (for
example every round at the cap) is reported with the reason instead of numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from glance.results import read_rounds
from stages.common import app, log, read_json, setup, write_json


def fit(entropy, accepted, cap) -> dict:
    """The law's fit and ``holds()``, plus the ceiling's curve: mean entropy and
    mean accepted length in each of the ceiling's equal-count entropy bins."""
    from glance.law import DraftabilityLaw, rank_bins

    try:
        law = DraftabilityLaw.fit(entropy, accepted, cap=cap)
    except ValueError as err:
        return {"n": int(len(entropy)), "error": str(err)}
    ok, conditions = law.holds()
    bins = rank_bins(entropy, law.ceiling_bins)
    count = np.bincount(bins, minlength=law.ceiling_bins)
    used = count > 0
    curve = {
        "ceiling_entropy": (
            np.bincount(bins, weights=entropy, minlength=law.ceiling_bins)[used] / count[used]
        ).tolist(),
        "ceiling_accepted": (
            np.bincount(bins, weights=accepted, minlength=law.ceiling_bins)[used] / count[used]
        ).tolist(),
    }
    return law.to_dict() | {"holds": ok, "conditions": conditions} | curve


@app
def main(cfg) -> None:
    from glance._io import atomic_write_text

    setup(cfg)
    results = Path(cfg.paths.results)
    per_task, pooled_h, pooled_a, pooled_cap = {}, [], [], []
    for name in cfg.tasks:
        folder = results / "decode" / name
        read_json(folder / "summary.json", f"run the decode stage for {name}")
        h, a, cap = read_rounds(folder / "rounds.jsonl")
        per_task[name] = fit(h, a, cap)
        pooled_h.append(h)
        pooled_a.append(a)
        pooled_cap.append(cap)
    pooled = fit(np.concatenate(pooled_h), np.concatenate(pooled_a), np.concatenate(pooled_cap))
    write_json(results / "law.json", {"pooled": pooled, "tasks": per_task})
    rows = ["task,entropy,accepted,fitted,count"]
    for name, law in [*per_task.items(), ("pooled", pooled)]:
        if "error" in law:
            continue
        for h, a, f, c in zip(
            law["decile_entropy"],
            law["decile_accepted"],
            law["decile_fitted"],
            law["decile_count"],
            strict=True,
        ):
            rows.append(f"{name},{h:.6g},{a:.6g},{f:.6g},{c}")
    atomic_write_text(results / "law_deciles.csv", "\n".join(rows) + "\n")
    if "error" in pooled:
        log.warning("pooled law not fitted: %s", pooled["error"])
    else:
        log.info(
            "pooled law: b0 %s, b1 %s, r2_round %s, ceiling %s, holds %s",
            pooled["b0"],
            pooled["b1"],
            pooled["r2_round"],
            pooled["r2_ceiling"],
            pooled["holds"],
        )


if __name__ == "__main__":
    main()
