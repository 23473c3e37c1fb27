"""The losslessness audit: every lossless row the pipeline reports against its
baseline, bitwise, at float32, with a control beside each baseline.

On ``audit.n`` prompts per task (the decode stage's measured prompts 1..n; the
warm-up prompt 0 is left out) the target decodes greedily twice: the baseline
and its control (does greedy agree with itself on this machine?). The rows:
GLANCE at the configured budget, ``budget="auto"``, the chain,
``extend_budget=decode.extend_row`` (for a head trained with a variable mask
span) and GLANCE at every ``sweep.budgets``; then, for each temperature in
``decode.sampled``, ``glance@T`` and ``chain@T`` against a seeded ``ar@T``,
whose second run (its control) happens when a row differs from it. A row's
result on a prompt is ``equal``, ``control_differs`` (it differs, and so does
its baseline's second run: the arithmetic is not reproducible there, so no
decoder can be blamed) or
``MISMATCH``. Writes ``results/audit.json`` (per row and per prompt), then
exits 1 naming the row, task, prompt and first differing token of every
mismatch.

The decode stage runs many of these rows on the same prompts. Where its
``results/decode/<task>/outputs.jsonl`` was made under the recipe the audit
would use (float32, greedy, no context filler, the same budget, seeds and
pinned numerics: :func:`stages.prompts.token_recipe`; the same task file,
target, head weights and ``glance`` sources: :func:`stages.decode.inputs_digest`),
those rows' ids are taken from it rather than decoded again (``audit.json`` lists them
under ``from_decode``); the greedy baseline's control run is always the
audit's own, so decode's baseline is checked against a fresh greedy run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import open_dict

from glance.experiments.gate import VERDICTS, first_difference, verdict
from glance.pipeline.app import app, load_target, log, numerics_record, setup, task_by_name
from glance.pipeline.config import budget
from glance.pipeline.files import write_json
from glance.targets.vl import stop_ids
from stages.decode import inputs_digest
from stages.inputs import prompt_inputs, task_records
from stages.prompts import (
    decode_settings,
    extend_row,
    load_head,
    read_outputs,
    sampling_kwargs,
    token_recipe,
    verify_costs,
)


@app
def main(cfg) -> None:
    from glance.experiments.rows import Models, Prompt, audit_rows, run

    setup(cfg)
    settings = decode_settings(cfg)  # before any model loads
    sweep_budgets = [budget("sweep.budgets", b) for b in cfg.sweep.budgets]
    temperatures = [float(t) for t in cfg.decode.sampled if float(t) > 0]
    with open_dict(cfg):
        cfg.dtype = "float32"  # the audit's contract: bitwise at fp32, whatever decode used
    target, processor = load_target(cfg)
    head = load_head(cfg, target)
    stops = stop_ids(processor, target)
    extend = extend_row(cfg, head)
    rows = audit_rows(
        settings["budget"],
        settings["branch_k"],
        sweep_budgets,
        temperatures,
        extend,
        bool(cfg.decode.auto_row),
    )
    models = Models(target, head, costs=verify_costs(cfg))
    n = int(cfg.audit.n)
    tasks, counts, failures = {}, {r: dict.fromkeys(VERDICTS, 0) for r in rows}, []
    reused = {}
    for name in cfg.tasks:
        task = task_by_name(name)
        max_new = int(cfg.max_new_tokens or task.max_new_tokens)
        greedy = {"context": 0, "extend_budget": 0, "temperature": 0.0}
        recipe = token_recipe(cfg, {**settings, **greedy, "max_new_tokens": max_new}, extend)
        recipe |= inputs_digest(cfg, task)
        decoded = read_outputs(Path(cfg.paths.results) / "decode" / name / "outputs.jsonl", recipe)
        if cfg.target.get("auto_cost") is None:  # auto's trees then follow the clock
            decoded = {k: v for k, v in decoded.items() if k[0] != "glance_auto"}
        reused[name] = sorted({row for row, i in decoded if row in rows and i <= n})
        per_prompt = []
        for i, record in enumerate(task_records(cfg, task, n + 1)[1:], start=1):
            ids, positions = prompt_inputs(processor, record, cfg.paths.data)
            prompt = Prompt(ids, positions, max_new, stops)

            def ids_of(row: str, i=i, prompt=prompt) -> list[int]:
                r = rows[row]
                return run(r, models, prompt, **sampling_kwargs(cfg, r.temperature, i))["ids"]

            outs = {row: decoded[(row, i)] if (row, i) in decoded else ids_of(row) for row in rows}
            # greedy's control always runs; a seeded baseline's only when a row differs from it
            controls = {"ar": ids_of("ar")}
            for row, r in rows.items():
                base = r.baseline
                if base is not None and base not in controls and outs[row] != outs[base]:
                    controls[base] = ids_of(base)
            entry = {
                "prompt": i,
                "new_tokens": len(outs["ar"]),
                "control_equal": {b: controls[b] == outs[b] for b in controls},
            }
            found = []
            for row, r in rows.items():
                base = r.baseline
                if base is None:
                    continue
                v = verdict(outs[row], outs[base], controls.get(base, outs[base]))
                counts[row][v] += 1
                found.append(v)
                entry[f"{row}_equal"] = v == "equal"
                if v == "MISMATCH":
                    at = first_difference(outs[row], outs[base])
                    mine, theirs = (
                        o[at] if at < len(o) else "end" for o in (outs[row], outs[base])
                    )
                    failures.append(
                        f"row {row}, task {name}, prompt {i}: new token {at} is {mine}, "
                        f"{base} gives {theirs} (and agrees with its own second run)"
                    )
            entry["verdict"] = next((v for v in VERDICTS[::-1] if v in found), "equal")
            per_prompt.append(entry)
        tasks[name] = per_prompt
    verdicts = [p["verdict"] for ps in tasks.values() for p in ps]
    summary = {
        "dtype": "float32",
        "budget": settings["budget"],
        "branch_k": settings["branch_k"],
        "extend_budget": extend,
        "sweep_budgets": sweep_budgets,
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
        "from_decode": reused,
        "tasks": tasks,
    }
    summary["numerics"] = numerics_record(cfg)
    write_json(Path(cfg.paths.results) / "audit.json", summary)
    log.info(
        "audit: %d rows x %d prompts, %d prompts all equal, %d control differs, %d mismatches",
        len(summary["rows"]),
        summary["prompts"],
        summary["equal"],
        summary["control_differs"],
        summary["mismatch"],
    )
    if failures:
        log.error("LOSSLESSNESS BROKEN:\n  %s", "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
