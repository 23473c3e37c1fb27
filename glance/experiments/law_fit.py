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


def task_rounds(results, name: str, system: str = "glance"):
    """The measured rounds of row ``system`` (GLANCE's by default) in task
    ``name`` (entropy, accepted, cap, prompt, censored), from one decode run's
    complete set, or exit naming the file."""
    from glance._io import check_set
    from glance.experiments.results import read_rounds

    folder = Path(results) / "decode" / name
    if not (folder / "rounds.jsonl").is_file():
        raise SystemExit(f"{folder / 'rounds.jsonl'}: missing; run the decode stage for {name}")
    try:  # every task asked, complete and finite, from one decode run's set
        check_set(folder, names=("rounds.jsonl",))
        return read_rounds(folder / "rounds.jsonl", system, prompts=True, censored=True)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def fit_tasks(
    results, tasks, *, resamples: int, seed: int, system: str = "glance"
) -> tuple[dict, dict]:
    """Each task's fit of row ``system``'s rounds, and the pooled one, where
    a prompt is a (task, prompt) pair: tasks number their prompts alike."""
    boot = {"resamples": resamples, "seed": seed}
    per_task, columns = {}, []
    for name in tasks:
        h, a, cap, prompts, cut = task_rounds(results, name, system)
        per_task[name] = fit(h, a, cap, prompts, cut, **boot)
        columns.append((h, a, cap, np.char.add(f"{name}/", prompts.astype(str)), cut))
    pooled = fit(*(np.concatenate(c) for c in zip(*columns, strict=True)), **boot)
    return per_task, pooled


def grounding_order(per_task: dict) -> list[str]:
    """The tasks from least to most draftable under their fitted laws: by the
    law's mean ``E[a|H]`` over the task's own rounds (its deciles' fitted
    values weighted by their counts). A task whose fit failed is left out."""

    def mean_fitted(law: dict) -> float:
        fitted, count = np.asarray(law["decile_fitted"]), np.asarray(law["decile_count"])
        return float((fitted * count).sum() / count.sum())

    ok = {name: law for name, law in per_task.items() if "error" not in law}
    return sorted(ok, key=lambda name: mean_fitted(ok[name]))


def compare_laws(plain: dict, scored: dict) -> dict:
    """Whether the law fitted on the scorer's rounds differs from GLANCE's:
    pooled b1 of each with its interval, whether the intervals overlap, and
    each one's grounding order (:func:`grounding_order`)."""
    out = {}
    if "error" not in plain["pooled"] and "error" not in scored["pooled"]:
        a, b = plain["pooled"]["b1_interval"], scored["pooled"]["b1_interval"]
        out["b1"] = {"glance": plain["pooled"]["b1"], "glance_scored": scored["pooled"]["b1"]}
        out["b1_intervals_overlap"] = bool(a["low"] <= b["high"] and b["low"] <= a["high"])
    order = {
        k: grounding_order(v["tasks"]) for k, v in (("glance", plain), ("glance_scored", scored))
    }
    out["grounding_order"] = order
    out["same_grounding_order"] = order["glance"] == order["glance_scored"]
    return out


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
