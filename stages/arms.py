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
* ``two_model``: ``transformers``' assisted generation with a smaller toy VLM
  trained on the same tasks (``stages.assistant``) as the drafter;
* ``relaxed_<rule>`` for each of ``arms.rules``: GLANCE's tree walked with a
  LOSSY rule of ``glance.relaxed``. These are marked lossy, and each output
  that leaves greedy is explained: where it first did, the target's rank of
  the token the rule took there, and the logit gap to the target's argmax
  (``glance.relaxed.first_divergence``).

Then each head at each of ``arms.budgets`` on ``sweep.task``, for each
system's own best budget.

Lossless means greedy here: a ``glance`` or ``eagle`` output that differs
from ``greedy`` fails the stage, naming the case, prompt, row and first
differing token, unless a second greedy run (the control) differs too.

Same engine, same target, same verify and walk for the two heads: one head
pass per round for GLANCE against ``arms.depth`` for EAGLE. Every task runs at
context 0, and ``context_sweep.task`` again at each of ``context_sweep``'s
non-zero lengths (panel (c)). Times use the decode-only window (as DFlash and
DDTree report, prefill excluded) for GLANCE's decoders; ``dflash_chain`` and
``two_model`` run other libraries' loops and are timed end to end, prefill
included, so their ratios are read from the ``end_to_end`` columns.
Writes ``results/arms.json``, ``results/arms.md`` and ``figures/arms_context.png``
(GLANCE over the EAGLE-style head at each context length).
"""

from __future__ import annotations

import time
from pathlib import Path

from glance.vl import stop_ids
from stages.common import (
    app,
    check_lossless,
    filler,
    load_head,
    load_target,
    log,
    prompt_inputs,
    setup,
    task_by_name,
    task_records,
    write_json,
)


def run_row(row: str, models: dict, cfg, ids, positions, max_new: int, stops, *, budget=None):
    """One call of one row: new ids, decode-only and end-to-end ms, tau counts
    (at ``arms.budget``, or ``budget``)."""
    import glance
    from glance.baselines import dflash_generate
    from glance.eagle import EagleDrafter

    a, target, head = cfg.arms, models["target"], models["head"]
    kw = dict(positions=positions, stop_token_ids=stops, return_stats=True)
    start = time.perf_counter()
    if row in ("dflash_chain", "two_model"):
        if row == "dflash_chain":
            new, (committed, rounds) = dflash_generate(head, target, ids, positions, max_new, stops)
        else:
            new, (committed, rounds) = assisted(models, ids, positions, max_new, stops)
        wall = (time.perf_counter() - start) * 1e3
        return {
            "ids": new,
            "ms": wall,
            "wall_ms": wall,
            "new_tokens": len(new),
            "committed": committed,
            "rounds": rounds,
            "draft_ms": None,
        }
    if row == "greedy":
        out, stats = glance.greedy_generate(target, ids, max_new, **kw)
    else:
        drafter = head
        if row == "eagle":
            drafter = EagleDrafter(models["eagle"], target, int(a.width), int(a.depth))
        accept = row.removeprefix("relaxed_") if row.startswith("relaxed_") else "exact"
        out, stats = glance.generate(
            drafter,
            target,
            ids,
            max_new,
            budget=int(a.budget),
            branch_k=int(cfg.branch_k),
            accept=accept,
            **kw,
        )
    wall = (time.perf_counter() - start) * 1e3
    drafts = row != "greedy"
    return {
        "ids": out[0, ids.shape[1] :].tolist(),
        "ms": stats.ms_per_token * stats.new_tokens,
        "wall_ms": wall,
        "new_tokens": stats.new_tokens,
        "committed": sum(r.committed for r in stats.rounds),
        "rounds": len(stats.rounds) if drafts else None,
        "draft_ms": sum(r.draft_ms for r in stats.rounds) / len(stats.rounds) if drafts else None,
    }


#: rows that go through GLANCE's verify and walk: any output that differs
#: from greedy fails the stage (``stages.common.check_lossless``)
GATED = ("glance", "eagle")


def gate(models: dict, cfg, prompt, runs: dict, where: str) -> None:
    """:func:`stages.common.check_lossless` for the gated rows, with a second
    greedy run on ``prompt`` as the control."""
    check_lossless(
        dict.fromkeys(GATED, "greedy"),
        runs,
        where,
        lambda base: run_row(base, models, cfg, *prompt)["ids"],
    )


def assisted(models: dict, ids, positions, max_new: int, stops):
    """Assisted generation: the new ids and ``(committed, rounds)``, a round
    being one target call after the prefill (counted with a forward hook)."""
    from glance.baselines import hf_generate

    target, calls = models["target"], []
    hook = target.register_forward_hook(lambda *_: calls.append(1))
    try:
        new = hf_generate(
            target, ids, positions, max_new, stops, assistant_model=models["assistant"]
        )
    finally:
        hook.remove()
    return new, (len(new) - 1, len(calls) - 1)


def diverge(models: dict, ids, positions, runs: dict, lossy: set) -> None:
    """Annotate the latest run of each lossy row with where it left greedy."""
    from glance.relaxed import first_divergence

    greedy = runs["greedy"][-1]["ids"]
    for row in lossy:
        run = runs[row][-1]
        run["divergence"] = first_divergence(models["target"], ids, positions, greedy, run["ids"])


def divergence_summary(calls: list[dict]) -> dict:
    """How a lossy row's outputs left greedy: how many did, and the target's
    own rank of and logit gap to the token taken where they first did."""
    found = [c["divergence"] for c in calls if c.get("divergence")]
    gaps = [d["logit_gap"] for d in found if d["logit_gap"] is not None]
    return {
        "prompts": len(calls),
        "diverged": len(found),
        "took_a_lower_ranked_token": sum(1 for d in found if d["rank"]),
        "min_logit_gap": min(gaps) if gaps else None,
        "median_logit_gap": float(sorted(gaps)[len(gaps) // 2]) if gaps else None,
    }


def budget_sweep(cfg, models: dict, processor, stops) -> dict:
    """tokens/s of GLANCE and the EAGLE-style head at each of ``arms.budgets``
    on ``sweep.task`` (``sweep.n`` prompts), and each one's best budget."""
    from glance.metrics import drop_warmup

    task = task_by_name(cfg.sweep.task)
    max_new = int(cfg.max_new_tokens or task.max_new_tokens)
    out = {}
    for row in ("glance", "eagle"):
        speeds = {}
        for b in cfg.arms.budgets:
            calls = []
            for record in task_records(cfg, task, int(cfg.sweep.n) + 1):
                ids, positions = prompt_inputs(processor, record, cfg.paths.data)
                calls.append(
                    run_row(row, models, cfg, ids, positions, max_new, stops, budget=int(b))
                )
            calls = list(drop_warmup(calls))
            speeds[int(b)] = 1e3 * sum(c["new_tokens"] for c in calls) / sum(c["ms"] for c in calls)
        out[row] = {"tokens_per_s": speeds, "best_budget": max(speeds, key=speeds.get)}
    return {"task": task.name, "n": int(cfg.sweep.n), **out}


