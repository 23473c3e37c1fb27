"""Write the generated tables of the README and the docs from the pipeline's results.

    python -m stages.readme

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
markers (:mod:`glance.reporting.readme`) in ``README.md`` or a page under
``docs/``; a block may appear in more than one file, and each must appear in
one at least. ``tests/test_readme.py`` checks every number in those tables
against them.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def documents(root: Path = ROOT) -> list[Path]:
    """The files that may hold generated blocks: the README and every docs page."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def main() -> None:
    from glance._io import atomic_write_text
    from glance.reporting.readme import blocks, render

    texts = blocks(ROOT / "results")
    placed = set()
    for path in documents():
        text = path.read_text(encoding="utf-8")
        here = {k: v for k, v in texts.items() if f"<!-- {k}:start -->" in text}
        if here:
            atomic_write_text(path, render(text, here))
            placed |= set(here)
            print(f"wrote {', '.join(sorted(here))} into {path.relative_to(ROOT)}")
    unplaced = sorted(set(texts) - placed)
    if unplaced:
        raise SystemExit(f"no README or docs page has the markers of {unplaced}")


if __name__ == "__main__":
    main()
