"""Write the README's speed table from ``results/bench.json``.

    python -m stages.readme

The table sits between the ``<!-- bench:start -->`` and ``<!-- bench:end -->``
markers; a test checks that it matches the committed ``results/bench.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def speed_table(bench: dict) -> str:
    """The bench's main rows as markdown, with where and how they were measured."""
    from stages.bench import markdown

    head = (
        f"Measured by `python -m stages.bench` on `{bench['target']}` ({bench['device']}, "
        f"{bench['dtype']}), budget {bench['budget']}, branch_k {bench['branch_k']}, "
        f"{bench['n']} prompts per task after a warm-up; speedups are against "
        "transformers' greedy `generate` with 95% paired-bootstrap intervals.\n\n"
    )
    return head + markdown(bench)


def render(readme: str, bench: dict) -> str:
    if START not in readme or END not in readme:
        raise ValueError(f"README.md: the markers {START} and {END} are missing")
    before, rest = readme.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{speed_table(bench)}{END}{after}"


def main() -> None:
    from glance._io import atomic_write_text

    bench = json.loads((ROOT / "results" / "bench.json").read_text(encoding="utf-8"))
    path = ROOT / "README.md"
    atomic_write_text(path, render(path.read_text(encoding="utf-8"), bench))
    print(f"wrote the speed table into {path}")


if __name__ == "__main__":
    main()
