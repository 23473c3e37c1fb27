"""The EAGLE-3-style head: its tree is lossless, training matches drafting,
and it loads strictly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from glance import testing as tiny
from glance.decoding.loop import Options, generate, greedy_generate, speculate
from glance.drafters.eagle import EagleDrafter
from glance.drafters.protocol import Drafter, Extends
from glance.heads.eagle import build_eagle_head, check_eagle_fits, load_eagle_head
from glance.targets.vl import StreamPositions
from glance.training.block import Sequence, sequence_features
from glance.training.eagle import EagleTrainConfig, train_eagle_head, ttt_steps

N_NEW = 64


def _generate(drafter, world, n=N_NEW, **kw):
    return generate(
        drafter,
        world.target,
        world.input_ids,
        n,
        positions=world.positions,
        return_stats=True,
        **kw,
    )


def _positions(world, length):
    """The world's positions for a sequence of ``length`` that starts with its
    prompt (response tokens are text, whatever their ids)."""
    from glance.targets.vl import VisionPositions

    p = world.positions
    if p is None:
        return StreamPositions()
    types = torch.zeros(1, length, dtype=p.mm_token_type_ids.dtype)
    types[:, : p.mm_token_type_ids.shape[1]] = p.mm_token_type_ids
    return VisionPositions(p.pixel_values, p.image_grid_thw, types)


def _overfit(world, steps=150):
    """A head trained on the world's own greedy answer (so it drafts deep)."""
    ids = world.reference[0]
    seq = Sequence(ids, world.input_ids.shape[1], _positions(world, len(ids)))
    cfg = EagleTrainConfig(steps=steps, rows=4, window=8, ttt=4, lr=3e-3)
    head, log = train_eagle_head(world.target, [seq], cfg, progress=False)
    return head, log


def test_the_eagle_drafter_is_a_tree_drafter(world):
    drafter = EagleDrafter(build_eagle_head(world.target), world.target)
    assert isinstance(drafter, Drafter) and not isinstance(drafter, Extends)
    assert drafter.max_depth == 8


@pytest.mark.parametrize("budget", [1, 7, 32])
def test_a_random_eagle_tree_is_lossless(world, budget):
    head = build_eagle_head(world.target, seed=3).to(world.target.dtype)
    out, stats = _generate(EagleDrafter(head, world.target, width=4), world, budget=budget)
    assert torch.equal(out, world.reference[:, : out.shape[1]])
    assert all(r.tree_size <= budget for r in stats.rounds)


