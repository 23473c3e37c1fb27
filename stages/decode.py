"""Decode one task: the autoregressive baseline, GLANCE and (with ``chain``) the
width-1 chain ablation, back to back on each prompt, in one process.

    python -m stages.decode +task=chartqa budget=63
    python -m stages.decode -m +task=docvqa budget=15,31,63,127

``n + 1`` prompts run; the first is the warm-up and is dropped. All rows run
at ``temperature`` (0: greedy); ``glance_extend`` runs with
``extend_budget=decode.extend_row``, ``glance_auto`` with ``budget="auto"``,
``glance_scored`` (with ``decode.scored_row``, at a fixed ``budget``) with the
scorer stage's consistency scorer, and for each of ``decode.sampled``
``ar@T``, ``glance@T`` (and ``chain@T``) sample at ``T`` with seeds from
``seed`` and the prompt's index
(:func:`glance.experiments.rows.decode_rows`). Every row must give its
baseline's tokens on every prompt, or the stage fails naming the task, prompt,
row and first differing token. Writes ``summary.json``, ``rounds.jsonl``,
``round_ms.jsonl`` and ``outputs.jsonl`` (:mod:`glance.experiments.decode`) to
``out_dir``: by default ``results/decode/<task>``, for a ``-m`` sweep
``results/sweeps/<task>/<the run's overrides>``.
"""

from __future__ import annotations

from glance.experiments import decode as d
from glance.experiments.settings import check_context, decode_settings, extend_row
from glance.pipeline.app import app, log, setup, task_config
from glance.pipeline.files import refuse_unreplaceable


@app
def main(cfg) -> None:
    from glance.core.metrics import drop_warmup
    from glance.experiments.rows import decode_rows
    from glance.experiments.session import open_session

    setup(cfg)
    task = task_config(cfg)
    settings = decode_settings(cfg, task)  # before any model loads
    out_dir = d.output_dir(cfg, task)
    refuse_unreplaceable(out_dir, "out_dir", d.FILES, "decode", cfg)
    check_context(cfg, settings)
    scored = bool(cfg.decode.scored_row) and settings["budget"] != "auto"
    s = open_session(cfg, inputs=[(task, settings["n"] + 1)], scorer=scored)
    prompts = s.prompts(task, settings["n"] + 1, settings["context"], settings["max_new_tokens"])
    d.check_positions(cfg, settings, prompts, f"decode {task.name}")
    settings["extend_row"] = extend = extend_row(cfg, s.head)
    rows = decode_rows(
        *(settings[k] for k in ("budget", "branch_k", "temperature")),
        extend_budget=settings["extend_budget"],
        chain=bool(cfg.chain),
        auto=bool(cfg.decode.auto_row),
        extend=extend,
        sampled=cfg.decode.sampled,
        scored=scored,
    )
    runs = s.decode(rows, prompts, f"decode {task.name}", timing=settings["timing"])
    rounds = d.measured_rounds(rows, runs)
    measured = {name: list(drop_warmup(runs[name])) for name in rows}
    summary = d.decode_summary(cfg, task, settings, rows, measured, rounds=rounds, head=s.head)
    d.write_decode(out_dir, cfg, task, settings, summary, measured=measured, rounds=rounds)
    g = summary["systems"]["glance"]
    speedup = [g["speedup"][k] for k in ("estimate", "low", "high")]
    log.info(
        "%s: tau %.2f, %.2fx [%.2f, %.2f] over greedy, %d/%d outputs equal -> %s",
        *(task.name, g["tau"], *speedup, g["matches_baseline"], cfg.n, out_dir),
    )


if __name__ == "__main__":
    main()