def summarise(runs: dict, seed: int, resamples: int, lossy: set) -> dict:
    """Per row: the summary of ``glance.results``; GLANCE against EAGLE and
    dflash's chain, tau and speed, each with a paired interval."""
    from glance.metrics import drop_warmup
    from glance.results import speed_ratio, system_summary, tau_ratio

    m = {row: list(drop_warmup(calls)) for row, calls in runs.items()}
    wall = {row: [{**c, "ms": c["wall_ms"]} for c in calls] for row, calls in m.items()}
    out = {"rows": {}}
    for row, calls in m.items():
        s = system_summary(calls, None if row == "greedy" else m["greedy"], seed, resamples)
        drafts = [c["draft_ms"] for c in calls if c["draft_ms"] is not None]
        if drafts:
            s["draft_ms_per_round"] = sum(drafts) / len(drafts)
        s["lossy"] = row in lossy
        if row in lossy:
            s["divergence"] = divergence_summary(calls)
        out["rows"][row] = s
    others = (("eagle", "vs_eagle_tree"), ("dflash_chain", "vs_dflash_chain"))
    for other, key in (*others, ("two_model", "vs_two_model")):
        out[key] = {
            "tau": tau_ratio(m["glance"], m[other], seed, resamples),
            "speed": speed_ratio(m[other], m["glance"], seed, resamples),
            "speed_end_to_end": speed_ratio(wall[other], wall["glance"], seed, resamples),
        }
    return out


@app
def main(cfg) -> None:
    from tqdm import tqdm

    from glance._io import atomic_write_text
    from glance.eagle import load_eagle_head
    from glance.report import arms_markdown, arms_panel
    from glance.vl import load_target as load_vl

    setup(cfg)
    a = cfg.arms
    target, processor = load_target(cfg)
    models = {
        "target": target,
        "head": load_head(cfg, target),
        "eagle": load_eagle_head(Path(a.path), target=target),
        "assistant": load_vl(Path(a.assistant.path), dtype=target.dtype, device=cfg.device)[0],
    }
    stops = stop_ids(processor, target)
    rows = ["greedy", "glance", "eagle", "dflash_chain", "two_model"]
    rows += [f"relaxed_{r}" for r in a.rules]
    lossy = {f"relaxed_{r}" for r in a.rules}
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
    pooled = {row: [] for row in rows}
    tokenizer = getattr(processor, "tokenizer", processor)
    for name, context, n in cases:
        task = task_by_name(name)
        max_new = int(cfg.max_new_tokens or task.max_new_tokens)
        preamble = filler(context, tokenizer)
        runs = {row: [] for row in rows}
        for record in tqdm(task_records(cfg, task, n + 1), desc=f"arms {name}@{context}"):
            ids, positions = prompt_inputs(processor, record, cfg.paths.data, preamble)
            for row in rows:
                runs[row].append(run_row(row, models, cfg, ids, positions, max_new, stops))
            where = f"arms {name}@context{context}, prompt {len(runs['greedy']) - 1}"
            gate(models, cfg, (ids, positions, max_new, stops), runs, where)
            diverge(models, ids, positions, runs, lossy)
        key = name if context == 0 else f"{name}@context{context}"
        stat = (int(cfg.seed), int(cfg.decode.bootstrap))
        result["cases"][key] = {
            "task": name,
            "context": context,
            "n": n,
            **summarise(runs, *stat, lossy),
        }
        if context == 0:
            for row in rows:  # each task's warm-up goes first, dropped per task
                pooled[row] += runs[row][1:]
    stat = (int(cfg.seed), int(cfg.decode.bootstrap))
    result["pooled"] = summarise({r: [None] + c for r, c in pooled.items()}, *stat, lossy)
    result["budget_sweep"] = budget_sweep(cfg, models, processor, stops)
    results = Path(cfg.paths.results)
    write_json(results / "arms.json", result)
    atomic_write_text(results / "arms.md", arms_markdown(result))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panel = Path(cfg.paths.figures) / "arms_context.png"
    arms_panel(plt, result, cfg.context_sweep.task, panel)
    log.info("arms:\n%s", arms_markdown(result))


if __name__ == "__main__":
    main()
