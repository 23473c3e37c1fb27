"""The law stage's work: fit the draftability law to a task's measured rounds,
with ``holds()`` and a prompt-bootstrap interval for b1, and its decile table."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np


def fit(entropy, accepted, cap, prompts, censored, *, resamples: int, seed: int) -> dict:
    """The law's fields, ``holds()`` with its conditions and thresholds, and b1's
    prompt-bootstrap interval, as one JSON-ready dict. ``censored``: the rounds
    that ended without a rejection (:func:`glance.experiments.results.read_rounds`)."""
    from glance.core.law import DraftabilityLaw, b1_interval, holds_thresholds

    try:
        law = DraftabilityLaw.fit(entropy, accepted, cap=cap, censored=censored)
        interval = b1_interval(
            entropy, accepted, cap, prompts, resamples=resamples, seed=seed, censored=censored
        )
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


def task_rounds(results, name: str):
    """GLANCE's measured rounds of task ``name`` (entropy, accepted, cap,
    prompt, censored), from one decode run's complete set, or exit naming the file."""
    from glance._io import check_set
    from glance.experiments.results import read_rounds

    folder = Path(results) / "decode" / name
    if not (folder / "rounds.jsonl").is_file():
        raise SystemExit(f"{folder / 'rounds.jsonl'}: missing; run the decode stage for {name}")
    try:  # every task asked, complete and finite, from one decode run's set
        check_set(folder, names=("rounds.jsonl",))
        return read_rounds(folder / "rounds.jsonl", prompts=True, censored=True)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def fit_tasks(results, tasks, *, resamples: int, seed: int) -> tuple[dict, dict]:
    """Each task's fit, and the pooled one, where a prompt is a (task, prompt)
    pair: tasks number their prompts alike."""
    boot = {"resamples": resamples, "seed": seed}
    per_task, columns = {}, []
    for name in tasks:
        h, a, cap, prompts, cut = task_rounds(results, name)
        per_task[name] = fit(h, a, cap, prompts, cut, **boot)
        columns.append((h, a, cap, np.char.add(f"{name}/", prompts.astype(str)), cut))
    pooled = fit(*(np.concatenate(c) for c in zip(*columns, strict=True)), **boot)
    return per_task, pooled


def deciles_csv(per_task: dict, pooled: dict) -> str:
    """``law_deciles.csv``: task, entropy, accepted, fitted, count per decile."""
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
    return "\n".join(rows) + "\n"
