"""Losslessness of every decoding path against greedy decoding, in float64."""

from __future__ import annotations

import pytest
import torch  # noqa: E402

import glance  # noqa: E402
from glance import testing as tiny  # noqa: E402
from glance.decoding.loop import Stats  # noqa: E402

N_NEW = 64


def new_tokens(ids, world):
    return ids[0, world.input_ids.shape[1] :].tolist()


def expected(world, n=N_NEW, stops=()):
    ref = new_tokens(world.reference, world)[:n]
    for i, t in enumerate(ref):
        if t in stops:
            return ref[: i + 1]
    return ref


def a_stop(world):
    """A token greedy decoding emits mid-way, so a stop there cuts the output."""
    ref = new_tokens(world.reference, world)
    return ref[N_NEW // 2]


def test_greedy_matches_transformers_generate(world):
    ids = glance.greedy_generate(world.target, world.input_ids, N_NEW, positions=world.positions)
    assert new_tokens(ids, world) == expected(world)
    assert len(set(expected(world))) >= 4  # the reference is not a constant run


@pytest.mark.parametrize("budget", [1, 2, 7, 63, "auto"])
@pytest.mark.parametrize("branch_k", [1, 3, 8])
def test_tree_matches_greedy(world, budget, branch_k):
    out = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        N_NEW,
        budget=budget,
        branch_k=branch_k,
        positions=world.positions,
    )
    assert new_tokens(out, world) == expected(world)
    stop = a_stop(world)
    out = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        N_NEW,
        budget=budget,
        branch_k=branch_k,
        positions=world.positions,
        stop_token_ids=[stop],
    )
    assert new_tokens(out, world) == expected(world, stops={stop})


def test_chain_and_greedy_with_stops(world):
    stop = a_stop(world)
    for fn, args in (
        (glance.chain_generate, (world.head, world.target)),
        (glance.greedy_generate, (world.target,)),
    ):
        out = fn(*args, world.input_ids, N_NEW, positions=world.positions)
        assert new_tokens(out, world) == expected(world)
        out = fn(*args, world.input_ids, N_NEW, positions=world.positions, stop_token_ids=[stop])
        assert new_tokens(out, world) == expected(world, stops={stop})


def test_max_new_tokens_is_exact(world):
    for n in (1, 2, 9):
        out = glance.generate(
            world.head, world.target, world.input_ids, n, positions=world.positions
        )
        assert new_tokens(out, world) == expected(world, n)


def cache_lengths(target):
    """Record (cache length, root index, root token) at every multi-token target pass."""
    seen = []

    def hook(module, args, kwargs):
        ids = kwargs["input_ids"]
        cache = kwargs.get("past_key_values")
        if cache is not None and ids.shape[1] > 1 and cache.get_seq_length() > 0:
            pos = kwargs["position_ids"]
            seen.append((cache.get_seq_length(), int(ids[0, 0]), pos))
        return None

    return seen, target.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize(
    ("corrupt", "budget", "branch_k"),
    [((), 63, 8), ((), 7, 1), ((3,), 63, 2), ((1, 4, 6), 63, 3), ((2, 5), 20, 4)],
)
def test_oracle_head_accepts_deep_and_sideways(world, corrupt, budget, branch_k):
    block = 8
    prompt = world.input_ids[0].tolist()
    reference = prompt + new_tokens(world.reference, world)
    head = tiny.OracleHead(world.target, reference, block_size=block, corrupt=corrupt)
    seen, handle = cache_lengths(world.target)
    try:
        out, stats = glance.generate(
            head,
            world.target,
            world.input_ids,
            N_NEW,
            budget=budget,
            branch_k=branch_k,
            positions=world.positions,
            return_stats=True,
        )
    finally:
        handle.remove()
    assert new_tokens(out, world) == expected(world)
    full = [r for r in stats.rounds[:-1]]
    # Rigged drafts: every corrupted offset's right token is the 2nd choice, so a
    # wide enough tree still accepts the whole block down a side branch.
    if branch_k >= 2 or not corrupt:
        assert all(r.accepted == block - 1 and r.committed == block for r in full)
        assert stats.tau >= block - 1
    # The target cache holds exactly prompt + committed tokens at every round:
    # rejected nodes never stay behind.
    committed = len(prompt) + 1
    assert len(seen) == len(stats.rounds)
    for (cache_len, root, _), r in zip(seen, stats.rounds, strict=True):
        assert cache_len == committed - 1
        assert root == reference[committed - 1]
        committed += r.committed


