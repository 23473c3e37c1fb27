"""Sampling at temperature > 0: the decoders draw exactly from the target.

Two kinds of evidence:
- coupling: with one seed, every decoder gives the same text as plain
  autoregressive sampling (output token ``i`` uses uniform ``i``), on all four
  target classes, with deep and sideways accepts (float64);
- exactness: on a target with an 8-token vocabulary, the distribution of the
  first three tokens is computed by enumeration, and 6,000 seeded samples from
  ``greedy_generate`` and from ``generate`` pass a chi-square test against it,
  while a deliberately wrong walk fails the same test.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import KINDS
from scipy import stats

import glance
import glance.decoding.loop
from glance import testing as tiny
from glance.decoding.sampling import Sampling, Uniforms, draw

N_NEW = 40
SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.7, top_k=20),
    dict(temperature=1.3, top_p=0.8),
]


def reference_probs(logits, temperature, top_k=0, top_p=1.0):
    """The processed distribution, written out independently of transformers."""
    z = logits.double() / temperature
    if top_k:
        kth = z.topk(top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, -float("inf"))
    p = torch.softmax(z, dim=-1)
    if top_p < 1:
        sp, order = p.sort(dim=-1, descending=True)
        keep = (sp.cumsum(-1) - sp) < top_p  # the mass strictly above stays under top_p
        p = torch.zeros_like(p).scatter(-1, order, sp * keep)
        p = p / p.sum(-1, keepdim=True)
    return p


@pytest.mark.parametrize(
    "settings",
    [dict(temperature=0.5), dict(temperature=1.0, top_k=5), dict(temperature=2.0, top_p=0.6)]
    + [dict(temperature=0.8, top_k=30, top_p=0.9)],
)
def test_processed_distribution_matches_the_reference(settings):
    logits = torch.randn(16, 96, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = Sampling(**settings).probs(logits)
    torch.testing.assert_close(got, reference_probs(logits, **settings), rtol=1e-12, atol=1e-15)


def test_draw_is_the_inverse_cdf_and_never_picks_a_zero():
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0]] * 4, dtype=torch.float64)
    u = torch.tensor([0.0, 0.2499, 0.25, 0.999999], dtype=torch.float64)
    assert draw(probs, u).tolist() == [1, 1, 3, 3]
    # float32 rows that sum a little off 1 are scaled to their own total
    wide = torch.softmax(torch.randn(200, 1000, generator=torch.Generator().manual_seed(1)), -1)
    picks = draw(wide, torch.rand(200, dtype=torch.float64))
    assert bool((wide[torch.arange(200), picks] > 0).all())


def test_uniforms_peek_then_advance():
    stream = Uniforms(torch.Generator().manual_seed(3))
    first = stream.peek(5).clone()
    assert torch.equal(stream.peek(3), first[:3])  # peeking uses nothing up
    stream.advance(2)
    assert torch.equal(stream.peek(3), first[2:5])
    stream.advance(200)  # past the chunk: more are drawn, none repeat
    assert stream.peek(1).item() not in first.tolist()


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.5), "top_k"),
    ],
)
def test_bad_sampling_settings_are_refused(world, bad, field):
    with pytest.raises(ValueError, match=field):
        glance.generate(world.head, world.target, world.input_ids, 4, **bad)
    with pytest.raises(ValueError, match=field):
        glance.greedy_generate(world.target, world.input_ids, 4, **bad)


def test_temperature_zero_is_greedy_and_draws_nothing(world):
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    kw = dict(positions=world.positions)
    for out in (
        glance.generate(world.head, world.target, world.input_ids, 32, generator=g, **kw),
        glance.generate(
            world.head, world.target, world.input_ids, 32, temperature=0.0, top_k=3, **kw
        ),
        glance.chain_generate(world.head, world.target, world.input_ids, 32, generator=g, **kw),
        glance.greedy_generate(world.target, world.input_ids, 32, generator=g, **kw),
    ):
        assert (
            out[0, world.input_ids.shape[1] :].tolist()
            == (world.reference[0, world.input_ids.shape[1] :].tolist()[:32])
        )
    assert torch.equal(g.get_state(), state)


def sampled(world, seed, settings, n=N_NEW, stops=None):
    g = torch.Generator().manual_seed(seed)
    out = glance.greedy_generate(
        world.target,
        world.input_ids,
        n,
        positions=world.positions,
        stop_token_ids=stops,
        generator=g,
        **settings,
    )
    return out[0, world.input_ids.shape[1] :].tolist()


# The quick run keeps one target kind per setting; CI runs every pair.
QUICK = {("qwen3_vl", 0), ("qwen3", 1), ("qwen3_vl", 2)}
COUPLING = [
    pytest.param(
        kind,
        settings,
        id=f"{kind}-settings{i}",
        marks=() if (kind, i) in QUICK else pytest.mark.slow,
    )
    for kind in KINDS
    for i, settings in enumerate(SETTINGS)
]


@pytest.mark.parametrize(("world", "settings"), COUPLING, indirect=["world"])
def test_every_decoder_couples_to_autoregressive_sampling(world, settings):
    """Same seed, same text: tree (several shapes, and auto), chain, random head."""
    kw = dict(positions=world.positions, **settings)
    for seed in range(4):
        want = sampled(world, seed, settings)
        assert len(set(want)) >= 4
        runs = {
            "chain": lambda g: glance.chain_generate(
                world.head, world.target, world.input_ids, N_NEW, generator=g, **kw
            ),
        }
        for budget, branch_k in [(1, 1), (7, 3), (63, 8), ("auto", 8)]:
            runs[f"tree {budget}/{branch_k}"] = lambda g, b=budget, k=branch_k: glance.generate(
                world.head,
                world.target,
                world.input_ids,
                N_NEW,
                budget=b,
                branch_k=k,
                generator=g,
                **kw,
            )
        for name, run in runs.items():
            out = run(torch.Generator().manual_seed(seed))
            assert out[0, world.input_ids.shape[1] :].tolist() == want, (name, seed)


@pytest.mark.parametrize("corrupt", [(), (2, 5)])
def test_sampled_walk_accepts_deep_and_sideways(world, corrupt):
    """A head rigged toward the sampled text: long accepts, and with corrupt
    offsets the sampled token sits second among its siblings."""
    settings = dict(temperature=1.0)
    want = sampled(world, 11, settings, n=48)
    reference = world.input_ids[0].tolist() + want
    head = tiny.OracleHead(world.target, reference, block_size=8, corrupt=corrupt)
    out, st = glance.generate(
        head,
        world.target,
        world.input_ids,
        48,
        budget=20,
        branch_k=2,
        positions=world.positions,
        generator=torch.Generator().manual_seed(11),
        return_stats=True,
        **settings,
    )
    assert out[0, world.input_ids.shape[1] :].tolist() == want
    assert max(r.accepted for r in st.rounds) == 7
    assert st.tau > 4


def test_sampling_stops_and_caps(world):
    settings = dict(temperature=1.0)
    free = sampled(world, 5, settings)
    stop = free[N_NEW // 2]
    want = sampled(world, 5, settings, stops=[stop])
    assert want[-1] == stop and len(want) <= N_NEW // 2 + 1
    out = glance.generate(
        world.head,
        world.target,
        world.input_ids,
        N_NEW,
        positions=world.positions,
        stop_token_ids=[stop],
        generator=torch.Generator().manual_seed(5),
        **settings,
    )
    assert out[0, world.input_ids.shape[1] :].tolist() == want


# --- exactness by enumeration ------------------------------------------------

V = 8  # tiny vocabulary: 512 outcomes for three tokens
PROMPT = torch.tensor([[1, 2, 3, 4]])
EXACT_SETTINGS = dict(temperature=0.9, top_k=7, top_p=0.97)
# 6,000 keep over 100 cells at 5 or more expected counts; the wrong walk below
# fails at p = 0 (float64) already at 2,000.
SAMPLES = 6_000


@pytest.fixture(scope="module")
def small():
    # One thread: these tensors are tiny, and a second thread only adds overhead.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = tiny.build_target("qwen3", vocab=V, hidden=16, layers=2, std=0.3)
    head = tiny.build_head(target, block_size=4, mask=V - 1)
    yield target, head
    torch.set_num_threads(threads)


def exact_first_three(target, settings) -> np.ndarray:
    """``(V, V, V)``: P(y1, y2, y3) by enumerating every two-token prefix."""
    pairs = torch.tensor(list(itertools.product(range(V), repeat=2)))
    ids = torch.cat([PROMPT.expand(len(pairs), -1), pairs], dim=1)
    with torch.no_grad():
        logits = target(input_ids=ids).logits
    n = PROMPT.shape[1]
    p1 = reference_probs(logits[0, n - 1], **settings)
    p2 = reference_probs(logits[::V, n], **settings)  # rows a*V: prefix (a, 0) -> P(. | a)
    p3 = reference_probs(logits[:, n + 1], **settings).reshape(V, V, V)
    joint = p1[:, None, None] * p2[:, :, None] * p3
    return joint.numpy()


def chi_square(samples: np.ndarray, joint: np.ndarray) -> float:
    """p-value of the samples' cell counts against ``joint``; cells expected
    below 5 are pooled into one bin."""
    counts = np.bincount(samples @ np.array([V * V, V, 1]), minlength=V**3).astype(float)
    expected = joint.reshape(-1) * len(samples)
    if counts[expected == 0].sum():
        return 0.0  # a sample the target gives probability 0
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    exp = exp[keep] * obs[keep].sum() / exp[keep].sum()
    return float(stats.chisquare(obs[keep], exp).pvalue)


def draw_samples(run, seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return np.array([run(g)[0, PROMPT.shape[1] :].tolist() for _ in range(SAMPLES)])


def tree_run(target, head):
    # branch_k = V and budget 72 = 8 + 64: every path of depth <= 2 is drafted,
    # so the walk always accepts two tokens and the third is the bonus.
    return lambda g: glance.generate(
        head, target, PROMPT, 3, budget=72, branch_k=V, generator=g, **EXACT_SETTINGS
    )


@pytest.mark.slow
def test_exact_distribution_is_spread(small):
    joint = exact_first_three(small[0], EXACT_SETTINGS)
    assert abs(joint.sum() - 1) < 1e-9
    # many outcomes, none dominant: a test with power
    assert (joint * SAMPLES >= 5).sum() >= 100 and joint.max() < 0.1


@pytest.mark.slow
def test_autoregressive_sampling_is_exact(small):
    target, _ = small
    samples = draw_samples(
        lambda g: glance.greedy_generate(target, PROMPT, 3, generator=g, **EXACT_SETTINGS), 2026
    )
    assert chi_square(samples, exact_first_three(target, EXACT_SETTINGS)) > 1e-3


@pytest.mark.slow
def test_tree_sampling_is_exact(small):
    target, head = small
    # Another seed than the autoregressive test's: with the same one the coupled
    # decoders would draw the very same samples.
    samples = draw_samples(tree_run(target, head), 2027)
    assert chi_square(samples, exact_first_three(target, EXACT_SETTINGS)) > 1e-3


@pytest.mark.slow
def test_a_wrong_walk_fails_the_same_test(small, monkeypatch):
    """Descending to the child the target finds most probable, instead of the
    child its draw lands on, skews the output; the test must see it."""

    def most_probable_child(tree, logits, sampling, uniforms):
        probs = sampling.probs(logits)
        path, node = [], -1
        while True:
            children = np.flatnonzero(tree.parents == node)
            if not children.size:
                break
            row = probs[node + 1, tree.tokens[children]]
            node = int(children[int(row.argmax())])
            path.append(node)
        u = uniforms.peek(len(path) + 1)[len(path) :]
        bonus = int(draw(probs[node + 1][None], u)[0])
        uniforms.advance(len(path) + 1)
        return np.array(path, dtype=np.int64), bonus

    target, head = small
    monkeypatch.setattr(glance.decoding.loop, "walk", most_probable_child)
    samples = draw_samples(tree_run(target, head), 2027)
    assert chi_square(samples, exact_first_three(target, EXACT_SETTINGS)) < 1e-8
