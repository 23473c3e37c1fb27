"""The comparison arms' rows: one call of each system, and their summaries.

``stages.arms`` runs these on the same prompts, interleaved. A *row* is
``greedy`` (the target alone), ``glance`` (the block head's budget tree),
``eagle`` (the EAGLE-style head's dynamic tree, :mod:`glance.heads.eagle`),
``dflash_chain`` (dflash's own loop), ``two_model`` (a smaller model drafting
a chain, :mod:`glance.drafters.small`) or ``relaxed_<rule>`` (GLANCE's
tree walked with a LOSSY rule of :mod:`glance.decoding.relaxed`). Each call returns a
run as ``glance.experiments.results`` reads it, plus end-to-end time and draft time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["Models", "Prompt", "diverge", "divergence_summary", "run_row", "summarise"]


@dataclass(frozen=True)
class Models:
    """What the rows run with: the target, the block head, the EAGLE-style
    head, the assistant model (or ``None``), the verified ``budget``, the
    block head's ``branch_k``, and the EAGLE-style tree's ``width`` and ``depth``."""

    target: object
    head: object
    eagle: object
    assistant: object
    budget: int
    branch_k: int
    width: int
    depth: int


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``(1, n)`` ids, its positions, the cap on new tokens and
    the stop ids."""

    ids: object
    positions: object
    max_new: int
    stops: list


def run_row(row: str, models: Models, prompt: Prompt, budget: int | None = None) -> dict:
    """One call of one row on ``prompt``: the new ids, decode-only ``ms`` and
    end-to-end ``wall_ms``, tau's counts and the mean draft time per round
    (at ``models.budget``, or ``budget``)."""
    import glance
    from glance.drafters.eagle import EagleDrafter
    from glance.drafters.small import SmallModelDrafter
    from glance.experiments.baselines import dflash_generate

    target, head = models.target, models.head
    ids, positions, max_new, stops = prompt.ids, prompt.positions, prompt.max_new, prompt.stops
    kw = dict(positions=positions, stop_token_ids=stops, return_stats=True)
    start = time.perf_counter()
    if row == "dflash_chain":
        new, (committed, rounds) = dflash_generate(head, target, ids, positions, max_new, stops)
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
    elif row == "two_model":
        drafter = SmallModelDrafter(models.assistant, positions, models.depth)
        out, stats = glance.generate(drafter, target, ids, max_new, budget=models.depth, **kw)
    else:
        drafter = head
        if row == "eagle":
            drafter = EagleDrafter(models.eagle, target, models.width, models.depth)
        accept = row.removeprefix("relaxed_") if row.startswith("relaxed_") else "exact"
        out, stats = glance.generate(
            drafter,
            target,
            ids,
            max_new,
            budget=budget or models.budget,
            branch_k=models.branch_k,
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


def diverge(models: Models, prompt: Prompt, runs: dict, lossy) -> None:
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
    """Per row: the summary of ``glance.experiments.results``; GLANCE against EAGLE and
    dflash's chain, tau and speed, each with a paired interval."""
    from glance.core.metrics import drop_warmup
    from glance.experiments.results import speed_ratio, system_summary, tau_ratio

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