def test_oracle_chain_stops_at_the_first_wrong_offset(world):
    prompt = world.input_ids[0].tolist()
    reference = prompt + new_tokens(world.reference, world)
    head = tiny.OracleHead(world.target, reference, block_size=8, corrupt=(3,))
    out, stats = glance.chain_generate(
        head, world.target, world.input_ids, N_NEW, positions=world.positions, return_stats=True
    )
    assert new_tokens(out, world) == expected(world)
    assert all(r.accepted == 2 for r in stats.rounds[:-1])


@pytest.mark.parametrize("n_new", [N_NEW, 19])
def test_effective_cap_is_the_block_or_what_is_left(world, n_new):
    # An oracle head accepts every offset, so each round runs into its cap:
    # the block's last offset, or the tokens left before max_new_tokens or the
    # stop token. Every round is then censored, none a rejection.
    block = 8
    prompt = world.input_ids[0].tolist()
    reference = prompt + new_tokens(world.reference, world)
    stop = a_stop(world)
    head = tiny.OracleHead(world.target, reference, block_size=block)
    for stops in ((), (stop,)):
        # a fixed budget: "auto" sizes trees from timings, which a busy machine moves
        out, stats = glance.generate(
            head,
            world.target,
            world.input_ids,
            n_new,
            budget=63,
            positions=world.positions,
            stop_token_ids=list(stops),
            return_stats=True,
        )
        produced = 1
        for r in stats.rounds:
            left = len(new_tokens(out, world)) - produced
            assert r.cap == min(block - 1, left), (r, left)
            assert min(r.accepted, r.cap) == r.cap  # censored
            assert r.stop == ("end" if r.committed <= r.accepted else "depth"), r
            produced += r.committed
        assert produced == len(new_tokens(out, world))
    # A chain that misses offset 3 every round: rejections, not censored rounds.
    head = tiny.OracleHead(world.target, reference, block_size=block, corrupt=(3,))
    _, stats = glance.chain_generate(
        head, world.target, world.input_ids, N_NEW, positions=world.positions, return_stats=True
    )
    assert all(r.accepted == 2 < r.cap for r in stats.rounds[:-1])
    assert all(r.stop == "rejection" for r in stats.rounds[:-1])
    # A budget of 3 nodes: the oracle's tree is its 3-deep spine, so each round
    # accepts down to that leaf, short of its cap; censored, yet not by the cap.
    head = tiny.OracleHead(world.target, reference, block_size=block)
    _, stats = glance.generate(
        head, world.target, world.input_ids, N_NEW, positions=world.positions, budget=3,
        return_stats=True,
    )  # fmt: skip
    leafy = [r for r in stats.rounds if r.stop == "leaf"]
    assert leafy and all(r.accepted == 3 < r.cap for r in leafy), stats.rounds


def test_stats_are_consistent(world):
    out, stats = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        20,
        positions=world.positions,
        return_stats=True,
    )
    assert isinstance(stats, Stats)
    assert stats.new_tokens == 20 == out.shape[1] - world.input_ids.shape[1]
    # The prefill yields the first token; rounds commit the rest.
    assert sum(r.committed for r in stats.rounds) == 19
    assert stats.tau == pytest.approx(19 / len(stats.rounds))
    assert all(r.committed == r.accepted + 1 for r in stats.rounds[:-1])
    assert all(0 < r.tree_size <= 63 and r.entropy >= 0 for r in stats.rounds)
    assert stats.ms_per_token > 0 and stats.timing == "decode_only"
    _, legacy = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        20,
        positions=world.positions,
        timing="legacy",
        return_stats=True,
    )
    assert legacy.timing == "legacy"


