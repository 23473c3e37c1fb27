"""The losslessness audit: every lossless row the pipeline reports against its
baseline, bitwise, at float32, with a control beside each baseline.

On ``audit.n`` prompts per task (the decode stage's measured prompts 1..n; the
warm-up prompt 0 is left out) the target decodes greedily twice: the baseline
and its control. The rows (:func:`glance.experiments.rows.audit_rows`): GLANCE
at the configured budget, ``budget="auto"``, the chain,
``extend_budget=decode.extend_row``, GLANCE at every ``sweep.budgets``, and for
each of ``decode.sampled`` ``glance@T`` and ``chain@T`` against a seeded
``ar@T``; with ``decode.scored_row``, ``glance_scored`` (the consistency
scorer's tree) at the configured budget and at ``arms.budget``. Rows the
decode and sweep stages recorded under the audit's recipe are reused
(``reused``): the audit then runs greedy's control and what no stage recorded.
Writes ``results/audit.json`` (per row and per prompt), then
exits 1 naming the row, task, prompt and first differing token of every
mismatch (:mod:`glance.experiments.audit`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from glance.experiments import audit
from glance.pipeline.app import app, log, numerics_record, setup, task_by_name
from glance.pipeline.config import budget
from glance.pipeline.files import write_json


@app
def main(cfg) -> None:
    from glance.experiments.rows import audit_rows
    from glance.experiments.session import open_session
    from glance.experiments.settings import decode_settings, extend_row

    setup(cfg)
    settings = decode_settings(cfg)  # before any model loads
    sweeps = [budget("sweep.budgets", b) for b in cfg.sweep.budgets]
    temperatures = [float(t) for t in cfg.decode.sampled if float(t) > 0]
    cfg = replace(cfg, dtype="float32")  # the audit's contract: bitwise at fp32
    n = int(cfg.audit.n)
    scored = []
    if cfg.decode.scored_row:
        fixed = [b for b in (settings["budget"], int(cfg.arms.budget)) if b != "auto"]
        scored = list(dict.fromkeys(fixed))
    inputs = [(task_by_name(name), n + 1) for name in cfg.tasks]
    s = open_session(cfg, inputs=inputs, scorer=bool(scored))
    extend, auto = extend_row(cfg, s.head), bool(cfg.decode.auto_row)
    rows = audit_rows(
        settings["budget"], settings["branch_k"], sweeps, temperatures, extend, auto, scored=scored
    )
    tasks, reused, found, failures = {}, {}, [], []
    for name in cfg.tasks:
        task = task_by_name(name)
        decoded = audit.recorded(cfg, settings, extend, task, rows, n)
        reused[name] = sorted({row for row, _ in decoded})
        tasks[name], verdicts, failed = audit.audit_task(s, rows, task, n, decoded)
        found, failures = found + verdicts, failures + failed
    summary = audit.audit_summary(
        settings, rows, tasks, found, extend=extend, sweeps=sweeps, temperatures=temperatures, n=n
    )
    summary["scored_budgets"] = scored
    summary |= {"reused": reused, "tasks": tasks, "numerics": numerics_record(cfg)}
    write_json(Path(cfg.paths.results) / "audit.json", summary)
    counts = [summary[k] for k in ("prompts", "equal", "control_differs", "mismatch")]
    message = "audit: %d rows x %d prompts, %d all equal, %d control differs, %d mismatches"
    log.info(message, len(summary["rows"]), *counts)
    if failures:
        log.error("LOSSLESSNESS BROKEN:\n  %s", "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
