"""The comparison arms' rows: one call of each system, and their summaries.

``stages.arms`` runs these on the same prompts, interleaved. A *row* is
``greedy`` (the target alone), ``glance`` (the block head's budget tree),
``eagle`` (the EAGLE-style head's dynamic tree, :mod:`glance.heads.eagle`),
``glance_scored`` (the block head's tree ranked by the consistency scorer,
:mod:`glance.heads.scorer`),
``dflash_chain`` (dflash's own loop), ``two_model`` (a smaller model drafting
a chain, :mod:`glance.drafters.small`) or ``relaxed_<rule>`` (GLANCE's
tree walked with a LOSSY rule of :mod:`glance.decoding.relaxed`). Each call returns a
run as ``glance.experiments.results`` reads it, plus end-to-end time and draft time.

The two-model row drafts a greedy chain of ``arms.assistant.depth`` tokens a round with
the smaller model's own cache, verified by GLANCE's ``verify`` and ``walk``.
``transformers``' assisted generation would be the usual route, but with a
Qwen3-VL assistant in transformers 5.15 its cache grows by about two entries a
round against one token, until a round feeds the assistant nothing and it fails.
"""

from __future__ import annotations

__all__ = [
    "PAIRS",
    "arms_cases",
    "arms_header",
    "arms_models",
    "arms_rows",
    "budget_sweep",
    "diverge",
    "divergence_summary",
    "run_case",
    "summarise",
]


def arms_rows(
    budget: int,
    branch_k: int,
    width: int,
    depth: int,
    rules,
    chain_depth: int,
    *,
    eagle_best: int | None = None,
) -> dict:
    """The arms' rows (:class:`~glance.experiments.rows.Row`) by name: greedy,
    GLANCE, the EAGLE-style tree (``width`` expanded per depth, ``depth``
    deep), dflash's chain, the two-model chain (``chain_depth`` a round), and
    GLANCE walked with each LOSSY rule of ``rules``; every tree at ``budget``
    nodes, GLANCE's with the consistency scorer (``glance_scored``) too.
    Then each system at its own best: ``glance_auto`` (GLANCE's
    default, ``budget="auto"``) and, when ``eagle_best`` is given, the
    EAGLE-style tree at that budget as ``eagle_best``."""
    from glance.experiments.rows import Row

    tree = {"budget": budget, "branch_k": branch_k}
    eagle = {"accept": "exact", "width": width, "depth": depth}
    rows = {
        "greedy": Row("ar"),
        "glance": Row("glance", "greedy", options={**tree, "accept": "exact"}),
        "glance_scored": Row("scored", "greedy", options={"budget": budget, "accept": "exact"}),
        "eagle": Row("eagle", "greedy", options={**tree, **eagle}),
        "dflash_chain": Row("dflash_chain", "greedy"),
        "two_model": Row("two_model", "greedy", options={"depth": chain_depth}),
    }
    for rule in rules:
        rows[f"relaxed_{rule}"] = Row("relaxed", "greedy", options={**tree, "accept": rule})
    rows["glance_auto"] = Row("glance", "greedy", options={**tree, "budget": "auto"})
    if eagle_best is not None:
        rows["eagle_best"] = Row("eagle", "greedy", options={**eagle, "budget": int(eagle_best)})
    return rows


#: GLANCE against each peer in :func:`summarise`: (GLANCE's row, the peer's row, key)
PAIRS = (
    ("glance", "eagle", "vs_eagle_tree"),
    ("glance_scored", "glance", "scored_vs_glance"),
    ("glance_scored", "eagle", "scored_vs_eagle_tree"),
    ("glance", "dflash_chain", "vs_dflash_chain"),
    ("glance", "two_model", "vs_two_model"),
    ("glance_auto", "eagle_best", "auto_vs_eagle_best"),
    ("glance_auto", "eagle", "auto_vs_eagle_tree"),
    ("glance_auto", "dflash_chain", "auto_vs_dflash_chain"),
)


def diverge(models, prompt, runs: dict, lossy) -> None:
    """Annotate the latest run of each lossy row with where it left greedy."""
    from glance.decoding.relaxed import first_divergence

    greedy = runs["greedy"][-1]["ids"]
    for row in lossy:
        run = runs[row][-1]
        run["divergence"] = first_divergence(
            models.target, prompt.ids, prompt.positions, greedy, run["ids"]
        )


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


