"""Write the README's generated tables from the pipeline's results.

    python -m stages.readme

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
markers: ``bench`` (the speed table, from ``results/bench.json``), ``regime``
(where the toy world sits, ``results/regime_table.md``), ``seeds`` (other task
draws, ``results/seeds_table.md``), ``main`` (``results/main_table.md``) and
``law`` (``results/law.json``), ``heads`` and ``arms`` (the comparison arms,
``results/arms.json`` and ``arms.md``). A test checks that the README matches the
committed results.
"""

from __future__ import annotations

import json
from pathlib import Path

from glance.report import heads_markdown

ROOT = Path(__file__).resolve().parent.parent


def speed_table(bench: dict, table: str) -> str:
    """The bench's table (``results/bench.md``), with where and how it was measured."""
    head = (
        f"Measured by `python -m stages.bench` on `{bench['target']}` ({bench['device']}, "
        f"{bench['dtype']}), budget {bench['budget']}, branch_k {bench['branch_k']}, "
        f"{bench['n']} prompts per task after a warm-up; speedups are against "
        "transformers' greedy `generate` with 95% paired-bootstrap intervals.\n\n"
    )
    return head + table


def law_table(law: dict) -> str:
    """The law's fit per task and pooled, with ``holds()`` and its conditions."""
    lines = [
        "| fit | rounds (censored) | b0 | b1 | Spearman rho | R² round / ceiling | holds() |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, fit in [*law["tasks"].items(), ("pooled", law["pooled"])]:
        if "error" in fit:
            lines.append(f"| {name} | {fit['n']} | | | | | not fitted: {fit['error']} |")
            continue
        failed = [k for k, ok in fit["conditions"].items() if not ok]
        verdict = "yes" if fit["holds"] else "no (" + ", ".join(failed) + ")"
        r2 = f"{fit['r2_round']:.3f} / {fit['r2_ceiling']:.3f}"
        lines.append(
            f"| {name} | {fit['n']} ({fit['n_censored']}) | {fit['b0']:.2f} | {fit['b1']:.2f} | "
            f"{fit['spearman_rho']:.2f} | {r2} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def blocks(results: Path) -> dict[str, str]:
    """Each marked block's text, from the files in ``results``."""
    read = lambda name: (results / name).read_text(encoding="utf-8")  # noqa: E731
    return {
        "bench": speed_table(json.loads(read("bench.json")), read("bench.md")),
        "regime": read("regime_table.md"),
        "seeds": read("seeds_table.md"),
        "main": read("main_table.md"),
        "law": law_table(json.loads(read("law.json"))),
        "heads": heads_markdown(json.loads(read("arms.json"))),
        "arms": read("arms.md"),
    }


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


def main() -> None:
    from glance._io import atomic_write_text

    path = ROOT / "README.md"
    atomic_write_text(path, render(path.read_text(encoding="utf-8"), blocks(ROOT / "results")))
    print(f"wrote the generated tables into {path}")


if __name__ == "__main__":
    main()
