"""Write the generated tables of the README and the docs pages from the pipeline's results.

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
markers: ``bench`` (the speed table: ``results/bench.md`` verbatim, under a line
from ``results/bench.json``), ``regime`` (where the toy world sits,
``results/regime_table.md``), ``seeds`` (other task draws,
``results/seeds_table.md``), ``main`` (``results/main_table.md``), ``law``
(rendered from ``results/law.json``), ``heads`` and ``arms`` (the comparison
arms, ``results/arms.json`` and ``results/arms.md``) and ``claims`` (the
paper's claims against the measurements, ``results/claims.md``) and ``training``
(ms per training step by phase, from ``results/timing/``). Where results/ has the
Markdown, it is copied as it is, so the pages cannot drift from it.
``tests/test_readme.py`` checks every number in those tables against
these blocks, and that no table outside them carries numbers unless it says
where they come from.
"""

from __future__ import annotations

import json
from pathlib import Path

from glance.reporting.report import heads_markdown


def speed_table(bench: dict, table: str) -> str:
    """The bench's own table (``results/bench.md``, verbatim), after one line
    saying where and how it was measured, from the keys ``bench.json`` has."""
    where = ", ".join(str(bench[k]) for k in ("device", "dtype") if k in bench)
    knobs = ", ".join(f"{k} {bench[k]}" for k in ("budget", "branch_k") if k in bench)
    head = f"Measured by `python -m stages.bench` on `{bench.get('target', '?')}`"
    head += f" ({where})" if where else ""
    head += f", {knobs}" if knobs else ""
    head += f", {bench['n']} prompts per task after a warm-up" if "n" in bench else ""
    if "aggregation" in bench:
        head += f". One aggregation: {bench['aggregation']}"
    for window, meaning in bench.get("windows", {}).items():
        head += f"; `{window}` (e2e / decode): {meaning}"
    if "peak_memory" in bench:
        head += f"; peak memory: {bench['peak_memory']}"
    head += ". Speedups are ratios of pooled times, against transformers' greedy `generate`"
    head += ' and for `glance_auto` (the library\'s default, `budget="auto"`) over each row,'
    head += " with 95% paired-bootstrap intervals"
    head += " over prompts.\n\n"
    return head + table


def _num(fit: dict, key: str, fmt: str) -> str:
    """``fit[key]`` formatted, or empty where the fit has no such number."""
    value = fit.get(key)
    return "" if value is None else format(value, fmt)


def law_table(law: dict) -> str:
    """The law's fit per task and pooled (``results/law.json``): rounds (censored),
    b0, b1 (with its prompt-level bootstrap interval, ``b1_interval``), R² per round
    and against the ceiling, and ``holds()`` with the conditions that failed; where
    the law was fitted on the consistency scorer's rounds too, the same table for
    them and a line comparing b1 and the grounding order."""
    text = _law_rows(law)
    if "scored" not in law:
        return text
    text += "\nOn the consistency scorer's rounds (`glance_scored`, same prompts and budget):\n\n"
    text += _law_rows(law["scored"])
    cmp = law.get("scored_vs_glance", {})
    if "b1" in cmp:
        b1 = cmp["b1"]
        overlap = "overlap" if cmp["b1_intervals_overlap"] else "do not overlap"
        text += (
            f"\nPooled b1: {b1['glance']:.2f} without the scorer, {b1['glance_scored']:.2f} "
            f"with it (the intervals {overlap}). "
        )
    order = cmp.get("grounding_order", {})
    if order:
        same = "the same" if cmp["same_grounding_order"] else "changed"
        text += (
            "Tasks from least to most draftable under each fitted law: "
            f"{', '.join(order['glance'])} without the scorer; "
            f"{', '.join(order['glance_scored'])} with it ({same}).\n"
        )
    return text