# Property: any seed, prompt, budget and branch_k decodes exactly as greedy does.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(scope="module")
def text_world(checkpoints):
    from glance.targets.vl import load_target

    target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float64)
    head = glance.load_block_head(checkpoints["qwen3"][1], target=target)
    return target, head


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    prompt_len=st.integers(1, 24),
    budget=st.integers(1, 80),
    branch_k=st.integers(1, 6),
    n_new=st.integers(1, 40),
    corrupt=st.sets(st.integers(1, 7), max_size=4),
    use_oracle=st.booleans(),
)
def test_generate_is_greedy_for_any_input(
    text_world, seed, prompt_len, budget, branch_k, n_new, corrupt, use_oracle
):
    target, head = text_world
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, tiny.MASK, (1, prompt_len), generator=g)
    want = glance.greedy_generate(target, prompt, n_new + 8)
    if use_oracle:
        head = tiny.OracleHead(target, want[0].tolist(), block_size=8, corrupt=corrupt, seed=seed)
    stop = int(want[0, prompt_len + n_new // 2])
    for stops in (None, [stop]):
        out = glance.generate(
            head, target, prompt, n_new, budget=budget, branch_k=branch_k, stop_token_ids=stops
        )
        ref = glance.greedy_generate(target, prompt, n_new, stop_token_ids=stops)
        assert out.tolist() == ref.tolist()


def test_auto_budget_is_lossless_and_times_the_target_once(world):
    from glance.core.budget import AUTO_SIZES, VerifyCosts

    costs = VerifyCosts()
    prompt = world.input_ids[0].tolist()
    reference = prompt + new_tokens(world.reference, world)
    head = tiny.OracleHead(world.target, reference, block_size=8, corrupt_rate=0.3)
    calls = []
    handle = world.target.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        out, stats = glance.generate(
            head,
            world.target,
            world.input_ids,
            N_NEW,
            budget="auto",
            branch_k=4,
            positions=world.positions,
            return_stats=True,
            costs=costs,
        )
        first = len(calls)
        out2, stats2 = glance.generate(
            head,
            world.target,
            world.input_ids,
            N_NEW,
            budget="auto",
            branch_k=4,
            positions=world.positions,
            return_stats=True,
            costs=costs,
        )
    finally:
        handle.remove()
    assert new_tokens(out, world) == expected(world) == new_tokens(out2, world)
    # Timing: one prefill, 3 passes per grid size, then one pass per round.
    assert first == 1 + 3 * len(AUTO_SIZES) + len(stats.rounds)
    assert len(calls) - first == 1 + len(stats2.rounds)  # the book kept the curve
    cost = costs.get(world.target, lambda: None)
    assert cost.sizes == AUTO_SIZES and all(ms > 0 for ms in cost.ms)
    # Each round verifies a grid size; only a last, depth-capped round may
    # verify a whole tree smaller than the grid size it would have picked.
    assert sum(r.tree_size in AUTO_SIZES for r in stats.rounds) >= len(stats.rounds) - 1


def test_auto_budget_with_a_fixed_cost_is_a_function_of_its_inputs(world):
    """With a fixed cost table the auto row times nothing and two calls pick the
    same tree sizes: the row reproduces bit for bit on any machine."""
    from glance.core.budget import AUTO_SIZES, VerifyCost, VerifyCosts

    fixed = VerifyCost(AUTO_SIZES, tuple(1.0 + n / 10 for n in AUTO_SIZES), draft_ms=1.0)
    prompt = world.input_ids[0].tolist()
    reference = prompt + new_tokens(world.reference, world)
    runs, calls = [], []
    handle = world.target.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        for _ in range(2):
            del calls[:]  # a fresh head: its corruption draws from its own generator
            head = tiny.OracleHead(world.target, reference, block_size=8, corrupt_rate=0.3)
            out, stats = glance.generate(
                head, world.target, world.input_ids, N_NEW, budget="auto", branch_k=4,
                positions=world.positions, return_stats=True, costs=VerifyCosts(fixed=fixed),
            )  # fmt: skip
            assert len(calls) == 1 + len(stats.rounds)  # prefill and one pass a round
            runs.append((new_tokens(out, world), [r.tree_size for r in stats.rounds]))
    finally:
        handle.remove()
    assert runs[0] == runs[1] and runs[0][0] == expected(world)


def test_budget_must_be_positive_or_auto(world):
    with pytest.raises(ValueError, match="auto"):
        glance.generate(world.head, world.target, world.input_ids, 4, budget="wide")


def test_round_entropies_are_the_targets_at_each_root(world, monkeypatch):
    # Entropies are reduced in batches (and after the timed window); make the
    # batch small so that both the in-loop flush and the final one are exercised.
    from glance.decoding import loop as decode

    monkeypatch.setattr(decode._Entropies, "BATCH", 3)
    n = 12
    ref = world.reference[:, : world.input_ids.shape[1] + n]
    kwargs = dict(world.hf_kwargs)
    if "mm_token_type_ids" in kwargs:  # the generated tokens are text
        types = kwargs["mm_token_type_ids"]
        kwargs["mm_token_type_ids"] = torch.cat([types, types.new_zeros(1, n)], dim=1)
    with torch.no_grad():
        logits = world.target(input_ids=ref, **kwargs).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    want = (-(logp.exp() * logp).sum(-1)).tolist()  # want[j]: entropy after token j
    first = world.input_ids.shape[1]  # greedy round i decodes token first + i + 1
    _, greedy = glance.greedy_generate(
        world.target, world.input_ids, n, positions=world.positions, return_stats=True
    )
    got = [r.entropy for r in greedy.rounds]
    assert got == pytest.approx(want[first : first + len(got)], rel=1e-6, abs=1e-9)
    _, tree = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        n,
        positions=world.positions,
        return_stats=True,
    )
    root = first  # the first round's root is the prefill's token, at index first
    for r in tree.rounds:
        assert r.entropy == pytest.approx(want[root], rel=1e-6, abs=1e-9)
        root += r.committed


def test_a_rounds_stop_reads_the_tree_it_walked():
    """``_stop`` on a tree whose spine was extended past the block: a walk that
    ends on the spine's old leaf meets the extension's child (a rejection); one
    that ends on a childless side node ran out of candidates (a leaf)."""
    import numpy as np

    from glance.core.tree import CandidateTree
    from glance.decoding.loop import _stop

    parents = np.array([-1, 0, -1, 1])  # node 3: the extension, under the spine leaf 1
    tree = CandidateTree(np.arange(4), parents, np.array([1, 2, 1, 3]), np.zeros(4))
    assert _stop(tree, np.array([0, 1]), cap=7, committed=3) == "rejection"
    assert _stop(tree, np.array([2]), cap=7, committed=2) == "leaf"
    assert _stop(tree, np.array([0, 1, 3]), cap=3, committed=4) == "depth"
    assert _stop(tree, np.array([0, 1]), cap=7, committed=2) == "end"
    assert _stop(tree, np.array([], dtype=np.int64), cap=7, committed=1) == "rejection"


@pytest.mark.parametrize("window", [1, 4, 16])
def test_a_draft_window_keeps_the_output_and_bounds_the_heads_cache(world, window, monkeypatch):
    """With ``draft_window`` the head attends to the latest positions only:
    the drafts change, the output is greedy's, and the head's cache never
    holds more than the window between passes."""
    from glance.drafters.block import BlockDrafter

    seen = []
    propose = BlockDrafter.propose

    def watch(self, *args):
        out = propose(self, *args)
        seen.append((len(self.cache), self.dropped))
        return out

    monkeypatch.setattr(BlockDrafter, "propose", watch)
    out = glance.generate(
        world.head, world.target, world.input_ids, N_NEW, positions=world.positions,
        draft_window=window,
    )  # fmt: skip
    assert new_tokens(out, world) == expected(world)
    assert seen and all(n <= window for n, _ in seen)
    assert seen[-1][1] > 0  # positions were dropped: the prompt alone is past every window


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_a_bad_draft_window_is_named(world, bad):
    with pytest.raises(ValueError, match="draft_window must be None or an int >= 1"):
        glance.generate(
            world.head, world.target, world.input_ids, 4, positions=world.positions,
            draft_window=bad,
        )  # fmt: skip
