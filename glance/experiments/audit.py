"""The losslessness audit's work: every lossless row against its baseline,
bitwise, with a control run beside each baseline, prompt by prompt.

A row's result on a prompt is ``equal``, ``control_differs`` (it differs, and
so does its baseline's second run: the arithmetic is not reproducible there,
so no decoder can be blamed) or ``MISMATCH``. Rows whose ids the decode or
sweep stage recorded under the same recipe (:func:`glance.experiments.settings.token_recipe`
and :func:`glance.experiments.outputs.inputs_digest`) are taken from its
``outputs.jsonl`` (:func:`glance.experiments.settings.greedy_recipe`); the
greedy baseline's control is always run afresh.
"""

from __future__ import annotations

from pathlib import Path

from glance.experiments.gate import VERDICTS, first_difference, verdict


def recorded(cfg, settings: dict, extend: int, task, rows: dict, n: int) -> dict:
    """``{(row, prompt): ids}`` the decode and sweep stages recorded for
    ``task`` under the audit's recipe (greedy, no filler), for the audit's rows
    and prompts. The sweep's ``N=<b>`` rows are the audit's ``glance@N=<b>``."""
    from glance.experiments.outputs import read_outputs
    from glance.experiments.settings import greedy_recipe

    recipe = greedy_recipe(cfg, settings, extend, task)
    results = Path(cfg.paths.results)
    decoded = read_outputs(results / "sweep" / task.name / "outputs.jsonl", recipe)
    decoded = {(sweep_row(row), i): ids for (row, i), ids in decoded.items()}
    decoded |= read_outputs(results / "decode" / task.name / "outputs.jsonl", recipe)
    if cfg.target.auto_cost is None:  # auto's trees then follow the clock
        decoded = {k: v for k, v in decoded.items() if k[0] != "glance_auto"}
    return {k: v for k, v in decoded.items() if k[0] in rows and k[1] <= n}


def sweep_row(name: str) -> str:
    """The audit's name for a sweep row: ``N=<b>`` is ``glance@N=<b>``, ``auto``
    is ``glance_auto``; greedy ``ar`` keeps its name."""
    return {"ar": "ar", "auto": "glance_auto"}.get(name, f"glance@{name}")


def audit_prompt(session, rows: dict, prompt, i: int, decoded: dict, where: str):
    """One prompt's entry, each row's verdict, and the failures' messages."""
    outs = {
        row: decoded[(row, i)] if (row, i) in decoded else session.run(r, prompt, i)["ids"]
        for row, r in rows.items()
    }
    # greedy's control always runs; a seeded baseline's only when a row differs from it
    controls = {"ar": session.run(rows["ar"], prompt, i)["ids"]}
    for row, r in rows.items():
        base = r.baseline
        if base is not None and base not in controls and outs[row] != outs[base]:
            controls[base] = session.run(rows[base], prompt, i)["ids"]
    entry = {
        "prompt": i,
        "new_tokens": len(outs["ar"]),
        "control_equal": {b: controls[b] == outs[b] for b in controls},
    }
    found, failures = {}, []
    for row, r in rows.items():
        if r.baseline is None:
            continue
        base = r.baseline
        v = found[row] = verdict(outs[row], outs[base], controls.get(base, outs[base]))
        entry[f"{row}_equal"] = v == "equal"
        if v == "MISMATCH":
            at = first_difference(outs[row], outs[base])
            mine, theirs = (o[at] if at < len(o) else "end" for o in (outs[row], outs[base]))
            failures.append(
                f"row {row}, {where}, prompt {i}: new token {at} is {mine}, "
                f"{base} gives {theirs} (and agrees with its own second run)"
            )
    entry["verdict"] = next((v for v in VERDICTS[::-1] if v in found.values()), "equal")
    return entry, found, failures


def audit_task(session, rows: dict, task, n: int, decoded: dict):
    """Prompts 1..``n`` of ``task`` (the warm-up left out): their entries, each
    prompt's verdicts by row, and the failures' messages."""
    entries, found, failures = [], [], []
    for i, prompt in enumerate(session.prompts(task, n + 1)[1:], start=1):
        entry, verdicts, failed = audit_prompt(
            session, rows, prompt, i, decoded, f"task {task.name}"
        )
        entries.append(entry)
        found.append(verdicts)
        failures += failed
    return entries, found, failures


def audit_summary(
    settings: dict, rows: dict, tasks: dict, found: list, *, extend, sweeps, temperatures, n
):
    """``audit.json``'s body: the settings and the verdict counts over all
    prompts and per row (``found``: each prompt's verdicts by row)."""
    counts = {r: dict.fromkeys(VERDICTS, 0) for r in rows}
    for verdicts_of in found:
        for row, v in verdicts_of.items():
            counts[row][v] += 1
    verdicts = [p["verdict"] for ps in tasks.values() for p in ps]
    return {
        "dtype": "float32",
        "budget": settings["budget"],
        "branch_k": settings["branch_k"],
        "extend_budget": extend,
        "sweep_budgets": sweeps,
        "temperatures": temperatures,
        "prompts_per_task": n,
        "prompts": len(verdicts),
        "equal": verdicts.count("equal"),
        "control_differs": verdicts.count("control_differs"),
        "mismatch": verdicts.count("MISMATCH"),
        "rows": {
            name: {"baseline": r.baseline, "prompts": len(verdicts), **counts[name]}
            for name, r in rows.items()
            if r.baseline is not None
        },
    }
