"""The source files a module's run reads: its import closure inside the project.

A module's closure is the module, the packages whose ``__init__`` importing it
runs, and every module under ``glance/`` and ``stages/`` that it imports, at
module level or inside a function, plus the module behind each of ``glance``'s
lazy attributes that it uses, and the C kernel's source wherever
``glance.core.tree`` is reached. The reading is static and conservative: an
import inside a function counts, whether or not the run calls that function.

It names a DVC stage's source deps (:mod:`glance.testing.dvc_deps`) and the
sources a decode run's recipe hashes (:func:`glance.experiments.outputs.inputs_digest`),
so both follow the same files.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a source the closure reaches that is not a Python module
KERNELS = {"glance/core/tree.py": "glance/core/_ctree.c"}


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
