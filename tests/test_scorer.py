"""The causal consistency scorer: an untrained one ranks paths as the product
of marginals; any one keeps the tree prefix-closed and the output lossless;
the host-side tree search scores as the model does; training lowers its
held-out loss below the marginals', deterministically."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from glance.core.tree import build_budget_tree
from glance.drafters.scored import ScoredBlockDrafter, ScorerTables, scored_tree


def _table(rng, depth, k, vocab=50, rank=4):
    ids = np.stack([rng.choice(vocab, size=k, replace=False) for _ in range(depth)])
    lp = np.sort(np.log(rng.dirichlet(np.ones(vocab + 5), size=depth)[:, :k]), axis=1)[:, ::-1]
    gates = 1.0 + rng.normal(size=(depth, rank))
    successors = rng.normal(size=(depth, k, rank))
    tables = ScorerTables(rng.normal(size=(vocab, rank)), rng.normal(size=(rank, rank)) / rank)
    return ids, np.ascontiguousarray(lp), gates, successors, tables


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 6), k=st.integers(1, 5),
       budget=st.integers(1, 40))  # fmt: skip
def test_with_no_pair_term_the_tree_is_the_budget_tree(seed, depth, k, budget):
    ids, lp, gates, s, tables = _table(np.random.default_rng(seed), depth, k)
    mine = scored_tree(ids, lp, gates, np.zeros_like(s), tables, root=0, budget=budget)
    ref = build_budget_tree(ids, lp, budget, k)
    assert mine.tokens.tolist() == ref.tokens.tolist()
    assert mine.parents.tolist() == ref.parents.tolist()
    assert np.allclose(mine.logprobs, ref.logprobs, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 6), k=st.integers(1, 5),
       budget=st.integers(1, 40))  # fmt: skip
def test_any_pair_term_keeps_the_tree_prefix_closed_and_best_first(seed, depth, k, budget):
    ids, lp, gates, s, tables = _table(np.random.default_rng(seed), depth, k)
    tree = scored_tree(ids, lp, gates, 3.0 * s, tables, root=7, budget=budget)
    assert len(tree) == min(budget, sum(k**d for d in range(1, depth + 1)))
    for i in range(len(tree)):
        p = int(tree.parents[i])
        assert p < i  # parents first
        assert tree.depths[i] == (1 if p < 0 else tree.depths[p] + 1) <= depth
        assert tree.logprobs[i] <= (0.0 if p < 0 else tree.logprobs[p]) + 1e-12
    assert (np.diff(tree.logprobs) <= 1e-12).all()  # kept best first
    children = {}
    for i in range(len(tree)):
        key = int(tree.parents[i])
        assert int(tree.tokens[i]) not in children.setdefault(key, set())
        children[key].add(int(tree.tokens[i]))


def test_the_state_reranks_by_the_path():
    """Two offsets, two candidates each; the state makes 'b' follow 'x' and
    'a' follow 'y', against marginals that prefer 'a' everywhere."""
    ids = np.array([[10, 11], [20, 21]])  # x=10, y=11; a=20, b=21
    lp = np.log(np.array([[0.6, 0.4], [0.6, 0.4]]))
    gates = np.ones((2, 1))
    successors = np.array([[[0.0], [0.0]], [[-4.0], [4.0]]])  # a: -4, b: +4 per unit of state
    embed = np.zeros((30, 1))
    embed[10] = 3.0  # after x the state is near +1: favour b
    embed[11] = -3.0  # after y, near -1: favour a
    tree = scored_tree(
        ids, lp, gates, successors, ScorerTables(embed, np.zeros((1, 1))), root=0, budget=6
    )
    best_child = {}
    for i, p in enumerate(tree.parents.tolist()):
        if p >= 0:
            best_child.setdefault(int(tree.tokens[p]), int(tree.tokens[i]))  # packed best first
    assert best_child == {10: 21, 11: 20}


def test_the_tree_search_scores_as_the_model_does():
    """Each node's score in the host-side search equals the sum of the model's
    step scores along its path, computed by the torch model in one batch."""
    from glance.heads.scorer import CausalScorer, ScorerConfig, step_scores

    torch.manual_seed(0)
    depth, k, vocab, hidden = 4, 3, 40, 6
    scorer = CausalScorer(ScorerConfig(hidden_size=hidden, vocab_size=vocab, rank=5, top_k=k))
    with torch.no_grad():
        scorer.successor.weight.normal_(0.0, 1.0)
        scorer.recurrence.weight.normal_(0.0, 0.5)
        scorer.hidden_projection.weight.normal_(0.0, 0.5)
    h = torch.randn(depth, hidden, dtype=torch.float64)
    ids = torch.stack([torch.randperm(vocab)[:k] for _ in range(depth)])
    lp = torch.log_softmax(torch.randn(depth, vocab, dtype=torch.float64), -1).gather(1, ids)
    lp, order = lp.sort(dim=1, descending=True)
    ids = ids.gather(1, order)
    scorer = scorer.double()
    with torch.no_grad():
        gates = 1.0 + scorer.hidden_projection(h)
        successors = scorer.successor(ids).numpy()
        tables = ScorerTables.of(scorer)
        tree = scored_tree(
            ids.numpy(), lp.numpy(), gates.numpy(), successors, tables, root=5, budget=25
        )
        for i in range(len(tree)):
            path, j = [], i
            while j >= 0:
                path.append(int(tree.tokens[j]))
                j = int(tree.parents[j])
            path = path[::-1]
            d = len(path)
            previous = torch.tensor([5, *path[:-1]])
            pair = scorer.pair(h[:d], previous, ids[:d])
            steps = step_scores(lp[:d], pair)
            chosen = [int((ids[t] == path[t]).nonzero()) for t in range(d)]
            want = float(sum(steps[t, c] for t, c in enumerate(chosen)))
            assert abs(tree.logprobs[i] - want) < 1e-9


@pytest.fixture(scope="module")
def scorer_for(request):
    from glance.heads.scorer import build_scorer

    def make(world, scale=0.5):
        scorer = build_scorer(world.head, world.target, rank=4, top_k=4, seed=3)
        with torch.no_grad():
            scorer.successor.weight.normal_(0.0, scale)  # a scorer that reranks
        return scorer.to(world.target.dtype)

    return make


def test_decoding_with_a_scorer_is_lossless(world, scorer_for):
    from glance.decoding.loop import Options, speculate

    drafter = ScoredBlockDrafter(world.head, world.target, scorer_for(world))
    n = world.reference.shape[1] - world.input_ids.shape[1]
    out = speculate(drafter, world.target, world.input_ids, Options(n, 15),
                    positions=world.positions)  # fmt: skip
    assert torch.equal(out, world.reference)


def test_generate_takes_a_scorer_and_stays_lossless(world, scorer_for):
    import glance

    n = world.reference.shape[1] - world.input_ids.shape[1]
    out = glance.generate(world.head, world.target, world.input_ids, n, budget=15,
                          positions=world.positions, scorer=scorer_for(world))  # fmt: skip
    assert torch.equal(out, world.reference)


def test_a_scorer_takes_a_fixed_budget_only(world, scorer_for):
    import glance
    from glance.decoding.loop import Options, speculate

    drafter = ScoredBlockDrafter(world.head, world.target, scorer_for(world))
    with pytest.raises(ValueError, match="budget must be an int"):
        speculate(drafter, world.target, world.input_ids, Options(8, "auto"),
                  positions=world.positions)  # fmt: skip
    for bad in ({"budget": "auto"}, {"budget": 15, "extend_budget": 8}):
        with pytest.raises(ValueError, match="scorer: the consistency scorer's tree takes a fixed"):
            glance.generate(world.head, world.target, world.input_ids, 8,
                            positions=world.positions, scorer=scorer_for(world), **bad)  # fmt: skip


def test_a_scorer_of_another_width_is_refused(world):
    from glance.heads.scorer import CausalScorer, ScorerConfig

    text = world.target.config.get_text_config()
    bad = CausalScorer(ScorerConfig(hidden_size=7, vocab_size=text.vocab_size))
    with pytest.raises(ValueError, match="scorer hidden_size is 7"):
        ScoredBlockDrafter(world.head, world.target, bad)


def test_a_scorer_saves_and_loads_strictly(world, scorer_for, tmp_path):
    from glance.heads.scorer import load_scorer

    scorer = scorer_for(world)
    scorer.save_pretrained(tmp_path / "s")
    back = load_scorer(tmp_path / "s", world.head, world.target)
    for (name, a), (_, b) in zip(scorer.state_dict().items(), back.state_dict().items(),
                                 strict=True):  # fmt: skip
        assert torch.equal(a, b), name
    (tmp_path / "s" / "model.safetensors").write_bytes(b"\0" * 8)
    with pytest.raises(ValueError, match="model.safetensors"):
        load_scorer(tmp_path / "s")


TRAIN = """
import json, sys, hashlib
import torch
from glance.core.numerics import Numerics, pin
pin(Numerics(threads=1), reexec=True)
torch.set_num_threads(1)
from glance.targets.vl import load_target
from glance.toy.world import toy_corpus
from glance.training.block import HeadConfig, train_head
from glance.training.scorer import ScorerTrain, train_scorer
target, processor = load_target("{toy}", dtype=torch.float32)
seqs, probe, _ = toy_corpus(target, processor, greedy=8, sampled=8, heldout=4, seed=0,
                            max_new_tokens=48, long_share=0.0, context=0)
