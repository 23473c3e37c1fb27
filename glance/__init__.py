"""GLANCE: lossless one-pass block drafting with budget candidate trees.

The tree, the draftability law and the metric conventions need numpy and scipy
only. The decoding entry points (``generate``, ``greedy_generate``,
``chain_generate``, ``load_block_head``, ``export_head``) import torch on
first use.
"""

from __future__ import annotations

import importlib

from glance.core.law import DraftabilityLaw
from glance.core.tree import build_budget_tree, children_of, tree_mask, tree_positions

__all__ = [
    "DraftabilityLaw",
    "build_budget_tree",
    "chain_generate",
    "children_of",
    "export_head",
    "generate",
    "greedy_generate",
    "load_block_head",
    "tree_mask",
    "tree_positions",
]

# Name -> module that defines it; imported on first attribute access so that
# `import glance` never pulls in torch.
_LAZY = {
    "generate": "glance.decoding.loop",
    "greedy_generate": "glance.decoding.loop",
    "chain_generate": "glance.decoding.loop",
    "load_block_head": "glance.heads.block",
    "export_head": "glance.heads.export",
}


#: submodules reachable as attributes, imported on first access
_SUBMODULES = ("tree", "vl")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"glance.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'glance' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
