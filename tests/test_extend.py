"""``extend_budget``: the second head pass past the block widens the tree and
never changes the output (float64, all four target classes)."""

from __future__ import annotations

import pytest
import torch

import glance
from glance import testing as tiny

N_NEW = 64


@pytest.fixture(scope="module")
def variable_heads():
    """A random head per kind, labelled as trained with a variable mask span."""
    return {}


def head_for(world, cache):
    if world.kind not in cache:
        cache[world.kind] = tiny.build_head(world.target, mask_span="variable")
    return cache[world.kind]


def new_tokens(ids, world):
    return ids[0, world.input_ids.shape[1] :].tolist()


# budget 7 with branch_k 1 is the whole spine of a block of 8, so every round
# extends; budget 1 never holds the spine leaf, so none does.
@pytest.mark.parametrize(
    "budget, branch_k, extend, extends",
    [(1, 1, 1, False), (7, 1, 5, True), (7, 1, 63, True), (63, 8, 63, None)],
)
def test_extension_is_lossless(world, variable_heads, budget, branch_k, extend, extends):
    head = head_for(world, variable_heads)
    want = new_tokens(world.reference, world)[:N_NEW]
    kw = dict(budget=budget, branch_k=branch_k, extend_budget=extend, positions=world.positions)
    out, stats = glance.generate(
        head, world.target, world.input_ids, N_NEW, return_stats=True, **kw
    )
    assert new_tokens(out, world) == want
    assert all(r.tree_size <= budget + extend for r in stats.rounds)
    if extends is not None:
        assert any(r.tree_size > budget for r in stats.rounds) == extends
    stop = want[N_NEW // 2]
    cut = want[: want.index(stop) + 1]
    out = glance.generate(head, world.target, world.input_ids, N_NEW, stop_token_ids=[stop], **kw)
    assert new_tokens(out, world) == cut
    for n in (1, 2, 9, 17):  # caps that end inside the block and inside the extension
        out = glance.generate(head, world.target, world.input_ids, n, **kw)
        assert new_tokens(out, world) == want[:n]


def oracle(world, reference=None, corrupt=()):
    """An oracle head (rigged toward ``reference``, by default the greedy text)
    labelled as trained with a variable mask span."""
    ref = world.reference if reference is None else reference
    head = tiny.OracleHead(world.target, ref[0].tolist(), block_size=8, corrupt=corrupt)
    head.config.dflash_config = {"mask_span": "variable"}
    return head


def sampled_spine(head, world, seed, extend):
    """GLANCE sampling at temperature 1 on a width-1 tree of 7 nodes: the whole
    spine of a block of 8, so every round with room extends."""
    return glance.generate(
        head,
        world.target,
        world.input_ids,
        N_NEW,
        budget=7,
        branch_k=1,
        extend_budget=extend,
        positions=world.positions,
        temperature=1.0,
        generator=torch.Generator().manual_seed(seed),
        return_stats=True,
    )


def sampled_greedy(world, seed):
    return glance.greedy_generate(
        world.target,
        world.input_ids,
        N_NEW,
        positions=world.positions,
        temperature=1.0,
        generator=torch.Generator().manual_seed(seed),
    )


def test_extension_nodes_are_accepted_past_the_block(world):
    """An oracle spine is accepted whole, and the subtree below it carries the
    walk past the block: up to 2 * (B - 1) accepted per round."""
    want = new_tokens(world.reference, world)[:N_NEW]
    kw = dict(budget=7, branch_k=1, positions=world.positions, return_stats=True)
    out, plain = glance.generate(oracle(world), world.target, world.input_ids, N_NEW, **kw)
    assert new_tokens(out, world) == want
    assert max(r.accepted for r in plain.rounds) == 7
    out, wide = glance.generate(
        oracle(world), world.target, world.input_ids, N_NEW, extend_budget=7, **kw
    )
    assert new_tokens(out, world) == want
    assert max(r.accepted for r in wide.rounds) == 14
    assert wide.tau > plain.tau + 3


def test_no_extension_without_the_spine_leaf(world):
    """A budget below the block's depth cannot hold the spine leaf: the
    extension pass is skipped and nothing is added."""
    kw = dict(budget=3, branch_k=1, positions=world.positions, return_stats=True)
    out, st = glance.generate(
        oracle(world), world.target, world.input_ids, 32, extend_budget=7, **kw
    )
    assert new_tokens(out, world) == new_tokens(world.reference, world)[:32]
    assert all(r.tree_size <= 3 for r in st.rounds)


def test_extension_with_sampling_couples_to_autoregressive_sampling(world, variable_heads):
    head = head_for(world, variable_heads)
    for seed in range(3):
        want = sampled_greedy(world, seed)
        out, stats = sampled_spine(head, world, seed, extend=15)
        assert out.tolist() == want.tolist()
        left = N_NEW - 1  # the prefill made the first token
        for r in stats.rounds:  # the spine is the tree: it extends while there is room
            assert (r.tree_size > 7) == (left > 7)
            left -= r.committed


def test_extend_budget_must_be_a_count(world, variable_heads):
    head = head_for(world, variable_heads)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="extend_budget"):
            glance.generate(head, world.target, world.input_ids, 4, extend_budget=bad)


def test_sampled_walk_accepts_into_the_extension(world):
    """A head rigged toward the sampled text: under sampling too, the walk runs
    on into the subtree past the block, and the text is unchanged."""
    want = sampled_greedy(world, 7)
    out, stats = sampled_spine(oracle(world, reference=want), world, 7, extend=7)
    assert out.tolist() == want.tolist()
    assert max(r.accepted for r in stats.rounds) == 14
