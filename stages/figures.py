"""The paper's four panels and its tables, from the stages' JSON outputs
(drawn by :mod:`glance.reporting.report`).

* ``figures/law.png`` (a): mean accepted length per entropy decile, one curve per
  task, with the pooled law's fitted curve and its R² against the ceiling.
* ``figures/tree_vs_chain.png`` (b): GLANCE's tau over the chain's per task.
* ``figures/context.png`` (c): GLANCE's tau over the chain's at two context lengths.
* ``figures/budget.png`` (d): speedup over greedy against the verifier budget N.
* ``figures/verify_cost.png``, ``length.png``, ``host_share.png``: the bench's
  cost curves.
* ``results/main_table``, ``regime_table``, ``seeds_table`` and
  ``sampling_table`` (``.md`` and ``.json``).
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, log, setup
from glance.pipeline.files import read_json, write_set


def _summaries(folder: Path, names, what: str) -> dict:
    return {n: read_json(folder / str(n) / "summary.json", what, True) for n in names}


@app
def main(cfg) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from glance.reporting import report

    setup(cfg)
    results, figures = Path(cfg.paths.results), Path(cfg.paths.figures)
    summaries = _summaries(results / "decode", cfg.tasks, "run the decode stage")
    law = read_json(results / "law.json", "run the fit_law stage first")
    meta = summaries[cfg.tasks[0]]
    report.law_panel(plt, law, meta["cap"], figures / "law.png", meta)
    report.tree_over_chain_panel(plt, summaries, cfg.budget, figures / "tree_vs_chain.png")
    context = {
        int(n): read_json(results / "context" / f"ctx-{n}" / "summary.json", "run context", True)
        for n in cfg.context_sweep.lengths
    }
    report.context_panel(plt, context, cfg.context_sweep.task, figures / "context.png")
    sweeps = {
        t: read_json(results / "sweep" / t / "summary.json", "run sweep first", True)
        for t in cfg.tasks
    }
    report.budget_panel(plt, sweeps, figures / "budget.png")
    bench = read_json(results / "bench.json", "run bench first", nonnegative=True)
    report.cost_curves(plt, bench, figures, {"target": bench["target"], "timing": "see each axis"})

    table, main_md = report.main_table(summaries)
    table["budget_sweep"] = {
        t: {b: {k: x[k] for k in ("tau", "speedup")} for b, x in s["budgets"].items()}
        | {"auto": {k: s["auto"][k] for k in ("tau", "speedup", "mean_tree_size")}}
        for t, s in sweeps.items()
    }
    regime, regime_md = report.regime_table(summaries)
    draws = {"main": regime["tasks"]}
    for seed in cfg.seed_check.seeds:
        others = _summaries(results / "seeds" / f"seed-{seed}", cfg.tasks, "run seed_decode")
        draws[f"seed {seed}"] = report.regime_table(others)[0]["tasks"]
    tables = {
        "main_table": (table, main_md),
        "regime_table": (regime, regime_md),
        "seeds_table": report.seeds_table(draws),
        "sampling_table": report.sampling_table(summaries),
    }
    for name, (data, markdown) in tables.items():
        write_set(results, f"{name}.json", data, {f"{name}.md": markdown})
    log.info("figures in %s; main table:\n%s", figures, main_md)


if __name__ == "__main__":
    main()