def _law_rows(law: dict) -> str:
    """:func:`law_table`'s table for one fit (``tasks`` and ``pooled``)."""
    lines = [
        "| task | n (censored) | b0 | b1 | R² round | R² ceiling | holds() |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, fit in [*law["tasks"].items(), ("pooled", law["pooled"])]:
        n = f"{fit['n']}" + (f" ({fit['n_censored']})" if "n_censored" in fit else "")
        if "error" in fit:
            lines.append(f"| {name} | {n} | | | | | not fitted: {fit['error']} |")
            continue
        b1 = _num(fit, "b1", ".2f")
        iv = fit.get("b1_interval") or {}
        if iv.get("low") is not None and iv.get("high") is not None:
            b1 += f" [{iv['low']:.2f}, {iv['high']:.2f}]"
        failed = [k for k, ok in fit.get("conditions", {}).items() if not ok]
        verdict = "yes" if fit["holds"] else "no" + (f" ({', '.join(failed)})" if failed else "")
        cells = [
            _num(fit, "b0", ".2f"),
            b1,
            _num(fit, "r2_round", ".3f"),
            _num(fit, "r2_ceiling", ".3f"),
        ]
        lines.append(f"| {name} | {n} | {' | '.join(cells)} | {verdict} |")
    return "\n".join(lines) + "\n"


#: a training log's phases, in the order the table shows them
PHASES = ("loss", "backward", "optimizer", "heldout", "checkpoint", "other")
#: trainer -> (its timing file's stage, where its steps sit in params.yaml,
#: the first that is set)
TRAINERS = {
    "block head": ("head", [("head", "train", "steps")]),
    "scorer": ("scorer", [("scorer", "steps")]),
    "EAGLE-style head": ("eagle_head", [("arms", "train", "steps"), ("head", "train", "steps")]),
    "assistant": ("assistant", [("arms", "assistant", "train", "steps")]),
}


def _steps(params: dict, places) -> int:
    """The first of ``places`` (key paths into params.yaml) that is set."""
    for keys in places:
        value = params
        for k in keys:
            value = value.get(k) if isinstance(value, dict) else None
        if value is not None:
            return value
    raise KeyError(f"params.yaml sets none of {['.'.join(k) for k in places]}")


def phase_seconds(record: dict) -> tuple[dict, float]:
    """``(phase -> seconds, feature seconds)`` from a stage's timing record,
    summed over its training phases (the assistant keeps one record a phase)."""
    runs = record.get("phases") or [record.get("train", record)]
    phases = {k: sum(r.get("phase_seconds", {}).get(k, 0.0) for r in runs) for k in PHASES}
    return phases, sum(r.get("feature_seconds", 0.0) for r in runs)


def phase_table(rows: dict[str, tuple[dict, float, float | None]]) -> str:
    """A Markdown table of ``trainer -> (phase -> ms per step, feature seconds,
    gauge seconds or None)``, one row per trainer, with each row's total and
    the machine's speed gauge (:func:`glance.pipeline.files.speed_gauge`, in
    ms) measured beside it, a dash where none was."""
    lines = ["| trainer | " + " | ".join(PHASES) + " | total ms/step | features s | gauge ms |",
             "|---|" + "---|" * (len(PHASES) + 3)]  # fmt: skip
    for trainer, (ms, features, gauge) in rows.items():
        per = [ms[k] for k in PHASES]
        cells = " | ".join(f"{v:.1f}" for v in (*per, sum(per)))
        g = "–" if gauge is None else f"{1000 * gauge:.1f}"
        lines.append(f"| {trainer} | {cells} | {features:.1f} | {g} |")
    return "\n".join(lines) + "\n"


def training_table(timing: Path, params: dict) -> str:
    """Milliseconds per training step by phase, one row per trainer, from a
    run's ``results/timing/<stage>.json`` (its ``phase_seconds`` and
    ``gauge_seconds``) and the steps ``params`` (params.yaml) gives each; a
    trainer with no file is left out."""
    rows = {}
    for trainer, (stage, places) in TRAINERS.items():
        path = Path(timing) / f"{stage}.json"
        if not path.is_file():
            continue
        steps = _steps(params, places)
        if stage == "assistant":
            steps *= params["arms"]["assistant"]["train"]["phases"]
        record = json.loads(path.read_text(encoding="utf-8"))
        phases, features = phase_seconds(record)
        ms = {k: 1000 * v / steps for k, v in phases.items()}
        rows[trainer] = (ms, features, record.get("gauge_seconds"))
    return phase_table(rows)


def blocks(results: Path) -> dict[str, str]:
    """Each marked block's text, from the files in ``results``; each Markdown
    table is checked against the SHA-256 its JSON recorded (one run's set)."""
    from glance._io import check_siblings

    read = lambda name: (results / name).read_text(encoding="utf-8")  # noqa: E731
    names = ("bench", "law", "arms", "regime_table", "seeds_table", "main_table", "claims")
    for name in names:
        data = json.loads(read(f"{name}.json"))
        check_siblings(results, data.get("files", {}), str(results / f"{name}.json"))
    return {
        "bench": speed_table(json.loads(read("bench.json")), read("bench.md")),
        "regime": read("regime_table.md"),
        "seeds": read("seeds_table.md"),
        "main": read("main_table.md"),
        "law": law_table(json.loads(read("law.json"))),
        "heads": heads_markdown(json.loads(read("arms.json"))),
        "arms": read("arms.md"),
        "claims": read("claims.md"),
        "training": training_table(results / "timing", run_params(results)),
    }


def run_params(results: Path) -> dict:
    """The run's params.yaml, beside its results folder."""
    import yaml

    return yaml.safe_load((Path(results).parent / "params.yaml").read_text(encoding="utf-8"))


def render(readme: str, texts: dict[str, str]) -> str:
    """``readme`` with each ``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` block
    replaced by ``texts[NAME]``; a missing marker raises ``ValueError``."""
    for name, text in texts.items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start not in readme or end not in readme:
            raise ValueError(f"README.md: the markers {start} and {end} are missing")
        before, rest = readme.split(start, 1)
        _, after = rest.split(end, 1)
        readme = f"{before}{start}\n{text}{end}{after}"
    return readme
