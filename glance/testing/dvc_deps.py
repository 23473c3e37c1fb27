"""Each DVC stage's source deps: the files its import closure reaches.

A stage's closure is its module, its package's ``__init__``, and every module
under ``glance/`` and ``stages/`` that it imports, at module level or inside a
function, plus the module behind each of ``glance``'s lazy attributes that it
uses, and the C kernel's source wherever ``glance.core.tree`` is reached. The
stage's ``deps`` list exactly those files (and its data), so that an edit to
the decoding loop retrains no head. ``tests/test_dvc_deps.py`` checks both
directions; after moving an import, rewrite the lists with

    python -m glance.testing.dvc_deps            # rewrite dvc.yaml and stages/arms/dvc.yaml
    python -m glance.testing.dvc_deps --check    # exit 1 naming each stage whose list is stale

The static reading is conservative: an import inside a function counts,
whether or not the stage calls that function.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ("dvc.yaml", "stages/arms/dvc.yaml")
#: a source the closure reaches that is not a Python module
KERNELS = {"glance/core/tree.py": "glance/core/_ctree.c"}
_SOURCE_DEP = re.compile(r"^(\s+)- ((?:glance|stages)/\S*)\s*$")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> its file, for every module under glance/ and stages/."""
    out = {}
    for top in ("glance", "stages"):
        for path in (root / top).rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def _lazy(root: Path) -> dict[str, str]:
    """``glance``'s lazy attributes: name -> the module that defines it."""
    tree = ast.parse((root / "glance" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_LAZY":
            return ast.literal_eval(node.value)
    raise ValueError("glance/__init__.py has no _LAZY table")


def _with_packages(name: str) -> set[str]:
    """``name`` and the packages whose ``__init__`` importing it runs."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def imports(path: Path, modules: dict, lazy: dict) -> set[str]:
    """The project modules ``path`` imports, anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
            while name and name not in modules:  # `glance.core.tree.search_tree` -> the module
                name = name.rpartition(".")[0]
            if name:
                found |= _with_packages(name)
    return found & set(modules)


def closure(module: str, root: Path = ROOT) -> list[str]:
    """The files (relative to ``root``, sorted) that running ``module`` reads."""
    modules, lazy = module_files(root), _lazy(root)
    seen, todo = set(), sorted(_with_packages(module) & set(modules))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += sorted(imports(modules[m], modules, lazy))
    files = {modules[m].relative_to(root).as_posix() for m in seen}
    files |= {KERNELS[f] for f in files if f in KERNELS}
    return sorted(files)


def stages(root: Path = ROOT):
    """``(pipeline, stage name, stage module, declared deps)`` for every stage."""
    for pipeline in PIPELINES:
        for name, stage in yaml.safe_load((root / pipeline).read_text())["stages"].items():
            body = stage.get("do", stage)
            module = re.search(r"\$\{app\}\.(\w+)", body["cmd"]).group(1)
            yield pipeline, name, f"stages.{module}", [str(d) for d in body.get("deps", [])]


def rewrite(text: str, wanted: dict[str, list[str]]) -> str:
    """``text`` (a dvc.yaml) with each stage's glance/ and stages/ deps replaced
    by ``wanted[stage]``, where the stage's first such dep stood."""
    out, stage, done = [], None, set()
    for line in text.splitlines(keepends=True):
        head = re.match(r"^  (\w+):\s*$", line)
        if head:
            stage = head.group(1)
        dep = _SOURCE_DEP.match(line)
        if dep and stage in wanted:
            if stage not in done:
                out += [f"{dep.group(1)}- {f}\n" for f in wanted[stage]]
                done.add(stage)
            continue
        out.append(line)
    missing = sorted(set(wanted) - done)
    if missing:
        raise ValueError(f"stages {missing} list no glance/ or stages/ dep to replace")
    return "".join(out)


def stale(root: Path = ROOT) -> dict[str, tuple[list[str], list[str]]]:
    """Stages whose declared source deps differ from their closure:
    ``"pipeline:stage" -> (declared, wanted)``."""
    out = {}
    for pipeline, name, module, deps in stages(root):
        declared = sorted(d for d in deps if d.startswith(("glance/", "stages/")) or d == "glance")
        wanted = closure(module, root)
        if declared != wanted:
            out[f"{pipeline}:{name}"] = (declared, wanted)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale lists")
    args = parser.parse_args(argv)
    bad = stale()
    for key, (declared, wanted) in bad.items():
        extra, missing = sorted(set(declared) - set(wanted)), sorted(set(wanted) - set(declared))
        print(f"{key}: missing {missing}, not read {extra}")
    if args.check or not bad:
        return 1 if bad else 0
    for pipeline in PIPELINES:
        wanted = {name: closure(module) for p, name, module, _ in stages() if p == pipeline}
        path = ROOT / pipeline
        path.write_text(rewrite(path.read_text(encoding="utf-8"), wanted), encoding="utf-8")
    print(f"rewrote {', '.join(PIPELINES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
