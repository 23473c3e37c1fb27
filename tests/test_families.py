"""The toy target's second family (glance.toy.families): a Qwen2.5-VL of the
toy's shape reads a toy page through the same tokenizer and patch layout."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")


def test_toy_qwen2_5_vl_scores_a_toy_batch_and_keeps_the_shape():
    import transformers as tf

    from glance.toy.config import TargetSize
    from glance.toy.families import build_qwen2_5_vl_target
    from glance.toy.processor import build_processor
    from glance.toy.tasks import make_example
    from glance.toy.world import Encoder, build_target, glyph_table, make_batch

    processor = build_processor()
    size = TargetSize()
    model = build_qwen2_5_vl_target(processor.tokenizer, size)
    assert isinstance(model, tf.Qwen2_5_VLForConditionalGeneration)
    text = model.config.text_config
    assert (text.hidden_size, text.num_hidden_layers) == (size.hidden, size.layers)
    assert model.config.vision_config.fullatt_block_indexes == list(range(size.vision_depth))
    # within a few percent of the Qwen3-VL toy's parameter count: a fair second family
    ours = sum(p.numel() for p in model.parameters())
    theirs = sum(p.numel() for p in build_target(processor.tokenizer, size).parameters())
    assert abs(ours / theirs - 1) < 0.05
    ex = make_example("chartqa", np.random.default_rng(0))
    batch = make_batch(Encoder(processor.tokenizer), [(ex, ex.answer)], glyph_table())
    inputs = {k: v for k, v in batch.items() if k not in ("loss_mask", "mm_token_type_ids")}
    logits = model(**inputs).logits
    assert logits.shape == (*batch["input_ids"].shape, len(processor.tokenizer))
