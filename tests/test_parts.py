"""The decoder as parts: each tested alone, and the architecture's rules."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import glance
from glance import testing as tiny
from glance.core.budget import VerifyCosts
from glance.core.tree import build_budget_tree, first_nodes, search_tree, spine_leaf, splice
from glance.decoding.cache import KVCache
from glance.decoding.loop import Clock, Options, speculate
from glance.decoding.sampling import Sampling
from glance.drafters.block import BlockDrafter
from glance.drafters.protocol import Drafter

GLANCE = Path(glance.__file__).parent
N_NEW = 48


def _draft(depth=6, k=4, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(depth, 50)) * 3
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    top = np.argsort(-logp, axis=1)[:, :k]
    return top.astype(np.int64), np.take_along_axis(logp, top, axis=1)


# --- tree planning ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_first_nodes_of_a_big_tree_is_the_smaller_budget_tree(seed):
    ids, lp = _draft(seed=seed)
    full = search_tree(ids, lp, 255)
    for n in (1, 3, 7, 31, 100, 255):
        want = build_budget_tree(ids, lp, n, ids.shape[1])
        got = first_nodes(full, n)
        for a, b in zip(
            (got.tokens, got.parents, got.depths),
            (want.tokens, want.parents, want.depths),
            strict=True,
        ):
            assert np.array_equal(a, b)


def test_spine_leaf_and_splice():
    ids, lp = _draft(depth=3, k=3)
    tree = build_budget_tree(ids, lp, 39, 3)  # every path: the spine is in
    leaf = spine_leaf(tree, ids[:, 0])
    assert leaf is not None and tree.depths[leaf] == 3
    assert spine_leaf(first_nodes(tree, 3), ids[:, 0]) is None  # depth 1 only: cut
    sub_ids, sub_lp = _draft(depth=2, k=2, seed=3)
    sub = search_tree(sub_ids, sub_lp, 4)
    joined = splice(tree, leaf, sub)
    assert len(joined) == len(tree) + len(sub)
    new = np.arange(len(tree), len(joined))
    assert (joined.parents[new] < new).all()  # still parents-first
    roots = new[sub.parents < 0]
    assert (joined.parents[roots] == leaf).all()
    assert np.array_equal(joined.depths[new], sub.depths + 3)
    assert np.allclose(joined.logprobs[new], sub.logprobs + tree.logprobs[leaf])


# --- the cache adapter and the clock --------------------------------------------


def test_kv_cache_keep_and_crop_match_a_plain_gather():
    from transformers import Qwen3Config

    config = Qwen3Config(
        num_hidden_layers=2, hidden_size=16, num_attention_heads=2, num_key_value_heads=2
    )
    cache = KVCache(config)
    g = torch.Generator().manual_seed(0)
    keys = [torch.randn(1, 2, 12, 8, generator=g) for _ in range(2)]
    for layer, k in enumerate(keys):
        cache.inner.update(k, -k, layer)
    assert len(cache) == 12
    rows = np.array([0, 2, 5])
    cache.keep(4, rows)
    assert len(cache) == 4 + 3
    for layer, k in enumerate(keys):
        want = torch.cat([k[..., :4, :], k[..., 4 + torch.from_numpy(rows), :]], dim=-2)
        assert torch.equal(cache.inner.layers[layer].keys, want)
        assert torch.equal(cache.inner.layers[layer].values, -want)
    cache.crop(5)
    assert len(cache) == 5


def test_a_clock_that_is_off_reads_nothing():
    off = Clock(torch.device("cpu"), on=False)
    assert off() == 0.0 and off() == 0.0
    on = Clock(torch.device("cpu"))
    assert 0 < on() <= on()


# --- any drafter ------------------------------------------------------------------


def test_the_block_head_is_a_drafter(world):
    assert isinstance(BlockDrafter(world.head, world.target, 4), Drafter)
    assert isinstance(tiny.ScriptedDrafter([], 10), Drafter)


@pytest.mark.parametrize("corrupt", [(), (2,), (1, 4)])
def test_a_scripted_drafter_decodes_losslessly(world, corrupt):
    reference = world.reference[0].tolist()
    drafter = tiny.ScriptedDrafter(
        reference, world.target.config.get_text_config().vocab_size, corrupt=corrupt
    )
    options = Options(N_NEW, budget=15, return_stats=True)
    out, stats = speculate(
        drafter, world.target, world.input_ids, options, positions=world.positions
    )
    assert out[0].tolist() == reference[: world.input_ids.shape[1] + N_NEW]
    # each proposal starts where the last round left off
    lengths = [length for _, length, _ in drafter.calls]
    assert lengths[0] == world.input_ids.shape[1]
    for r, (a, b) in zip(stats.rounds, zip(lengths, lengths[1:], strict=False), strict=False):
        assert b - a == r.committed
    if not corrupt:  # a perfect drafter is accepted to the depth limit
        assert all(r.accepted == r.cap for r in stats.rounds)
    else:  # a corrupted offset's right token is second, so the tree recovers it
        assert stats.tau > 1 + min(corrupt)


def test_every_round_times_its_parts(world):
    """Each round, not only the first, records its draft, tree and verify time."""
    _, stats = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        N_NEW,
        budget=15,
        positions=world.positions,
        return_stats=True,
    )
    assert len(stats.rounds) > 1
    for r in stats.rounds:
        assert r.draft_ms > 0 and r.tree_ms > 0 and r.verify_ms > 0, r
        assert r.host_ms >= r.tree_ms


def test_generate_takes_a_drafter_in_place_of_a_head(world):
    reference = world.reference[0].tolist()
    vocab = world.target.config.get_text_config().vocab_size
    out = glance.generate(
        tiny.ScriptedDrafter(reference, vocab, corrupt=(3,)),
        world.target,
        world.input_ids,
        N_NEW,
        budget=15,
        positions=world.positions,
    )
    assert out[0].tolist() == reference[: world.input_ids.shape[1] + N_NEW]


def test_a_scripted_drafter_samples_exactly(world):
    reference = world.reference[0].tolist()
    vocab = world.target.config.get_text_config().vocab_size
    drafter = tiny.ScriptedDrafter(reference, vocab, corrupt=(2,))
    options = Options(N_NEW, budget=15, sampling=Sampling(0.8, top_k=20))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    out = speculate(
        drafter, world.target, world.input_ids, options, positions=world.positions, generator=g1
    )
    want = glance.greedy_generate(
        world.target,
        world.input_ids,
        N_NEW,
        positions=world.positions,
        temperature=0.8,
        top_k=20,
        generator=g2,
    )
    assert out.tolist() == want.tolist()


def test_auto_budget_book_is_held_by_the_caller(world):
    reference = world.reference[0].tolist()
    vocab = world.target.config.get_text_config().vocab_size
    costs = VerifyCosts()
    options = Options(16, budget="auto")
    for _ in range(2):
        drafter = tiny.ScriptedDrafter(reference, vocab)
        speculate(
            drafter, world.target, world.input_ids, options, positions=world.positions, costs=costs
        )
    measured = costs.get(world.target, lambda: pytest.fail("measured twice"))
    assert all(ms > 0 for ms in measured.ms)


# --- the architecture's rules --------------------------------------------------------


def _modules():
    for path in sorted(GLANCE.rglob("*.py")):
        rel = path.relative_to(GLANCE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def _imports(tree: ast.AST, module: str) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative imports are not used here, but resolve them anyway
                base = ".".join(module.split(".")[: -node.level] + [node.module])
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] == "glance"}


#: the pipeline's own modules, which build the built-in world when the config
#: names it (``target=toy``, ``prepare.source=toy``): the stages' work, not the
#: decoder, drafters, heads, trainer or targets that serve a real model
PIPELINE = ("glance.toy", "glance.testing", "glance.pipeline")
#: and the ``glance`` command, which loads the shipped toy target like any other
PIPELINE_WORK = {"glance.experiments.target", "glance.data.prepare", "glance.cli"}


def test_glance_has_no_import_cycle_and_no_arrow_into_toy_or_testing():
    modules = dict(_modules())
    graph = {m: {i for i in _imports(t, m) if i in modules and i != m} for m, t in modules.items()}
    for m, deps in graph.items():
        outside = not m.startswith(PIPELINE) and m not in PIPELINE_WORK
        if outside:
            bad = sorted(d for d in deps if d.startswith(("glance.toy", "glance.testing")))
            assert not bad, f"{m} imports {bad}"
    # a package's own __init__ re-exports are not arrows between modules
    graph = {m: {d for d in deps if d != "glance"} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(m, trail):
        state[m] = 1
        for d in graph[m]:
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, m, d]))
            if d not in state:
                visit(d, [*trail, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_no_function_in_glance_takes_more_than_six_positional_parameters():
    for module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                positional = [
                    a.arg for a in args.posonlyargs + args.args if a.arg not in ("self", "cls")
                ]
                assert len(positional) <= 6, f"{module}.{node.name}({', '.join(positional)})"


def test_the_round_loop_fits_on_one_screen():
    source = (GLANCE / "decoding" / "loop.py").read_text(encoding="utf-8")
    fn = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef) and n.name == "speculate"
    )
    loop = next(n for n in ast.walk(fn) if isinstance(n, ast.While))
    assert loop.end_lineno - loop.lineno + 1 <= 40
