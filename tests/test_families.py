"""The toy target's second family (glance.toy.families): a Qwen2.5-VL of the
toy's shape reads a toy page through the same tokenizer and patch layout, and
trains from a reader of its own family only."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")


def test_toy_qwen2_5_vl_scores_a_toy_batch_and_keeps_the_shape():
    import transformers as tf

    from glance.toy.config import TargetSize
    from glance.toy.families import build_target
    from glance.toy.processor import build_processor
    from glance.toy.tasks import make_example
    from glance.toy.world import Encoder, glyph_table, make_batch

    processor = build_processor()
    size = TargetSize(family="qwen2_5_vl")
    model = build_target(processor.tokenizer, size)
    assert isinstance(model, tf.Qwen2_5_VLForConditionalGeneration)
    text = model.config.text_config
    assert (text.hidden_size, text.num_hidden_layers) == (size.hidden, size.layers)
    assert model.config.vision_config.fullatt_block_indexes == list(range(size.vision_depth))
    # sectioned mRoPE: the columns' section is the last, so the slowest; it must
    # still turn by a fair angle a column (0.04 rad at most under an even split)
    section = text.rope_parameters["mrope_section"]
    half, theta = size.hidden // size.heads // 2, text.rope_parameters["rope_theta"]
    assert sum(section) == half
    fastest_column = theta ** (-2 * (half - section[-1]) / (2 * half))
    assert fastest_column > 0.25, section
    # within a few percent of the Qwen3-VL toy's parameter count: a fair second family
    ours = sum(p.numel() for p in model.parameters())
    qwen3 = build_target(processor.tokenizer, TargetSize())
    assert isinstance(qwen3, tf.Qwen3VLForConditionalGeneration)
    assert abs(ours / sum(p.numel() for p in qwen3.parameters()) - 1) < 0.05
    ex = make_example("chartqa", np.random.default_rng(0))
    batch = make_batch(Encoder(processor.tokenizer), [(ex, ex.answer)], glyph_table())
    logits = model(**{k: v for k, v in batch.items() if k != "loss_mask"}).logits
    assert logits.shape == (*batch["input_ids"].shape, len(processor.tokenizer))


def test_a_family_is_checked_before_anything_loads(tmp_path):
    from glance.toy.config import TargetSize, TrainConfig
    from glance.toy.soft import fit_target, train_target

    with pytest.raises(ValueError, match=r"^family: expected one of"):
        TargetSize(family="llava")
    reader = tmp_path / "reader"
    train_target(reader, TrainConfig(steps=1, batch=2), TargetSize(hidden=32, layers=1), False)
    other = TargetSize(hidden=32, layers=1, family="qwen2_5_vl")
    with pytest.raises(ValueError, match=r"a qwen3_vl checkpoint, but target.size.family"):
        fit_target(TrainConfig(steps=1, batch=2, init=str(reader)), other, progress=False)
    with pytest.raises(ValueError, match=r"no readable config.json"):
        fit_target(TrainConfig(steps=1, batch=2, init=str(tmp_path)), other, progress=False)
