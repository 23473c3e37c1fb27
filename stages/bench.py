"""Speed side by side: GLANCE against what a user would otherwise run.

Rows, all on the same prompts in one process, interleaved prompt by prompt
(A B C ... A B C ...) so that machine drift falls on every row alike:

* ``hf_greedy``: ``target.generate(do_sample=False)``, the baseline;
* ``hf_prompt_lookup``: ``target.generate(prompt_lookup_num_tokens=...)``, the
  strongest draft-free method (it copies from the text prompt, never the image);
* ``dflash_chain``: ``dflash.model.dflash_generate``, the package's own chain,
  with the same head (its target calls get the image inputs and M-RoPE rows);
* ``glance_greedy``, ``glance_chain``, ``glance_tree`` (``budget``),
  ``glance_auto`` (``budget="auto"``, the library's default and the row every
  other is compared with), ``glance_best`` (the task's best fixed budget in its
  sweep, ``results/sweep/<task>/summary.json``) and ``glance_extend``
  (``budget`` plus ``extend_budget=decode.extend_row``; only for a head
  trained with a variable mask span).

Every row is timed the same way, with the device synchronised, in two windows:
``end_to_end`` (wall clock around the whole call, prefill included) and
``decode_only`` (that minus the prompt's time to first token, measured once per
prompt with ``target.generate`` for one token, so every row loses the same
prefill). One aggregation throughout: pooled time over pooled tokens, after
the warm-up prompt. Per task and row: tau where it applies, ms per token and
tokens per second in each window, the speedup over ``hf_greedy`` and
``glance_auto``'s speedup over the row, each a ratio of pooled times with a
paired bootstrap interval over prompts, each of our drafting rows' efficiency
(its speedup over ``glance_greedy`` against the limit if drafting and host
work were free), and peak memory (the CUDA allocator's peak; nothing off
CUDA). Then the cost curves: verify-pass time against tree size, ms per token
against output length (``decode_only``, pooled), the host share of a round
against the budget, and ms per token with its draft, verify and host split
against context length (``context_sweep.lengths``). Writes
``results/bench.json`` and ``results/bench.md``.
"""

from __future__ import annotations

from pathlib import Path

from glance.experiments import bench
from glance.pipeline.app import app, log, setup, task_by_name, timing_record
from glance.pipeline.files import write_set


@app
def main(cfg) -> None:
    from glance.data.inputs import task_records
    from glance.experiments.session import open_session
    from glance.experiments.settings import decode_settings, extend_row

    setup(cfg)
    decode_settings(cfg)  # bad settings fail before any model loads
    inputs = bench.bench_inputs(cfg)
    for task, count in inputs:  # the task files, then the sweeps, before any model loads
        task_records(cfg.paths.data, task, count)
    best = {name: bench.best_budget(cfg, name) for name in cfg.bench.tasks}
    s = open_session(cfg, inputs=inputs)
    extend = extend_row(cfg, s.head)
    result = bench.bench_header(cfg, s, bench.bench_rows(cfg, extend))
    for name in cfg.bench.tasks:
        rows = bench.bench_rows(cfg, extend, best[name])
        result["tasks"][name] = bench.bench_task(s, rows, task_by_name(name), int(cfg.bench.n))
        result["best_budget"][name] = best[name]
    result["length_curve"] = bench.length_curve(s)
    result["budget_curve"] = bench.budget_curve(s)
    result["context_cost"] = bench.context_cost(s)
    machine, line = timing_record(cfg)
    tables = bench.bench_tables(result)
    tables["bench.md"] = f"{line}\n\n{tables['bench.md']}"
    result |= {"numerics": machine}
    write_set(Path(cfg.paths.results), "bench.json", result, tables)
    log.info("bench:\n%s", tables["bench.md"])


if __name__ == "__main__":
    main()
