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

__all__ = ["arms_rows", "diverge", "divergence_summary", "summarise"]


def arms_rows(budget: int, branch_k: int, width: int, depth: int, rules) -> dict:
    """The arms' rows (:class:`~glance.experiments.rows.Row`) by name: greedy,
    GLANCE, the EAGLE-style tree (``width`` expanded per depth, ``depth``
    deep), dflash's chain, the two-model chain (``depth`` a round), and GLANCE
    walked with each LOSSY rule of ``rules``; every tree at ``budget`` nodes."""
    from glance.experiments.rows import Row

    tree = {"budget": budget, "branch_k": branch_k}
    rows = {
        "greedy": Row("ar"),
        "glance": Row("glance", "greedy", options={**tree, "accept": "exact"}),
        "eagle": Row(
            "eagle", "greedy", options={**tree, "accept": "exact", "width": width, "depth": depth}
        ),
        "dflash_chain": Row("dflash_chain", "greedy"),
        "two_model": Row("two_model", "greedy", options={"depth": depth}),
    }
    for rule in rules:
        rows[f"relaxed_{rule}"] = Row("relaxed", "greedy", options={**tree, "accept": rule})
    return rows


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
