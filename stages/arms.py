"""The comparison arms: GLANCE against an EAGLE-3-style head, dflash's chain, a
two-model drafter, and lossy relaxed rules.

    dvc repro stages/arms/dvc.yaml
    python -m stages.arms arms.n=5 'arms.tasks=[chartqa]'

The rows (:func:`glance.experiments.arms.arms_rows`) run on the same prompts,
interleaved; both heads verify ``arms.budget`` tokens a round with the same
engine, verify and walk. ``relaxed_<rule>`` rows are LOSSY and each output
that leaves greedy is explained (:func:`glance.decoding.relaxed.first_divergence`);
every other row must equal ``greedy``, or the stage fails naming the case,
prompt, row and first differing token, unless greedy's second run differs too.
Every task runs at context 0, ``context_sweep.task`` again at each non-zero
``context_sweep`` length (panel (c)). First, each head runs at each of
``arms.budgets`` on ``sweep.task``; the EAGLE-style head's fastest budget
then runs in every case as ``eagle_best``, beside GLANCE's default
(``glance_auto``, ``budget="auto"``). Times use the decode-only window, but
``dflash_chain`` runs dflash's own loop, timed end to end (read its
``end_to_end`` column). Writes ``results/arms.json``, ``results/arms.md`` and
``figures/arms_context.png``.
"""

from __future__ import annotations

from pathlib import Path

from glance.experiments import arms
from glance.pipeline.app import app, log, numerics_record, setup
from glance.pipeline.files import write_set


@app
def main(cfg) -> None:
    from dataclasses import replace

    from glance.decoding.relaxed import RULES
    from glance.experiments.session import open_session
    from glance.experiments.settings import verify_costs
    from glance.reporting.report import arms_figure, arms_markdown

    for i, rule in enumerate(cfg.arms.rules):  # before any model loads
        if rule not in RULES:
            raise SystemExit(f"arms.rules[{i}]: expected one of {RULES}; got {rule!r}")
    setup(cfg)
    a = cfg.arms
    # the run's cost book: auto rows plan with target.auto_cost, as in every other stage
    models = lambda target: replace(arms.arms_models(cfg, target), costs=verify_costs(cfg))  # noqa: E731
    s = open_session(cfg, models, arms.arms_inputs(cfg))
    shape = (int(a.budget), int(cfg.branch_k), int(a.width), int(a.depth))
    result, stat = arms.arms_header(cfg, s.target), (int(cfg.seed), int(cfg.decode.bootstrap))
    # each head's best budget first: the EAGLE-style head's joins the cases as eagle_best
    sweep = arms.budget_sweep(s, arms.arms_rows(*shape, (), int(a.assistant.depth)))
    rows = arms.arms_rows(
        *shape, a.rules, int(a.assistant.depth), eagle_best=sweep["eagle"]["best_budget"]
    )
    lossy = {name for name, row in rows.items() if row.kind == "relaxed"}
    pooled = {row: [] for row in rows}
    for name, context, n in arms.arms_cases(cfg):
        runs = arms.run_case(s, rows, lossy, name, context, n)
        key = name if context == 0 else f"{name}@context{context}"
        case = {"task": name, "context": context, "n": n}
        result["cases"][key] = case | arms.summarise(runs, *stat, lossy)
        if context == 0:
            for row in rows:  # each task's warm-up goes first, dropped per task
                pooled[row] += runs[row][1:]
    result["pooled"] = arms.summarise({r: [None] + c for r, c in pooled.items()}, *stat, lossy)
    result["budget_sweep"] = sweep
    others = {"arms.md": arms_markdown(result)}
    write_set(
        Path(cfg.paths.results), "arms.json", result | {"numerics": numerics_record(cfg)}, others
    )
    arms_figure(result, cfg.context_sweep.task, Path(cfg.paths.figures) / "arms_context.png")
    log.info("arms:\n%s", others["arms.md"])


if __name__ == "__main__":
    main()
