"""The paper's panels and tables from the stages' JSON outputs: what
``stages.figures`` reads, draws (:mod:`glance.reporting.report`'s panels) and
tabulates."""

from __future__ import annotations

from pathlib import Path

from glance.core.law import check_law_record
from glance.pipeline.files import read_json


def _summaries(folder: Path, names, what: str) -> dict:
    return {n: read_json(folder / str(n) / "summary.json", what, True) for n in names}


def read_outputs(cfg) -> dict:
    """Every output the panels and tables read: each task's decode summary,
    the law, the context runs, the sweeps, the bench and the seed draws'
    decode summaries; a missing one is named with the stage that makes it, and
    a law whose ``holds`` contradicts its own fit is refused
    (:func:`glance.core.law.check_law_record`)."""
    results = Path(cfg.paths.results)
    return {
        "decode": _summaries(results / "decode", cfg.tasks, "run the decode stage"),
        "law": check_law_record(
            read_json(results / "law.json", "run the fit_law stage first"), results / "law.json"
        ),
        "context": {
            int(n): read_json(
                results / "context" / f"ctx-{n}" / "summary.json", "run context", True
            )
            for n in cfg.context_sweep.lengths
        },
        "sweeps": _summaries(results / "sweep", cfg.tasks, "run sweep first"),
        "bench": read_json(results / "bench.json", "run bench first", nonnegative=True),
        "seeds": {
            seed: _summaries(results / "seeds" / f"seed-{seed}", cfg.tasks, "run seed_decode")
            for seed in cfg.seed_check.seeds
        },
    }


def draw(out: dict, cfg, figures: Path) -> None:
    """Panels (a) to (d) and the bench's cost curves into ``figures``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from glance.reporting import report

    summaries, bench = out["decode"], out["bench"]
    meta = summaries[cfg.tasks[0]]
    report.law_panel(plt, out["law"], meta["cap"], figures / "law.png", meta)
    report.tree_over_chain_panel(plt, summaries, cfg.budget, figures / "tree_vs_chain.png")
    report.context_panel(plt, out["context"], cfg.context_sweep.task, figures / "context.png")
    report.budget_panel(plt, out["sweeps"], figures / "budget.png")
    report.cost_curves(plt, bench, figures, {"target": bench["target"], "timing": "see each axis"})


def tables(out: dict) -> dict:
    """name -> (data, markdown) of the main, regime, seeds and sampling tables."""
    from glance.reporting import report

    summaries = out["decode"]
    table, main_md = report.main_table(summaries)
    table["budget_sweep"] = {
        t: {b: {k: x[k] for k in ("tau", "speedup")} for b, x in s["budgets"].items()}
        | {"auto": {k: s["auto"][k] for k in ("tau", "speedup", "mean_tree_size")}}
        for t, s in out["sweeps"].items()
    }
    regime, regime_md = report.regime_table(summaries)
    draws = {"main": regime["tasks"]}
    for seed, others in out["seeds"].items():
        draws[f"seed {seed}"] = report.regime_table(others)[0]["tasks"]
    return {
        "main_table": (table, main_md),
        "regime_table": (regime, regime_md),
        "seeds_table": report.seeds_table(draws),
        "sampling_table": report.sampling_table(summaries),
    }
