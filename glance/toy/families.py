"""The toy target's model families: a tiny ``Qwen3VLForConditionalGeneration``
(the default) or a tiny ``Qwen2_5_VLForConditionalGeneration``, of the same
text width, depth and heads, the same tokenizer, page and patch layout (one
glyph a patch, spatial merge 1), so the paper's law can be fitted on two
target families. :attr:`glance.toy.config.TargetSize.family` picks one.
"""

from __future__ import annotations

import torch

from glance.toy.config import FAMILIES, TargetSize
from glance.toy.processor import PATCH, TEMPORAL

__all__ = ["FAMILIES", "PROCESSORS", "build_target", "model_class", "text_config"]

#: each family's processor and video processor classes, as its hub
#: checkpoints name them in ``preprocessor_config.json``
PROCESSORS = {
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor"),
}


def model_class(family: str):
    """The ``transformers`` class of a toy ``family``."""
    import transformers as tf

    classes = {
        "qwen3_vl": tf.Qwen3VLForConditionalGeneration,
        "qwen2_5_vl": tf.Qwen2_5_VLForConditionalGeneration,
    }
    if family not in classes:
        raise ValueError(f"family: expected one of {FAMILIES}; got {family!r}")
    return classes[family]


def text_config(tokenizer, size: TargetSize, **rope) -> dict:
    """The toy target's text tower for ``tokenizer``'s vocabulary, of
    ``size``, as a config dict: what both families share (``rope``: extra
    keys of ``rope_parameters``)."""
    head_dim = size.hidden // size.heads
    half = head_dim // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    ids = tokenizer.convert_tokens_to_ids
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=2 * size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        head_dim=head_dim,
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 100.0,
            "mrope_section": section,
            **rope,
        },
        bos_token_id=None,
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
    )


def qwen2_5_section(size: TargetSize) -> list[int]:
    """The toy Qwen2.5-VL's ``mrope_section``: one frequency pair for time, a
    fifth for rows, the rest for columns. Sectioned (not interleaved) mRoPE
    gives the last section the slowest frequencies; an even split leaves a
    column step of 0.04 rad or less on a 32-wide head, too little to tell
    neighbouring glyphs apart, while a page is 16 columns and 5 rows."""
    half = size.hidden // size.heads // 2
    rows = max(1, half // 5)
    return [1, rows, half - 1 - rows]


def build_target(tokenizer, size: TargetSize | None = None, seed: int = 0):
    """A fresh tiny toy target of ``size.family`` for ``tokenizer``'s
    vocabulary, of ``size`` (:class:`~glance.toy.config.TargetSize`'s
    defaults when ``None``): a Qwen3-VL, or a Qwen2.5-VL whose vision tower
    (RMSNorm, SwiGLU, 2D rotary positions, no learned position table) uses
    full attention in every block (the page is 80 patches, smaller than any
    window) and whose mRoPE sections give the page's columns the fast
    frequencies (:func:`qwen2_5_section`)."""
    import transformers as tf

    size = size or TargetSize()
    torch.manual_seed(seed)
    ids = tokenizer.convert_tokens_to_ids
    vision = dict(
        depth=size.vision_depth,
        hidden_size=size.vision_hidden,
        intermediate_size=2 * size.vision_hidden,
        num_heads=2,
        patch_size=PATCH,
        spatial_merge_size=1,
        temporal_patch_size=TEMPORAL,
        out_hidden_size=size.hidden,
    )
    special = dict(
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    if size.family == "qwen2_5_vl":
        config = tf.Qwen2_5_VLConfig(
            text_config=text_config(tokenizer, size, mrope_section=qwen2_5_section(size))
            | {"tie_word_embeddings": False},
            vision_config=vision
            | dict(window_size=PATCH * 16, fullatt_block_indexes=list(range(size.vision_depth))),
            **special,
        )
    else:
        config = tf.Qwen3VLConfig(
            text_config=text_config(tokenizer, size, mrope_interleaved=True),
            vision_config=vision
            | dict(
                num_position_embeddings=16 * 16,  # a square grid, interpolated to the page
                deepstack_visual_indexes=[],
            ),
            **special,
        )
    return model_class(size.family)(config)
