import subprocess
import sys

import pytest

import glance


def test_numpy_core_imports_without_torch():
    code = (
        "import sys, glance, glance.tree, glance.core.tree, glance.core.law, glance.core.metrics, "
        "glance.core.budget, glance.core.numerics; "
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


def test_the_names_users_import_stay_where_they_were():
    import glance.core.tree as core_tree
    import glance.targets.vl as targets_vl
    from glance.tree import CandidateTree, build_budget_tree
    from glance.vl import VisionPositions, chat_inputs, load_target

    assert build_budget_tree is core_tree.build_budget_tree
    assert CandidateTree is core_tree.CandidateTree
    assert glance.tree.tree_mask is core_tree.tree_mask
    assert (load_target, chat_inputs, VisionPositions) == (
        targets_vl.load_target,
        targets_vl.chat_inputs,
        targets_vl.VisionPositions,
    )
    assert glance.vl.stop_ids is targets_vl.stop_ids
