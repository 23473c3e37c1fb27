"""Fit the draftability law per task and pooled, from GLANCE's measured rounds.

Reads ``results/decode/<task>/rounds.jsonl`` (rounds of ``system == "glance"``),
each with its effective ``cap``: the most drafted tokens the round could accept,
the block's limit or the tokens left before the output's end, whichever is
smaller. A round is censored, not a rejection, when its ``stop`` is not a
rejection: it reached its cap (the depth limit or the output's end) or the end
of its tree path (a leaf shallower than the cap). Writes
``results/law.json``: per task and pooled, every field of ``DraftabilityLaw``
(b0, b1, r2_round, r2_ceiling and the ceiling's curve ``ceiling_entropy`` /
``ceiling_accepted``, the decile curve, Spearman), ``holds`` with its four
``conditions`` and the ``thresholds`` it applied, and ``b1_interval``: a 95%
percentile interval for b1 from a bootstrap over prompts (pooled: over
task/prompt pairs) with ``decode.bootstrap`` resamples seeded by ``seed``. Also
``results/law_deciles.csv`` (task, entropy, accepted, fitted, count) for ``dvc
plots``. A task whose rounds cannot be fitted is reported with the reason
instead of numbers. With ``decode.scored_row``, the law is fitted again on the
consistency scorer's rounds (``system == "glance_scored"``), under
``law.json``'s ``scored``, and ``scored_vs_glance`` says whether b1 and the
grounding order changed (:func:`glance.experiments.law_fit.compare_laws`).
"""

from __future__ import annotations

import json
from pathlib import Path

from glance.experiments.law_fit import compare_laws, deciles_csv, fit_tasks
from glance.pipeline.app import app, log, numerics_record, setup
from glance.pipeline.files import write_set


def _finite(x) -> bool:
    try:  # JSON's own check: no NaN or infinity anywhere inside
        return bool(json.dumps(x, allow_nan=False))
    except ValueError:
        return False


def _reported(fit: dict) -> dict:
    """``fit``, or a degenerate fit's reason in place of its non-finite numbers."""
    if _finite(fit):
        return fit
    bad = next(k for k, v in fit.items() if not _finite(v))
    why = f" ({fit['reason']})" if fit.get("reason") else ""
    return {"n": fit.get("n"), "error": f"degenerate fit: {bad} is not finite{why}"}


def _fits(results, tasks, boot, system):
    per_task, pooled = fit_tasks(results, tasks, **boot, system=system)
    return {k: _reported(v) for k, v in per_task.items()}, _reported(pooled)


@app
def main(cfg) -> None:
    setup(cfg)
    results = Path(cfg.paths.results)
    boot = {"resamples": int(cfg.decode.bootstrap), "seed": int(cfg.seed)}
    per_task, pooled = _fits(results, cfg.tasks, boot, "glance")
    law = {"pooled": pooled, "tasks": per_task}
    if cfg.decode.scored_row and cfg.budget != "auto":
        tasks, both = _fits(results, cfg.tasks, boot, "glance_scored")
        law["scored"] = {"pooled": both, "tasks": tasks}
        law["scored_vs_glance"] = compare_laws(law, law["scored"])
        log.info("law on the scorer's rounds: %s", law["scored_vs_glance"])
    law["numerics"] = numerics_record(cfg)
    write_set(results, "law.json", law, {"law_deciles.csv": deciles_csv(per_task, pooled)})
    if "error" in pooled:
        log.warning("pooled law not fitted: %s", pooled["error"])
        return
    interval = pooled["b1_interval"]
    log.info(
        "pooled law: b0 %s, b1 %s [%s, %s], r2_round %s, ceiling %s, holds %s",
        *(pooled["b0"], pooled["b1"], interval["low"], interval["high"]),
        *(pooled[k] for k in ("r2_round", "r2_ceiling", "holds")),
    )


if __name__ == "__main__":
    main()
