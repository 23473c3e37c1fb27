"""Panel (d) for one task: GLANCE's speedup and tau against the verifier budget.

    python -m stages.sweep +task=docvqa

On ``sweep.n`` prompts (after a warm-up) the target decodes greedily, then
GLANCE runs at every budget in ``sweep.budgets`` and at ``budget="auto"``, all
interleaved prompt by prompt in one process, timed in the ``timing`` window.
Every row is gated against greedy. Writes ``results/sweep/<task>/summary.json``
(per budget: tau, tokens per second and the speedup over greedy with its
paired bootstrap interval; ``budget="auto"``'s row and its mean verified tree
size), ``curve.csv`` for ``dvc plots``, and ``outputs.jsonl``, each row's
token ids, which the audit reuses (:mod:`glance.experiments.sweep`).
"""

from __future__ import annotations

from pathlib import Path

from glance.experiments import sweep
from glance.pipeline.app import app, setup, task_config
from glance.pipeline.config import budget
from glance.pipeline.files import refuse_unreplaceable


@app
def main(cfg) -> None:
    from glance.core.metrics import drop_warmup
    from glance.experiments.decode import check_positions
    from glance.experiments.session import open_session
    from glance.experiments.settings import decode_settings, extend_row, greedy_recipe

    setup(cfg)
    task = task_config(cfg)
    settings = decode_settings(cfg, task)  # before any model loads
    budgets = [budget("sweep.budgets", b) for b in cfg.sweep.budgets]
    folder = Path(cfg.paths.results) / "sweep" / task.name
    refuse_unreplaceable(folder, "sweep output folder", sweep.FILES, "sweep", cfg)
    n = int(cfg.sweep.n) + 1
    s = open_session(cfg, inputs=[(task, n)])
    prompts = s.prompts(task, n, max_new=settings["max_new_tokens"])
    check_positions(cfg, settings, prompts, f"sweep {task.name}")
    rows = sweep.sweep_rows(budgets, settings["branch_k"])
    runs = s.decode(rows, prompts, f"sweep {task.name}", timing=settings["timing"])
    summary = sweep.sweep_summary(cfg, task, settings, budgets, runs)
    recipe = greedy_recipe(cfg, settings, extend_row(cfg, s.head), task)
    ids = {row: [r["ids"] for r in drop_warmup(v)] for row, v in runs.items()}
    sweep.write_sweep(folder, cfg, summary, budgets, ids=ids, recipe=recipe)


if __name__ == "__main__":
    main()
