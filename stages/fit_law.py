"""Fit the draftability law per task and pooled, from GLANCE's measured rounds.

Reads ``results/decode/<task>/rounds.jsonl`` (rounds of ``system == "glance"``),
each with its effective ``cap``: the most drafted tokens the round could accept,
the block's limit or the tokens left before the output's end, whichever is
smaller. A round that reached its cap is censored, not a rejection. Writes
``results/law.json``: per task and pooled, every field of ``DraftabilityLaw``
(b0, b1, r2_round, r2_ceiling and the ceiling's curve ``ceiling_entropy`` /
``ceiling_accepted``, the decile curve, Spearman), ``holds`` with its four
``conditions`` and the ``thresholds`` it applied, and ``b1_interval``: a 95%
percentile interval for b1 from a bootstrap over prompts (pooled: over
task/prompt pairs) with ``decode.bootstrap`` resamples seeded by ``seed``. Also
``results/law_deciles.csv`` (task, entropy, accepted, fitted, count) for ``dvc
plots``. A task whose rounds cannot be fitted is reported with the reason
instead of numbers.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from glance.experiments.results import read_rounds
from glance.pipeline.app import app, log, numerics_record, setup
from glance.pipeline.files import write_set


def fit(entropy, accepted, cap, prompts, *, resamples: int, seed: int) -> dict:
    """The law's fields, ``holds()`` with its conditions and thresholds, and b1's
    prompt-bootstrap interval, as one JSON-ready dict."""
    from glance.core.law import DraftabilityLaw, b1_interval, holds_thresholds

    try:
        law = DraftabilityLaw.fit(entropy, accepted, cap=cap)
        interval = b1_interval(entropy, accepted, cap, prompts, resamples=resamples, seed=seed)
    except ValueError as err:
        return {"n": int(len(entropy)), "error": str(err)}
    thresholds = holds_thresholds()
    ok, conditions = law.holds(**thresholds)
    b1_ci = {k: v for k, v in asdict(interval).items() if k != "estimate"}
    return law.to_dict() | {
        "holds": ok,
        "conditions": conditions,
        "thresholds": thresholds,
        "b1_interval": b1_ci,
    }


@app
def main(cfg) -> None:
    from glance._io import check_set

    setup(cfg)
    results = Path(cfg.paths.results)
    boot = {"resamples": int(cfg.decode.bootstrap), "seed": int(cfg.seed)}
    per_task, columns = {}, []
    for name in cfg.tasks:
        folder = results / "decode" / name
        if not (folder / "rounds.jsonl").is_file():
            raise SystemExit(f"{folder / 'rounds.jsonl'}: missing; run the decode stage for {name}")
        try:  # every task asked, complete and finite, from one decode run's set
            check_set(folder, names=("rounds.jsonl",))
            h, a, cap, prompts = read_rounds(folder / "rounds.jsonl", prompts=True)
        except ValueError as err:
            raise SystemExit(str(err)) from None
        per_task[name] = fit(h, a, cap, prompts, **boot)
        columns.append((h, a, cap, np.char.add(f"{name}/", prompts.astype(str))))
    # Pooled, a prompt is a (task, prompt) pair: tasks number their prompts alike.
    pooled = fit(*(np.concatenate(c) for c in zip(*columns, strict=True)), **boot)
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
    deciles = "\n".join(rows) + "\n"
    law = {"pooled": pooled, "tasks": per_task, "numerics": numerics_record(cfg)}
    write_set(results, "law.json", law, {"law_deciles.csv": deciles})
    if "error" in pooled:
        log.warning("pooled law not fitted: %s", pooled["error"])
    else:
        log.info(
            "pooled law: b0 %s, b1 %s [%s, %s], r2_round %s, ceiling %s, holds %s",
            pooled["b0"],
            pooled["b1"],
            pooled["b1_interval"]["low"],
            pooled["b1_interval"]["high"],
            pooled["r2_round"],
            pooled["r2_ceiling"],
            pooled["holds"],
        )


if __name__ == "__main__":
    main()
