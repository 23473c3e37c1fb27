"""The comparison arms: GLANCE against an EAGLE-3-style head, and lossy relaxed rules.

    dvc repro stages/arms/dvc.yaml
    python -m stages.arms arms.n=5 'arms.tasks=[chartqa]'

Rows, on the same prompts in one process, interleaved prompt by prompt:

* ``greedy``: the target alone (``glance.greedy_generate``), the oracle and
  the speed baseline;
* ``glance``: the block head's budget tree at ``arms.budget`` verified tokens;
* ``eagle``: the EAGLE-style head's dynamic tree (``arms.width`` expanded per
  depth, ``arms.depth`` deep) at the same ``arms.budget`` verified tokens;
* ``dflash_chain``: ``dflash``'s own chain with the block head;
* ``two_model``: a smaller toy VLM trained on the same tasks
  (``stages.assistant``) as a separate drafter model: it drafts a greedy chain
  of ``arms.depth`` tokens a round with its own cache, verified by GLANCE's
  ``verify`` and ``walk`` (:class:`glance.drafters.small.SmallModelDrafter`).
  ``transformers``' assisted generation would be the usual route, but with a
  Qwen3-VL assistant in transformers 5.15 its cache grows by about two entries
  a round against one token, until a round feeds the assistant nothing and it
  fails;
* ``relaxed_<rule>`` for each of ``arms.rules``: GLANCE's tree walked with a
  LOSSY rule of ``glance.decoding.relaxed``. These are marked lossy, and each output
  that leaves greedy is explained: where it first did, the target's rank of
  the token the rule took there, and the logit gap to the target's argmax
  (``glance.decoding.relaxed.first_divergence``).

Then each head at each of ``arms.budgets`` on ``sweep.task``, for each
system's own best budget.

Lossless means greedy here: a ``glance``, ``eagle`` or ``two_model`` output that differs
from ``greedy`` fails the stage, naming the case, prompt, row and first
differing token, unless a second greedy run (the control) differs too.

Same engine, same target, same verify and walk for the two heads: one head
pass per round for GLANCE against ``arms.depth`` for EAGLE. Every task runs at
context 0, and ``context_sweep.task`` again at each of ``context_sweep``'s
non-zero lengths (panel (c)). Times use the decode-only window (as DFlash and
DDTree report, prefill excluded) for GLANCE's loop; ``dflash_chain`` runs
dflash's own loop and is timed end to end, prefill included, so its ratio is
read from the ``end_to_end`` column.
Writes ``results/arms.json``, ``results/arms.md`` and ``figures/arms_context.png``
(GLANCE over the EAGLE-style head at each context length).
"""

from __future__ import annotations

from pathlib import Path

from glance.experiments.arms import arms_rows, diverge, summarise
from glance.experiments.rows import Models, Prompt, gated, run
from glance.pipeline.app import app, load_target, log, numerics_record, setup, task_by_name
from glance.pipeline.files import write_set
from glance.targets.vl import stop_ids
from stages.inputs import filler, prompt_inputs, task_records
from stages.prompts import gate, load_head


def budget_sweep(cfg, rows: dict, models: Models, processor, stops) -> dict:
    """tokens/s of GLANCE and the EAGLE-style head at each of ``arms.budgets``
    on ``sweep.task`` (``sweep.n`` prompts), and each one's best budget."""
    from glance.core.metrics import drop_warmup

    task = task_by_name(cfg.sweep.task)
    max_new = int(cfg.max_new_tokens or task.max_new_tokens)
    prompts = [
        Prompt(*prompt_inputs(processor, record, cfg.paths.data), max_new, stops)
        for record in task_records(cfg, task, int(cfg.sweep.n) + 1)
    ]
    out = {}
    for row in ("glance", "eagle"):
        speeds = {}
        for b in cfg.arms.budgets:
            calls = [run(rows[row], models, p, budget=int(b)) for p in prompts]
            calls = list(drop_warmup(calls))
            speeds[int(b)] = 1e3 * sum(c["new_tokens"] for c in calls) / sum(c["ms"] for c in calls)
        out[row] = {"tokens_per_s": speeds, "best_budget": max(speeds, key=speeds.get)}
    return {"task": task.name, "n": int(cfg.sweep.n), **out}