def summarise(runs: dict, seed: int, resamples: int, lossy: set) -> dict:
    """Per row: the summary of ``glance.experiments.results`` in the decode-only
    window (prefill excluded), with ``end_to_end`` the same in the whole call's
    window; GLANCE against each peer of :data:`PAIRS` present, tau and speed,
    each with a paired interval. Every speed ratio takes both of its
    times in one window: a foreign loop (dflash's chain) times only the whole
    call, so it has no decode-only figures and is compared end to end only."""
    from glance.core.metrics import drop_warmup
    from glance.experiments.results import speed_ratio, system_summary, tau_ratio

    m = {row: list(drop_warmup(calls)) for row, calls in runs.items()}
    wall = {row: [{**c, "ms": c["wall_ms"]} for c in calls] for row, calls in m.items()}
    foreign = {row for row, calls in m.items() if calls[0]["stats"] is None}
    timed = ("ms_per_token", "tokens_per_s", "speedup")
    out = {"rows": {}}
    for row, calls in m.items():
        s = system_summary(calls, None if row == "greedy" else m["greedy"], seed, resamples)
        e = system_summary(wall[row], None if row == "greedy" else wall["greedy"], seed, resamples)
        s["end_to_end"] = {k: e[k] for k in timed if k in e}
        if row in foreign:
            s = {k: v for k, v in s.items() if k not in timed}
        drafts = [c["draft_ms"] for c in calls if c["draft_ms"] is not None]
        if drafts:
            s["draft_ms_per_round"] = sum(drafts) / len(drafts)
        s["lossy"] = row in lossy
        if row in lossy:
            s["divergence"] = divergence_summary(calls)
        out["rows"][row] = s
    for ours, other, key in PAIRS:
        if ours not in m or other not in m:
            continue
        out[key] = {
            "tau": tau_ratio(m[ours], m[other], seed, resamples),
            "speed_end_to_end": speed_ratio(wall[other], wall[ours], seed, resamples),
        }
        if other not in foreign:
            out[key]["speed"] = speed_ratio(m[other], m[ours], seed, resamples)
    return out


def arms_models(cfg, target):
    """The arms' :class:`~glance.experiments.rows.Models`: the target, the block
    head, the EAGLE-style head (``arms.path``), the assistant model
    (``arms.assistant.path``) and the consistency scorer (``paths.scorer``)."""
    from pathlib import Path

    from glance.experiments.rows import Models
    from glance.experiments.settings import load_head, load_scorer
    from glance.heads.eagle import load_eagle_head
    from glance.targets.vl import load_target

    a = cfg.arms
    head = load_head(cfg, target)
    return Models(
        target=target,
        head=head,
        scorer=load_scorer(cfg, head, target),
        eagle=load_eagle_head(Path(a.path), target=target),
        assistant=load_target(Path(a.assistant.path), dtype=target.dtype, device=cfg.device)[0],
    )


def arms_cases(cfg) -> list[tuple[str, int, int]]:
    """(task, context, prompts) of every case: each of ``arms.tasks`` at
    context 0, then ``context_sweep.task`` at each non-zero length."""
    cases = [(name, 0, int(cfg.arms.n)) for name in cfg.arms.tasks]
    sweep = cfg.context_sweep
    return cases + [(sweep.task, c, int(sweep.n)) for c in sweep.lengths if c > 0]


def arms_inputs(cfg) -> list:
    """``(task, prompts)`` of every task file the arms read: each case's and the budget sweep's."""
    from glance.pipeline.app import task_by_name

    pairs = [(name, n + 1) for name, _, n in arms_cases(cfg)]
    return [(task_by_name(name), n) for name, n in [*pairs, (cfg.sweep.task, int(cfg.sweep.n) + 1)]]


def arms_header(cfg, target) -> dict:
    """``arms.json``'s settings."""
    a = cfg.arms
    return {
        "target": cfg.target.name,
        "device": str(target.device),
        "dtype": str(cfg.dtype),
        "budget": int(a.budget),
        "branch_k": int(cfg.branch_k),
        "width": int(a.width),
        "depth": int(a.depth),
        "two_model_depth": int(a.assistant.depth),
        "n": int(a.n),
        "timing": "decode_only",
        "cases": {},
    }


def run_case(session, rows: dict, lossy: set, name: str, context: int, n: int) -> dict:
    """Every row on ``n`` + 1 prompts of task ``name`` after ``context``
    filler tokens, gated, each lossy row's divergence explained."""
    from glance.pipeline.app import task_by_name

    prompts = session.prompts(task_by_name(name), n + 1, context)

    def explain(prompt, runs):
        diverge(session.models, prompt, runs, lossy)

    return session.decode(rows, prompts, f"arms {name}@context{context}", after=explain)


def budget_sweep(session, rows: dict) -> dict:
    """tokens/s of GLANCE and the EAGLE-style head at each of ``arms.budgets``
    on ``sweep.task`` (``sweep.n`` prompts), and each one's best budget."""
    from glance.core.metrics import drop_warmup
    from glance.pipeline.app import task_by_name

    cfg = session.cfg
    task = task_by_name(cfg.sweep.task)
    prompts = session.prompts(task, int(cfg.sweep.n) + 1)
    out = {}
    for row in ("glance", "eagle"):
        speeds = {}
        for b in cfg.arms.budgets:
            calls = [session.run(rows[row], p, i, budget=int(b)) for i, p in enumerate(prompts)]
            calls = list(drop_warmup(calls))
            speeds[int(b)] = 1e3 * sum(c["new_tokens"] for c in calls) / sum(c["ms"] for c in calls)
        out[row] = {"tokens_per_s": speeds, "best_budget": max(speeds, key=speeds.get)}
    return {"task": task.name, "n": int(cfg.sweep.n), **out}