head, _ = train_head(target, seqs, 3, HeadConfig(block_size=8, layers=1, steps=60, seed=0),
                     progress=False)
scorer, log = train_scorer(head, target, seqs, ScorerTrain(rank=8, top_k=4, steps=60, rows=4),
                           heldout=probe, eval_every=20, progress=False)
state = b"".join(v.numpy().tobytes() for v in scorer.state_dict().values())
print(json.dumps({{"sha": hashlib.sha256(state).hexdigest(), "curve": log["heldout_curve"],
                   "marginal": log["marginal_heldout_loss"]}}))
"""


@pytest.mark.slow
def test_training_lowers_the_heldout_loss_below_the_marginals_and_reproduces():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", TRAIN.format(toy=root / "models" / "toy-target")]
    runs = []
    for _ in range(2):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    a, b = runs
    assert a == b  # deterministic: the same weights and curve
    assert a["curve"][-1][1] < a["marginal"]


@pytest.mark.parametrize("world", ["qwen3"], indirect=True)
def test_heldout_rows_with_no_candidate_answer_are_left_out_of_the_loss(world):
    """A held-out row whose answer is never among the head's top ``K`` has no
    in-candidate loss; it is left out of the held-out mean (with a warning)
    rather than counted as a loss of 0."""
    from glance.training.block import Rows, Sequence, _heldout_rows
    from glance.training.scorer import ScorerTrain, _weight, train_scorer

    target, head = world.target, world.head
    prompt = world.input_ids[0]
    settings_ = ScorerTrain(rank=4, top_k=2, steps=1, rows=2, blocks_per_row=2)
    gamma = 7.0 * int(head.block_size) / 16
    layers = list(head.target_layer_ids)
    found = {}  # constant answers: one the head's top 2 meet somewhere, one they never do
    for token in range(int(target.config.get_text_config().vocab_size)):
        seq = Sequence(torch.cat([prompt, torch.full((24,), token)]), prompt.shape[0])
        probe = _heldout_rows(target, Rows([seq]), layers, 2)
        found.setdefault(bool(_weight(head, target, probe, gamma, 2) > 0), seq)
        if len(found) == 2:
            break
    assert len(found) == 2, found.keys()
    own, missed = found[True], found[False]

    def heldout_loss(heldout):
        _, log = train_scorer(head, target, [own], settings_, heldout=heldout, progress=False)
        return log["marginal_heldout_loss"], log.get("heldout_curve", [])

    alone = heldout_loss([own])
    assert alone[0] is not None and alone[0] > 0
    with pytest.warns(UserWarning, match="1 of 2 held-out rows"):
        both = heldout_loss([own, missed])
    assert both == alone
    with pytest.warns(UserWarning, match="1 of 1 held-out rows"):
        assert heldout_loss([missed]) == (None, [])


def test_a_scorer_is_refused_behind_another_head(checkpoints, tmp_path):
    """Issue 42: a scorer trained behind head A was used with head B."""
    from glance import load_block_head
    from glance import testing as tiny
    from glance.heads.scorer import build_scorer, load_scorer
    from glance.targets.vl import load_target

    target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float32)
    head = load_block_head(checkpoints["qwen3"][1], target=target)
    build_scorer(head, target, rank=4, top_k=4).save_pretrained(tmp_path / "scorer")
    load_scorer(tmp_path / "scorer", head, target)  # its own head: fine
    other = tiny.build_head(target, seed=7).to(torch.float32)
    with pytest.raises(ValueError, match=r"scorer was trained behind head \w{12}, not this head"):
        load_scorer(tmp_path / "scorer", other, target)
