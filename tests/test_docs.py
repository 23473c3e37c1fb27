"""The documentation site: it builds strictly, and its API reference covers
every public module of the library."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def public_modules() -> set[str]:
    """Every importable module under glance/ whose name has no leading underscore."""
    out = set()
    for path in (ROOT / "glance").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == "__main__" or any(p.startswith("_") for p in parts):
            continue
        out.add(".".join(parts))
    return out


def test_the_api_reference_covers_every_public_module():
    pages = (ROOT / "docs" / "reference").glob("*.md")
    documented = {m for p in pages for m in re.findall(r"^::: ([\w.]+)$", p.read_text(), re.M)}
    missing = sorted(public_modules() - documented)
    assert not missing, f"modules with no page in docs/reference: {missing}"
    assert not documented - public_modules(), documented - public_modules()


def test_every_docs_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(p for p in pages if f": {p}\n" not in nav)
    assert not missing, f"docs pages missing from mkdocs.yml's nav: {missing}"


def test_the_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocstrings", reason="the docs extra is part of the test install")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    decoding = (site / "reference" / "decoding" / "index.html").read_text()
    assert "glance.decoding.loop.generate" in decoding
    assert "Decode with a budget tree per round" in decoding  # the docstring, rendered
    assert (site / "quickstart" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The strict build is what catches a broken page link: prove it on a copy."""
    pytest.importorskip("mkdocs")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\nSee [nowhere](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nstrict: true\nvalidation:\n  unrecognized_links: warn\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "missing.md" in proc.stderr
