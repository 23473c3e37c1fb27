"""Panel (d) for one task: GLANCE's speedup and tau against the verifier budget.

    python -m stages.sweep +task=docvqa

On ``sweep.n`` prompts (after a warm-up) the target decodes greedily, then
GLANCE runs at every budget in ``sweep.budgets`` and at ``budget="auto"``, all
interleaved prompt by prompt in one process, timed in the ``timing`` window.
Every row is gated against greedy (``glance.experiments.gate.check_lossless``). Writes
``results/sweep/<task>/summary.json`` (per budget: tau, tokens per second and
the speedup over greedy with its paired bootstrap interval; the configured
budget; ``budget="auto"``'s row and its mean verified tree size per round) and
``curve.csv`` (budget, speedup, low, high, tau) for ``dvc plots``.
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, load_target, numerics_record, setup, task_config
from glance.pipeline.config import budget
from glance.pipeline.files import write_json
from glance.targets.vl import stop_ids
from stages.inputs import prompt_inputs, task_records
from stages.prompts import decode_settings, gate, load_head, verify_costs

#: the files the sweep writes to ``results/sweep/<task>``, as one set
FILES = ("summary.json", "curve.csv")


@app
def main(cfg) -> None:
    from glance._io import check_replaceable, replace_dir
    from glance.core.metrics import drop_warmup
    from glance.experiments.results import system_summary
    from glance.experiments.rows import Models, Prompt, Row, gated, run
    from stages.decode import check_positions

    setup(cfg)
    task = task_config(cfg)
    settings = decode_settings(cfg, task)  # before any model loads
    budgets = [budget("sweep.budgets", b) for b in cfg.sweep.budgets]
    folder = Path(cfg.paths.results) / "sweep" / task.name
    try:
        check_replaceable(folder, "sweep output folder", expect=FILES)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    records = task_records(cfg, task, int(cfg.sweep.n) + 1)
    target, processor = load_target(cfg)
    head = load_head(cfg, target)
    stops, max_new = stop_ids(processor, target), settings["max_new_tokens"]
    inputs = [prompt_inputs(processor, r, cfg.paths.data) for r in records]
    check_positions(cfg, settings, processor, [ids for ids, _ in inputs], f"sweep {task.name}")
    tree = {"branch_k": settings["branch_k"]}
    rows = {
        "ar": Row("ar"),
        **{f"N={b}": Row("glance", "ar", options={**tree, "budget": b}) for b in budgets},
        "auto": Row("glance", "ar", options={**tree, "budget": "auto"}),
    }
    models = Models(target, head, costs=verify_costs(cfg))
    runs, auto_sizes = {r: [] for r in rows}, []
    for i, (ids, positions) in enumerate(inputs):
        prompt = Prompt(ids, positions, max_new, stops)
        for name, row in rows.items():
            record = run(row, models, prompt, timing=settings["timing"])
            runs[name].append(record)
            if name == "auto" and i > 0:
                auto_sizes += [r.tree_size for r in record["stats"].rounds]
        gate(
            gated(rows),
            runs,
            f"sweep {task.name}, prompt {i}",
            lambda base, p=prompt: run(rows[base], models, p, timing=settings["timing"])["ids"],
        )
    measured = {r: list(drop_warmup(v)) for r, v in runs.items()}
    stat = (int(cfg.seed), int(cfg.decode.bootstrap))
    summaries = {r: system_summary(measured[r], measured["ar"], *stat) for r in rows if r != "ar"}
    summary = {
        "task": task.name,
        "n": int(cfg.sweep.n),
        "timing": settings["timing"],
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "target": cfg.target.name,
        "budget": settings["budget"],
        "branch_k": settings["branch_k"],
        "budgets": {str(b): summaries[f"N={b}"] for b in budgets},
        "auto": summaries["auto"] | {"mean_tree_size": sum(auto_sizes) / max(len(auto_sizes), 1)},
    }
    lines = ["budget,speedup,low,high,tau"]
    for b in budgets:
        x = summary["budgets"][str(b)]
        sp = x["speedup"]
        lines.append(f"{b},{sp['estimate']:.6g},{sp['low']:.6g},{sp['high']:.6g},{x['tau']:.6g}")

    def fill(tmp: Path) -> None:  # one set, swapped in whole
        write_json(tmp / "summary.json", summary | {"numerics": numerics_record(cfg)})
        (tmp / "curve.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    replace_dir(folder, fill, "sweep output folder", expect=FILES)


if __name__ == "__main__":
    main()