def test_passes_by_window_end_give_one_padded_pass_s_loss_and_gradients(world, monkeypatch):
    """Rows run in groups by how far their window reaches: the loss and
    gradients of one pass over every row, padded to the longest."""
    import glance.training.eagle as eagle

    head = build_eagle_head(world.target, seed=5).to(world.target.dtype)
    ids = world.reference[0]
    prompt = world.input_ids.shape[1]
    seq = Sequence(ids, prompt, _positions(world, len(ids)))
    feats = sequence_features(world.target, seq, head.target_layer_ids)
    # windows near the end: some steps run past the sequence for some rows only
    starts = [prompt, prompt + 5, len(ids) - 9, prompt + 2, len(ids) - 6]
    rows = [(feats, ids, s) for s in starts]

    def loss_and_grads(group):
        monkeypatch.setattr(eagle, "GROUP_ROWS", group)
        head.zero_grad()
        loss = eagle.eagle_loss(head, world.target, rows, 4, 3, 0.8)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in head.parameters() if p.grad is not None]

    whole, whole_grads = loss_and_grads(len(rows))
    for group in (1, 2):
        loss, grads = loss_and_grads(group)
        torch.testing.assert_close(loss, whole, rtol=1e-6, atol=0)
        for g, w in zip(grads, whole_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # hundreds of training steps
def test_a_trained_eagle_tree_accepts_deep_and_stays_lossless(world):
    head, log = _overfit(world)
    assert log["final_loss"] < 1.0
    for width, budget in ((1, 8), (4, 32), (8, 32)):
        drafter = EagleDrafter(head, world.target, width=width)
        out, stats = _generate(drafter, world, budget=budget)
        assert torch.equal(out, world.reference[:, : out.shape[1]]), (width, budget)
        assert stats.tau > 3.0, (width, budget, stats.tau)
        assert max(r.accepted for r in stats.rounds) >= 4
        assert all(r.draft_ms > 0 and r.tree_size <= budget for r in stats.rounds)


def test_training_sees_what_drafting_sees(world):
    """The training-time test's logits at steps 0 and 1 equal the drafter's at
    depths 1 and 2 along the true path: same features, positions and mask."""
    head = build_eagle_head(world.target, seed=5).to(world.target.dtype)
    ids = world.reference[0]
    prompt = world.input_ids.shape[1]
    anchor = prompt + 3
    seq = Sequence(ids, prompt, _positions(world, len(ids)))
    feats = sequence_features(world.target, seq, head.target_layer_ids)
    with torch.no_grad():
        steps = {
            j: (torch.log_softmax(lg, -1)[0, 0], int(lb[0, 0]))
            for j, lg, lb, _ in ttt_steps(head, world.target, [(feats, ids, anchor)], 1, 2)
        }
    # Drafting: the cache holds tokens 0..anchor, the root is anchor + 1.
    length = anchor + 1
    kwargs, _ = _positions(world, length).prefill(world.target, ids[None, :length])
    out = world.target(input_ids=ids[None, :length], output_hidden_states=True, **kwargs)
    vocab = world.target.config.get_text_config().vocab_size
    drafter = EagleDrafter(head, world.target, width=vocab, depth=2)
    drafter.start(out.hidden_states, ids[None, :length])
    tree = drafter.draft_tree(int(ids[length]), length, 2, vocab + vocab * vocab)
    first = np.flatnonzero((tree.depths == 1) & (tree.tokens == steps[0][1]))[0]
    assert tree.logprobs[first] == pytest.approx(float(steps[0][0][steps[0][1]]), abs=1e-9)
    child = np.flatnonzero((tree.parents == first) & (tree.tokens == steps[1][1]))[0]
    step1 = tree.logprobs[child] - tree.logprobs[first]
    assert step1 == pytest.approx(float(steps[1][0][steps[1][1]]), abs=1e-9)


@pytest.mark.slow  # hundreds of training steps
def test_training_is_reproducible_and_converges_on_held_out_data():
    target = tiny.build_target("qwen3", dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    seqs = []
    for _ in range(24):
        prompt = torch.randint(0, 80, (1, 8), generator=g)
        seqs.append(Sequence(greedy_generate(target, prompt, 40)[0], 8))
    cfg = EagleTrainConfig(steps=200, rows=8, window=8, ttt=3)
    a, log_a = train_eagle_head(
        target, seqs[:20], cfg, heldout=seqs[20:], eval_every=100, progress=False
    )
    b, _ = train_eagle_head(
        target, seqs[:20], cfg, heldout=seqs[20:], eval_every=100, progress=False
    )
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    curve = log_a["heldout_curve"]
    assert [s for s, _ in curve] == [0, 100, 200]
    assert curve[-1][1] < 0.85 * curve[0][1]


def test_save_and_strict_load(world, tmp_path):
    head = build_eagle_head(world.target, seed=1).to(world.target.dtype)
    head.save_pretrained(tmp_path / "eagle")
    loaded = load_eagle_head(tmp_path / "eagle", target=world.target)
    for (name, x), (_, y) in zip(
        head.state_dict().items(), loaded.state_dict().items(), strict=True
    ):
        assert torch.equal(x, y), name
    # and computes as the head it was saved from, RoPE included (no weight holds it)
    x = torch.randn(1, 5, head.config.hidden_size, dtype=world.target.dtype)
    at = torch.arange(3, 8)[None]
    for mine, theirs in zip(head.qkv(x, x, at), loaded.qkv(x, x, at), strict=True):
        assert torch.equal(mine, theirs)
    from safetensors.torch import load_file, save_file

    weights = tmp_path / "eagle" / "model.safetensors"
    state = load_file(weights)
    state.pop("fc.weight")
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing \['fc.weight'\]"):
        load_eagle_head(tmp_path / "eagle", target=world.target)


def test_a_head_for_another_target_is_refused(world, tmp_path):
    head = build_eagle_head(world.target)
    config = json.loads(head.config.to_json_string())
    head.config.hidden_size = config["hidden_size"] * 2
    with pytest.raises(ValueError, match="hidden_size is .* but the target's is"):
        check_eagle_fits(head, world.target)


def test_a_tree_drafter_refuses_auto_budget_and_extension(world):
    drafter = EagleDrafter(build_eagle_head(world.target), world.target)
    for bad, why in (
        (dict(budget="auto"), "grows its own tree"),
        (dict(extend_budget=8), "no extend"),
    ):
        for n in (16, 1):  # a one-token answer has no round, and is refused all the same
            options = Options(n, **{"budget": 8, **bad})
            with pytest.raises(ValueError, match=why):
                speculate(
                    drafter, world.target, world.input_ids, options, positions=world.positions
                )


@pytest.mark.slow  # hundreds of training steps
def test_a_trained_eagle_tree_samples_exactly(world):
    head, _ = _overfit(world, steps=60)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    out, stats = _generate(
        EagleDrafter(head, world.target, width=4),
        world,
        budget=16,
        temperature=0.8,
        top_p=0.9,
        generator=g1,
    )
    want = greedy_generate(
        world.target,
        world.input_ids,
        N_NEW,
        positions=world.positions,
        temperature=0.8,
        top_p=0.9,
        generator=g2,
    )
    assert out.tolist() == want.tolist()
    assert stats.tau > 1.0


def test_every_training_seed_is_scored_on_one_probe(world, monkeypatch):
    from glance.training import eagle

    probes = []

    def capture(head, cfg, batch_loss, row_loss, probe, **kw):
        probes.append([(ids.tolist(), start) for _, ids, start in probe])
        return {}

    monkeypatch.setattr(eagle, "fit", capture)
    ids = world.reference[0]
    seq = Sequence(ids, world.input_ids.shape[1], _positions(world, len(ids)))
    for seed in (0, 1):
        cfg = EagleTrainConfig(steps=1, rows=2, window=4, ttt=2, seed=seed, heldout_window=4)
        train_eagle_head(world.target, [seq], cfg, heldout=[seq] * 6, progress=False)
    assert probes[0] == probes[1] and len(probes[0]) == 6
