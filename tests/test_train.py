"""Head training: no context leak at the anchor, no label shift, and a trained
head that decodes losslessly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import glance
from glance import testing as tiny
from glance.targets.vl import load_target
from glance.training.block import (
    HeadConfig,
    Sequence,
    block_logits,
    block_mask,
    build_head,
    head_loss,
    pack_blocks,
    sample_anchors,
    sequence_features,
    train_head,
)

B = 6


@pytest.fixture(scope="module")
def text_target(checkpoints):
    target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float64)
    return target


@pytest.fixture(scope="module")
def sequences(text_target):
    """Target-greedy responses to random prompts: what train_head learns from."""
    out = []
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        prompt = torch.randint(0, tiny.MASK, (1, 6), generator=g)
        ids = glance.greedy_generate(text_target, prompt, 24)[0]
        out.append(Sequence(ids, prompt_len=6))
    return out


def test_labels_are_not_shifted():
    ids = torch.arange(100, 120)
    block_ids, pos, labels, weights = pack_blocks(ids, [3, 10], B, mask_token_id=7, gamma=3.0)
    assert block_ids.tolist() == [103, 7, 7, 7, 7, 7, 110, 7, 7, 7, 7, 7]
    assert pos.tolist() == list(range(3, 9)) + list(range(10, 16))
    # Offset k's label is the token at anchor + k: the same position as the query.
    assert labels.tolist() == ids[pos].tolist()
    assert weights[0] == 0 and weights[B] == 0
    assert weights[1] == pytest.approx(1.0) and weights[2] == pytest.approx(np.exp(-1 / 3))
    # Offsets past the end of the sequence carry no weight.
    _, _, _, w = pack_blocks(ids, [17], B, 7, 3.0)
    assert w.tolist()[3:] == [0, 0, 0]


def test_block_mask_hides_the_anchor_and_after():
    mask = block_mask([2, 5], block_size=3, ctx_len=8)
    assert mask.shape == (6, 8 + 6)
    # Block 0 (anchor 2) sees context 0..1 only; block 1 (anchor 5) sees 0..4.
    assert mask[:3, :8].tolist() == [[True, True] + [False] * 6] * 3
    assert mask[3:, :8].tolist() == [[True] * 5 + [False] * 3] * 3
    # Each block sees itself in both directions and never the other block.
    assert mask[:3, 8:].tolist() == [[True] * 3 + [False] * 3] * 3
    assert mask[3:, 8:].tolist() == [[False] * 3 + [True] * 3] * 3
    assert not block_mask([2], 3, 8, valid_ctx=1)[:, 1:8].any()


def test_anchor_features_do_not_leak(text_target, sequences):
    """Perturbing target features at positions >= anchor leaves a block's logits unchanged."""
    head = build_head(text_target, tiny.MASK, HeadConfig(block_size=B, layers=2))
    seq = sequences[0]
    feats = sequence_features(text_target, seq, head.target_layer_ids)
    anchors = [7, 12]
    logits, _, _ = block_logits(head, text_target, [(feats, seq.input_ids, anchors)], 3.0)
    for j, a in enumerate(anchors):
        bumped = feats.clone()
        bumped[a:] += torch.randn_like(bumped[a:])
        again, _, _ = block_logits(head, text_target, [(bumped, seq.input_ids, anchors)], 3.0)
        rows = slice(j * B, (j + 1) * B)
        assert torch.equal(again[0, rows], logits[0, rows])
        # ...while a change before the anchor does reach it (the test can fail).
        early = feats.clone()
        early[a - 1] += 1.0
        moved, _, _ = block_logits(head, text_target, [(early, seq.input_ids, anchors)], 3.0)
        assert not torch.allclose(moved[0, rows], logits[0, rows])


def test_anchors_point_at_response_tokens():
    rng = np.random.default_rng(0)
    for _ in range(50):
        anchors = sample_anchors(5, 12, 3, rng)
        assert all(4 <= a <= 10 for a in anchors) and anchors == sorted(set(anchors))
    assert sample_anchors(5, 5, 3, rng) == []


