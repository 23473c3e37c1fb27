"""dvc.yaml declares every source file each stage reads.

Each stage's Python closure (its module, and everything under ``glance/`` and
``stages/`` that it imports, at module level or inside functions, plus the
module behind each of ``glance``'s lazy attributes that it uses) must be
covered by the stage's ``deps``; so must the C kernel's source wherever
``glance.core.tree`` is imported. Otherwise an edit to an undeclared file leaves
``dvc status`` clean and the committed results stale.

The converse holds too: a stage's ``glance`` deps are exactly the subpackages
(and top-level modules) its closure reaches, so that an edit to the decoding
loop does not retrain a head.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent


def _module_files() -> dict[str, Path]:
    out = {}
    for top in ("glance", "stages"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def _lazy() -> dict[str, str]:
    """``glance``'s lazy attributes: name -> the module that defines it."""
    tree = ast.parse((ROOT / "glance" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_LAZY":
            return ast.literal_eval(node.value)
    raise AssertionError("glance/__init__.py has no _LAZY table")


def _imports(path: Path, modules: dict) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, lazy = set(), _lazy()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if node.module == "glance":  # `from glance import generate`
                names += [lazy[a.name] for a in node.names if a.name in lazy]
        elif (  # `glance.generate(...)`
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "glance"
            and node.attr in lazy
        ):
            names = [lazy[node.attr]]
        for name in names:
            while (
                name and name not in modules
            ):  # `glance.core.tree.search_tree` -> glance.core.tree
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
                parts = name.split(".")  # importing a submodule runs its packages too
                found |= {".".join(parts[:i]) for i in range(1, len(parts))}
    return found & set(modules)


def _closure(start: str, modules: dict) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += _imports(modules[m], modules)
    return seen


PIPELINES = ("dvc.yaml", "stages/arms/dvc.yaml")


def _stages():
    for pipeline in PIPELINES:
        for name, stage in yaml.safe_load((ROOT / pipeline).read_text())["stages"].items():
            body = stage.get("do", stage)
            module = re.search(r"\$\{app\}\.(\w+)", body["cmd"]).group(1)
            yield name, f"stages.{module}", [str(d) for d in body.get("deps", [])]


@pytest.mark.parametrize(("name", "module", "deps"), list(_stages()), ids=lambda x: str(x)[:20])
def test_dvc_yaml_declares_every_file_a_stage_reads(name, module, deps):
    modules = _module_files()
    needed = {modules[m].relative_to(ROOT).as_posix() for m in _closure(module, modules)}
    if "glance/core/tree.py" in needed:
        needed.add("glance/core/_ctree.c")

    def covered(f):
        return any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps)

    missing = sorted(f for f in needed if not covered(f))
    assert not missing, f"dvc.yaml stage {name!r} ({module}) reads undeclared {missing}"
    ignored = sorted(f for f in needed if _dvcignored(f))
    assert not ignored, f"stage {name!r} ({module}) reads {ignored}, which .dvcignore hides"


def _unit(rel: str) -> str:
    """What a stage declares for a file under ``glance/``: its subpackage's
    folder, or the file itself when it sits at the top."""
    parts = rel.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else rel


@pytest.mark.parametrize(("name", "module", "deps"), list(_stages()), ids=lambda x: str(x)[:20])
def test_glance_deps_are_the_subpackages_a_stage_reaches(name, module, deps):
    modules = _module_files()
    needed = {modules[m].relative_to(ROOT).as_posix() for m in _closure(module, modules)}
    units = {_unit(f) for f in needed if f.startswith("glance/")}
    declared = {d.rstrip("/") for d in deps if d == "glance" or d.startswith("glance/")}
    assert declared == units, (
        f"stage {name!r} ({module}): glance deps {sorted(declared)}, "
        f"but its imports reach {sorted(units)}"
    )


def test_a_change_to_the_decoding_loop_retrains_no_head():
    # The target stage scores the target's greedy answers with glance's own
    # greedy decoding, so it reruns; its outputs stay byte-identical when the
    # decoder stays lossless, and DVC then leaves the heads alone.
    modules = _module_files()
    for name, module, deps in _stages():
        if name in ("prepare", "seed_data", "head", "eagle_head", "assistant"):
            reached = {modules[m].relative_to(ROOT).as_posix() for m in _closure(module, modules)}
            assert "glance/decoding/loop.py" not in reached, name
            assert not any(d.startswith("glance/decoding") or d == "glance" for d in deps), name


def _dvcignored(rel: str) -> bool:
    """Whether a ``.dvcignore`` line (a file, or a folder ending in ``/``) hides ``rel``."""
    lines = (ROOT / ".dvcignore").read_text().splitlines()
    patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    return any(rel == p or (p.endswith("/") and "/" in p and rel.startswith(p)) for p in patterns)


def test_dvcignore_hides_only_modules_no_stage_imports():
    modules = _module_files()
    read = set()
    for _, module, _ in _stages():
        read |= {modules[m].relative_to(ROOT).as_posix() for m in _closure(module, modules)}
    hidden = [p.relative_to(ROOT).as_posix() for p in (ROOT / "glance").rglob("*.py")]
    hidden = [f for f in hidden if _dvcignored(f)]
    assert "glance/testing/__init__.py" in hidden and not set(hidden) & read


@pytest.mark.parametrize("folder", [".", "stages/arms"])
def test_every_lock_entry_names_a_stage_the_pipeline_has(folder):
    """No orphaned ``dvc.lock`` entries (a removed stage or foreach item): DVC
    keeps them until a full repro rewrites the lock, and they mislead readers."""
    import subprocess
    import sys

    import yaml

    dvc = str(Path(sys.executable).parent / "dvc")
    listed = subprocess.run([dvc, "stage", "list", "--name-only"], cwd=ROOT / folder,
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    locked = yaml.safe_load((ROOT / folder / "dvc.lock").read_text())["stages"]
    orphans = sorted(set(locked) - set(listed))
    assert not orphans, f"{folder}/dvc.lock holds stages its dvc.yaml lacks: {orphans}"
    assert set(listed) <= set(locked), "a stage never ran: run dvc repro"
