"""The toy target in a second family: a tiny ``Qwen2_5_VLForConditionalGeneration``
with the same tokenizer, page and patch layout as the toy Qwen3-VL
(:func:`glance.toy.world.build_target`), so the paper's law can be fitted on
two target families. Not used by any stage yet (issue 43, item 6).
"""

from __future__ import annotations

import torch

from glance.toy.config import TargetSize
from glance.toy.processor import PATCH, TEMPORAL

__all__ = ["build_qwen2_5_vl_target"]


def build_qwen2_5_vl_target(tokenizer, size: TargetSize | None = None, seed: int = 0):
    """A fresh tiny ``Qwen2_5_VLForConditionalGeneration`` for ``tokenizer``'s
    vocabulary, of ``size``: the same text width, depth and heads as the toy
    Qwen3-VL, a Qwen2.5-VL vision tower (RMSNorm, SwiGLU, 2D rotary positions,
    no learned absolute position table) with full attention in every block
    (the page is 80 patches, smaller than any window), one glyph a patch."""
    import transformers as tf

    from glance.toy.world import text_config

    size = size or TargetSize()
    torch.manual_seed(seed)
    ids = tokenizer.convert_tokens_to_ids
    text = text_config(tokenizer, size) | {"tie_word_embeddings": False}
    config = tf.Qwen2_5_VLConfig(
        text_config=text,
        vision_config=dict(
            depth=size.vision_depth,
            hidden_size=size.vision_hidden,
            intermediate_size=2 * size.vision_hidden,
            num_heads=2,
            patch_size=PATCH,
            spatial_merge_size=1,
            temporal_patch_size=TEMPORAL,
            out_hidden_size=size.hidden,
            window_size=PATCH * 16,
            fullatt_block_indexes=list(range(size.vision_depth)),
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    return tf.Qwen2_5_VLForConditionalGeneration(config)