def test_one_step_lowers_the_loss(text_target, sequences):
    head = build_head(text_target, tiny.MASK, HeadConfig(block_size=B, layers=1))
    rows = []
    rng = np.random.default_rng(1)
    for s in sequences[:4]:
        feats = sequence_features(text_target, s, head.target_layer_ids)
        rows.append((feats, s.input_ids, sample_anchors(s.prompt_len, len(s.input_ids), 3, rng)))
    head.train()
    optim = torch.optim.AdamW(head.parameters(), lr=1e-2)
    before = head_loss(head, text_target, rows, 3.0)
    before.backward()
    optim.step()
    after = head_loss(head, text_target, rows, 3.0)
    assert float(after.detach()) < float(before.detach())


def test_passes_by_context_need_give_one_padded_pass_s_loss_and_gradients(
    text_target, sequences, monkeypatch
):
    """Rows cut at their last anchor and run in groups: the loss and gradients
    of one pass over the whole, padded rows, to float32 rounding."""
    import glance.training.block as block

    head = build_head(text_target, tiny.MASK, HeadConfig(block_size=B, layers=1))
    rng = np.random.default_rng(3)
    rows = []
    for s in sequences:
        feats = sequence_features(text_target, s, head.target_layer_ids)
        rows.append((feats, s.input_ids, sample_anchors(s.prompt_len, len(s.input_ids), 2, rng)))
    assert len({block.context_need(f, a) for f, _, a in rows}) > 1  # the cut differs by row

    def loss_and_grads(group, cut):
        monkeypatch.setattr(block, "GROUP_ROWS", group)
        if not cut:  # every row read whole: a need past the last anchor
            monkeypatch.setattr(block, "context_need", lambda f, a: int(f.shape[0]))
        head.zero_grad()
        loss = head_loss(head, text_target, rows, 3.0, reveal=1)
        loss.backward()
        monkeypatch.undo()
        return loss.detach(), [p.grad.clone() for p in head.parameters() if p.grad is not None]

    whole, whole_grads = loss_and_grads(len(rows), cut=False)
    for group in (1, 2, 4):
        loss, grads = loss_and_grads(group, cut=True)
        torch.testing.assert_close(loss, whole, rtol=1e-6, atol=0)
        for g, w in zip(grads, whole_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def trained(text_target, sequences, tmp_path_factory):
    cfg = HeadConfig(block_size=B, layers=1, steps=200, rows=6, blocks_per_row=4, lr=5e-3)
    head, log = train_head(text_target, sequences, tiny.MASK, cfg, progress=False)
    path = tmp_path_factory.mktemp("trained") / "head"
    head.save_pretrained(path)
    return head, log, path


@pytest.mark.slow  # hundreds of training steps
def test_trained_head_predicts_its_own_tokens(text_target, sequences, trained):
    head, log, _ = trained
    assert log["final_loss"] < 0.5
    seq = sequences[1]
    feats = sequence_features(text_target, seq, head.target_layer_ids)
    anchors = [seq.prompt_len - 1, seq.prompt_len + 8]
    logits, labels, weights = block_logits(head, text_target, [(feats, seq.input_ids, anchors)], 3)
    hit = (logits.argmax(-1) == labels)[weights > 0]
    assert hit.float().mean() > 0.9


@pytest.mark.slow  # hundreds of training steps
def test_trained_head_loads_and_decodes_losslessly(text_target, sequences, trained):
    from dflash import DFlashDraftModel

    _, _, path = trained
    assert DFlashDraftModel.from_pretrained(path).block_size == B
    head = glance.load_block_head(path, target=text_target)
    seq = sequences[2]
    prompt = seq.input_ids[None, : seq.prompt_len]
    want = glance.greedy_generate(text_target, prompt, 24)
    for fn, kwargs in ((glance.generate, dict(budget=15, branch_k=3)), (glance.chain_generate, {})):
        out, stats = fn(head, text_target, prompt, 24, return_stats=True, **kwargs)
        assert out.tolist() == want.tolist()
        assert stats.tau > 2.0  # it learned the sequence: several tokens per round


def test_revealed_blocks_show_true_tokens_and_weigh_only_masks():
    ids = torch.arange(100, 120)
    block_ids, pos, labels, weights = pack_blocks(ids, [3], B, 7, 3.0, reveal=2)
    assert block_ids.tolist() == [103, 104, 105] + [7] * (B - 1)
    assert pos.tolist() == list(range(3, 3 + B + 2))
    assert labels.tolist() == ids[pos].tolist()
    assert weights[:3].tolist() == [0, 0, 0]
    assert weights[3] == pytest.approx(1.0) and weights[4] == pytest.approx(np.exp(-1 / 3))
    with pytest.raises(ValueError, match="reveal=2"):
        pack_blocks(ids, [18], B, 7, 3.0, reveal=2)


def test_anchors_leave_room_for_the_revealed_tokens():
    rng = np.random.default_rng(0)
    for _ in range(50):
        assert all(4 <= a <= 12 - 2 - 3 for a in sample_anchors(5, 12, 3, rng, reveal=3))
    assert sample_anchors(5, 9, 3, rng, reveal=3) == [4]
    assert sample_anchors(5, 8, 3, rng, reveal=3) == []


def test_mask_span_is_checked_and_recorded(text_target):
    with pytest.raises(ValueError, match="mask_span"):
        HeadConfig(mask_span="sometimes")
    fixed = build_head(text_target, tiny.MASK, HeadConfig(block_size=B))
    with pytest.raises(ValueError, match="mask_span"):
        glance.generate(fixed, text_target, torch.tensor([[1, 2, 3]]), 8, extend_budget=4)
    variable = build_head(text_target, tiny.MASK, HeadConfig(block_size=B, mask_span="variable"))
    assert variable.config.dflash_config["mask_span"] == "variable"


@pytest.fixture(scope="module")
def trained_variable(text_target, sequences, tmp_path_factory):
    cfg = HeadConfig(
        block_size=B, layers=1, steps=300, rows=6, blocks_per_row=4, lr=5e-3, mask_span="variable"
    )
    head, log = train_head(text_target, sequences, tiny.MASK, cfg, progress=False)
    path = tmp_path_factory.mktemp("variable") / "head"
    head.save_pretrained(path)
    return glance.load_block_head(path, target=text_target)


@pytest.mark.slow  # hundreds of training steps
def test_variable_head_prices_offsets_past_the_block(text_target, sequences, trained_variable):
    """With the first B-1 tokens revealed, it predicts the B-1 after them."""
    head = trained_variable
    assert head.config.dflash_config["mask_span"] == "variable"
    seq = sequences[1]
    feats = sequence_features(text_target, seq, head.target_layer_ids)
    anchors = [seq.prompt_len - 1, seq.prompt_len + 4]
    rows = [(feats, seq.input_ids, anchors)]
    for reveal in (0, B - 1):
        logits, labels, weights = block_logits(head, text_target, rows, 3, reveal)
        hit = (logits.argmax(-1) == labels)[weights > 0]
        assert hit.float().mean() > 0.8, reveal


@pytest.mark.slow  # hundreds of training steps
def test_extend_budget_with_a_trained_head_is_lossless_and_reaches_past_the_block(
    text_target, sequences, trained_variable
):
    seq = sequences[3]
    prompt = seq.input_ids[None, : seq.prompt_len]
    want = glance.greedy_generate(text_target, prompt, 24)
    out, stats = glance.generate(
        trained_variable,
        text_target,
        prompt,
        24,
        budget=15,
        branch_k=3,
        extend_budget=8,
        return_stats=True,
    )
    assert out.tolist() == want.tolist()
    assert max(r.accepted for r in stats.rounds) > B - 1  # an extension node was accepted
    assert all(r.tree_size <= 15 + 8 for r in stats.rounds)


def test_every_training_seed_is_scored_on_one_probe(text_target, sequences, monkeypatch):
    # The held-out anchors come from PROBE_SEED, not the run's seed: two seeds'
    # held-out losses are two heads on the same blocks, so they compare.
    from glance.training import block

    probes = []

    def capture(head, cfg, batch_loss, row_loss, probe, **kw):
        probes.append([(ids.tolist(), list(anchors)) for _, ids, anchors in probe])
        return {}

    monkeypatch.setattr(block, "fit", capture)
    for seed in (0, 1, 2):
        cfg = HeadConfig(block_size=B, layers=1, steps=1, seed=seed, heldout_blocks=3)
        train_head(
            text_target, sequences[:4], tiny.MASK, cfg, heldout=sequences[4:], progress=False
        )
    assert len(probes[0]) == 2 and all(len(a) == 3 for _, a in probes[0])
    assert probes[0] == probes[1] == probes[2]
