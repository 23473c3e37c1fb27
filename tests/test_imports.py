import subprocess
import sys

import pytest

import glance


def test_numpy_core_imports_without_torch():
    code = (
        "import sys, glance, glance.core.tree, glance.core.law, glance.core.metrics; "
        "heavy = sorted(m for m in ('torch', 'transformers', 'dflash') if m in sys.modules); "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_names():
    from glance.core.law import DraftabilityLaw
    from glance.core.tree import build_budget_tree, tree_mask

    assert glance.build_budget_tree is build_budget_tree
    assert glance.tree_mask is tree_mask
    assert glance.DraftabilityLaw is DraftabilityLaw
    for lazy in ("generate", "greedy_generate", "chain_generate", "load_block_head"):
        assert lazy in dir(glance)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        glance.nonsense  # noqa: B018