def load_models(cfg, target) -> Models:
    from glance.heads.eagle import load_eagle_head
    from glance.targets.vl import load_target as load_vl

    a = cfg.arms
    return Models(
        target=target,
        head=load_head(cfg, target),
        eagle=load_eagle_head(Path(a.path), target=target),
        assistant=load_vl(Path(a.assistant.path), dtype=target.dtype, device=cfg.device)[0],
    )


@app
def main(cfg) -> None:
    from tqdm import tqdm

    from glance.decoding.relaxed import RULES
    from glance.reporting.report import arms_markdown, arms_panel

    for i, rule in enumerate(cfg.arms.rules):  # before any model loads
        if rule not in RULES:
            raise SystemExit(f"arms.rules[{i}]: expected one of {RULES}; got {rule!r}")
    setup(cfg)
    a = cfg.arms
    target, processor = load_target(cfg)
    models = load_models(cfg, target)
    stops = stop_ids(processor, target)
    rows = arms_rows(int(a.budget), int(cfg.branch_k), int(a.width), int(a.depth), a.rules)
    lossy = {name for name, row in rows.items() if row.kind == "relaxed"}
    cases = [(name, 0, int(a.n)) for name in a.tasks]
    cases += [
        (cfg.context_sweep.task, c, int(cfg.context_sweep.n))
        for c in cfg.context_sweep.lengths
        if c > 0
    ]
    result = {
        "target": cfg.target.name,
        "device": str(target.device),
        "dtype": str(cfg.dtype),
        "budget": int(a.budget),
        "branch_k": int(cfg.branch_k),
        "width": int(a.width),
        "depth": int(a.depth),
        "n": int(a.n),
        "timing": "decode_only",
        "cases": {},
    }
    stat = (int(cfg.seed), int(cfg.decode.bootstrap))
    pooled = {row: [] for row in rows}
    tokenizer = getattr(processor, "tokenizer", processor)
    for name, context, n in cases:
        task = task_by_name(name)
        max_new = int(cfg.max_new_tokens or task.max_new_tokens)
        preamble = filler(context, tokenizer)
        runs = {row: [] for row in rows}
        for i, record in enumerate(tqdm(task_records(cfg, task, n + 1), desc=f"arms {name}")):
            prompt = Prompt(
                *prompt_inputs(processor, record, cfg.paths.data, preamble), max_new, stops
            )
            for row in rows:
                runs[row].append(run(rows[row], models, prompt))
            where = f"arms {name}@context{context}, prompt {i}"
            gate(gated(rows), runs, where, lambda base, p=prompt: run(rows[base], models, p)["ids"])
            diverge(models, prompt, runs, lossy)
        key = name if context == 0 else f"{name}@context{context}"
        result["cases"][key] = {
            "task": name,
            "context": context,
            "n": n,
            **summarise(runs, *stat, lossy),
        }
        if context == 0:
            for row in rows:  # each task's warm-up goes first, dropped per task
                pooled[row] += runs[row][1:]
    result["pooled"] = summarise({r: [None] + c for r, c in pooled.items()}, *stat, lossy)
    result["budget_sweep"] = budget_sweep(cfg, rows, models, processor, stops)
    results = Path(cfg.paths.results)
    others = {"arms.md": arms_markdown(result)}
    write_set(results, "arms.json", result | {"numerics": numerics_record(cfg)}, others)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms_panel(plt, result, cfg.context_sweep.task, Path(cfg.paths.figures) / "arms_context.png")
    log.info("arms:\n%s", arms_markdown(result))


if __name__ == "__main__":
    main()
