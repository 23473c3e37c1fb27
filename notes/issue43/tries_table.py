"""The calibration tries (``notes/issue43/tries/*.json``, written by
``python -m glance.toy calibrate --out``) as the Markdown table that
``docs/world.md`` shows: ``python notes/issue43/tries_table.py``.
``tests/test_readme.py`` checks the document's table against :func:`table`."""

from __future__ import annotations

import json
from pathlib import Path

TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa")
TRIES = Path(__file__).parent / "tries"
HEADER = (
    "| try | knobs: words x letters @ beta, caption to chartqa; extras "
    "| target steps, head steps, corpus, prompts a task "
    "| GLANCE tau (chain tau), caption to chartqa | law holds, tasks (pooled b1) "
    "| entropy r | minutes |"
)
# the first tries did not record their sizes: (target steps, head steps, prompts a task)
EARLY = {"01": (250, 1000, 8), "02": (300, 2000, 8), "03": (300, 2000, 8), "04": (300, 2000, 20)}


def row(path: Path) -> str:
    d = json.loads(path.read_text())
    k, t = d["knobs"], d["tasks"]
    voices = ", ".join(f"{v['words']}x{v['letters']} @ {v['beta']}" for v in k["voices"].values())
    extras = [f"{key} {k[key]}" for key in ("spread", "space", "tilt") if k.get(key)]
    extras += [f"min_word {k['min_word']}"] if k.get("min_word", 1) != 1 else []
    extras += ["skip_space"] if k.get("skip_space") else []
    sizes = d.get("sizes") or {}
    steps, head, n = EARLY.get(path.stem) or (
        sizes["target"]["steps"],
        sizes["head_steps"],
        sizes["n"],
    )
    corpus = sizes.get("greedy", 160) + sizes.get("sampled", 160)
    taus = " / ".join(f"{t[x]['glance_tau']:.2f} ({t[x]['chain_tau']:.2f})" for x in TASKS)
    law = d.get("law")
    held = f"{sum(t[x]['law']['holds'] for x in TASKS)} ({law['b1']:+.2f})" if law else "-"
    knobs = voices + ("; " + ", ".join(extras) if extras else "")
    return (
        f"| {path.stem} | {knobs} | {steps}, {head}, {corpus}, {n} | {taus} | {held} "
        f"| {d['entropy_r']:.3f} | {d['minutes']:.1f} |"
    )


def table() -> str:
    paths = sorted(p for p in TRIES.glob("[0-9]*.json") if not p.name.endswith(".rounds.json"))
    lines = [HEADER, "|---|---|---|---|---|---|---|", *(row(p) for p in paths)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
