"""Write the README's generated tables from the pipeline's results.

    python -m stages.readme

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
markers (:mod:`glance.reporting.readme`); ``tests/test_readme.py`` checks every
number in the README's tables against them.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    from glance._io import atomic_write_text
    from glance.reporting.readme import blocks, render

    path = ROOT / "README.md"
    atomic_write_text(path, render(path.read_text(encoding="utf-8"), blocks(ROOT / "results")))
    print(f"wrote the generated tables into {path}")


if __name__ == "__main__":
    main()
