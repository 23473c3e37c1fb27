"""Panel (d)'s work: GLANCE's speed and tau at each verify budget, and at
``budget="auto"``, against greedy on one task."""

from __future__ import annotations

from pathlib import Path

#: the files the sweep writes to ``results/sweep/<task>``, as one set
FILES = ("summary.json", "curve.csv", "outputs.jsonl")


def sweep_rows(budgets, branch_k: int) -> dict:
    """Greedy, GLANCE at each budget (``N=<b>``) and at ``budget="auto"``."""
    from glance.experiments.rows import Row

    tree = {"branch_k": branch_k}
    return {
        "ar": Row("ar"),
        **{f"N={b}": Row("glance", "ar", options={**tree, "budget": b}) for b in budgets},
        "auto": Row("glance", "ar", options={**tree, "budget": "auto"}),
    }


def sweep_summary(cfg, task, settings: dict, budgets, runs: dict) -> dict:
    """Per budget: tau, tokens per second and the speedup over greedy with its
    paired bootstrap interval; the configured budget; ``auto``'s row and its
    mean verified tree size per round."""
    from glance.core.metrics import drop_warmup
    from glance.experiments.results import system_summary

    measured = {r: list(drop_warmup(v)) for r, v in runs.items()}
    stat = (int(cfg.seed), int(cfg.decode.bootstrap))
    summaries = {r: system_summary(measured[r], measured["ar"], *stat) for r in runs if r != "ar"}
    sizes = [r.tree_size for record in measured["auto"] for r in record["stats"].rounds]
    return {
        "task": task.name,
        "n": int(cfg.sweep.n),
        "timing": settings["timing"],
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "target": cfg.target.name,
        "budget": settings["budget"],
        "branch_k": settings["branch_k"],
        "budgets": {str(b): summaries[f"N={b}"] for b in budgets},
        "auto": summaries["auto"] | {"mean_tree_size": sum(sizes) / max(len(sizes), 1)},
    }


def write_sweep(folder, cfg, summary: dict, budgets, *, ids: dict, recipe: dict) -> None:
    """``summary.json``, ``curve.csv`` (budget, speedup, low, high, tau, for
    ``dvc plots``) and ``outputs.jsonl`` (``ids``: row -> token ids per
    measured prompt, under ``recipe``,
    :func:`glance.experiments.settings.greedy_recipe`, which the audit reuses)
    into ``folder``, as one set."""
    from glance._io import replace_dir
    from glance.experiments.outputs import write_outputs
    from glance.pipeline.app import numerics_record
    from glance.pipeline.files import write_json

    lines = ["budget,speedup,low,high,tau"]
    for b in budgets:
        x = summary["budgets"][str(b)]
        sp = x["speedup"]
        lines.append(f"{b},{sp['estimate']:.6g},{sp['low']:.6g},{sp['high']:.6g},{x['tau']:.6g}")

    def fill(tmp: Path) -> None:
        write_json(tmp / "summary.json", summary | {"numerics": numerics_record(cfg)})
        (tmp / "curve.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        write_outputs(tmp / "outputs.jsonl", recipe, ids)

    replace_dir(folder, fill, "sweep output folder", expect=FILES, kind="sweep")
