"""Tiny random-weight targets and heads, built from configs: for tests and benchmarks.

Weights are re-drawn with a larger std than the default so that greedy outputs
vary (the default init gives near-constant text, which makes a weak test).
:class:`OracleHead` drafts a known sequence, for exercising deep and sideways
accepts that a random head never reaches. Needs torch and transformers.
"""

from __future__ import annotations

import torch

from glance.drafters.protocol import TableDrafter

VOCAB = 96
# Special ids inside the vocabulary, shared by every VL target here.
IMAGE, VIDEO, VISION_START, VISION_END, MASK = 90, 91, 92, 93, 95
TEXT_LAYERS = 4


def _text_kwargs(hidden, layers, vocab=VOCAB, **extra):
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 16,  # head_dim 16 fits mrope_section [2, 3, 3]
        num_key_value_heads=max(1, hidden // 32),
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=None,
        **extra,
    )


def build_target(
    kind: str,
    *,
    seed: int = 0,
    std: float = 0.08,
    hidden: int = 64,
    layers: int = TEXT_LAYERS,
    dtype=torch.float64,
    vocab: int = VOCAB,
):
    """A random ``kind`` target: qwen3, qwen2_vl, qwen2_5_vl or qwen3_vl, in eval mode.

    ``vocab`` other than ``VOCAB`` is for text targets only (the VL ones keep
    their special ids inside ``VOCAB``)."""
    import transformers as tf

    torch.manual_seed(seed)
    vl_ids = dict(
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )
    if kind == "qwen3":
        config = tf.Qwen3Config(
            **_text_kwargs(hidden, layers, vocab=vocab, head_dim=16, rope_theta=100.0)
        )
        model = tf.Qwen3ForCausalLM(config)
    elif kind in ("qwen2_vl", "qwen2_5_vl"):
        text = _text_kwargs(
            hidden,
            layers,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 100.0,
                "mrope_section": [2, 3, 3],
            },
        )
        if kind == "qwen2_vl":
            vision = dict(
                depth=2,
                embed_dim=32,
                hidden_size=hidden,
                num_heads=2,
                mlp_ratio=2,
                patch_size=4,
                spatial_merge_size=2,
                temporal_patch_size=2,
                in_channels=3,
            )
            config = tf.Qwen2VLConfig(text_config=text, vision_config=vision, **vl_ids)
            model = tf.Qwen2VLForConditionalGeneration(config)
        else:
            vision = dict(
                depth=2,
                hidden_size=32,
                out_hidden_size=hidden,
                intermediate_size=64,
                num_heads=2,
                patch_size=4,
                spatial_merge_size=2,
                temporal_patch_size=2,
                in_channels=3,
                window_size=16,
                fullatt_block_indexes=[1],
            )
            config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **vl_ids)
            model = tf.Qwen2_5_VLForConditionalGeneration(config)
    elif kind == "qwen3_vl":
        text = _text_kwargs(
            hidden,
            layers,
            head_dim=16,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 100.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        )
        vision = dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=4,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=hidden,
            num_position_embeddings=64,
            deepstack_visual_indexes=[0],
        )
        config = tf.Qwen3VLConfig(text_config=text, vision_config=vision, **vl_ids)
        model = tf.Qwen3VLForConditionalGeneration(config)
    else:
        raise ValueError(f"unknown target kind {kind!r}")
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, std)
    return model.to(dtype).eval()


def build_head(
    target,
    *,
    seed: int = 1,
    block_size: int = 8,
    layers: int = 1,
    std: float = 0.08,
    mask: int = MASK,
    mask_span: str = "fixed",
):
    """A random DFlash head that fits ``target``, in the target's dtype.

    ``mask_span="variable"`` only labels it so (``extend_budget`` accepts it);
    its weights are as random as ever."""
    from dflash import DFlashDraftModel
    from transformers import Qwen3Config

    torch.manual_seed(seed)
    text = target.config.get_text_config()
    config = Qwen3Config(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        rope_theta=100.0,
    )
    config.num_target_layers = text.num_hidden_layers
    config.dflash_config = {
        "target_layer_ids": [0, text.num_hidden_layers - 2],
        "mask_token_id": mask,
        "block_size": block_size,
        "mask_span": mask_span,
    }
    head = DFlashDraftModel(config)
    with torch.no_grad():
        for p in head.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, std)
    return head.to(target.dtype).eval()


def image_prompt(target, text_before: list[int], text_after: list[int], grid=(1, 4, 4), seed=0):
    """input_ids with one image, plus the image inputs the VL target needs."""
    vision = target.config.vision_config
    t, h, w = grid
    merge = vision.spatial_merge_size
    n_image = t * h * w // (merge * merge)
    ids = text_before + [VISION_START] + [IMAGE] * n_image + [VISION_END] + text_after
    g = torch.Generator().manual_seed(seed)
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    pixel_values = torch.randn(t * h * w, patch, generator=g, dtype=target.dtype)
    input_ids = torch.tensor([ids])
    mm = (input_ids == IMAGE).to(torch.int32)
    return input_ids, pixel_values, torch.tensor([list(grid)]), mm


class OracleHead(torch.nn.Module):
    """A stand-in head whose drafts are rigged toward a known greedy sequence.

    At block offset ``j`` (sequence index ``p``) it ranks ``reference[p]`` first,
    except at offsets in ``corrupt`` (and, with ``corrupt_rate``, at offsets
    drawn afresh per draft), where a wrong token ranks first and the right one
    second. Other tokens get small random scores. It has the
    attributes and call signature the decoders (and dflash's own loop) use.
    """

    def __init__(self, target, reference, block_size=8, corrupt=(), seed=0, corrupt_rate=0.0):
        from transformers import Qwen3Config

        super().__init__()
        text = target.config.get_text_config()
        self.config = Qwen3Config(
            vocab_size=text.vocab_size,
            hidden_size=text.hidden_size,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
        )
        self.block_size = block_size
        self.mask_token_id = MASK
        self.target_layer_ids = [0, 1]
        self.reference = list(reference)
        self.corrupt = frozenset(corrupt)
        self.corrupt_rate = corrupt_rate
        self.vocab = text.vocab_size
        self.generator = torch.Generator().manual_seed(seed)
        self.dummy = torch.nn.Parameter(torch.zeros(1, dtype=target.dtype))

    def forward(self, target_hidden, noise_embedding, position_ids, **kwargs):
        # Hand the block's sequence indices through to compute_logits.
        block = noise_embedding.shape[1]
        return position_ids[:, -block:, None].to(torch.float64)

    def compute_logits(self, hidden, output_head):
        positions = hidden[..., 0].long()
        flat = positions.reshape(-1)
        logits = torch.rand(flat.shape[0], self.vocab, generator=self.generator).double()
        start = int(flat.min()) - 1  # the root sits one before the first drafted offset
        drawn = torch.rand(flat.shape[0], generator=self.generator) < self.corrupt_rate
        for row, p in enumerate(flat.tolist()):
            if p >= len(self.reference):
                continue
            right = self.reference[p]
            if p - start in self.corrupt or drawn[row]:
                logits[row, (right + 1) % self.vocab] = 10.0
                logits[row, right] = 9.0
            else:
                logits[row, right] = 10.0
        return logits.reshape(*positions.shape, self.vocab)


class ScriptedDrafter(TableDrafter):
    """A :class:`~glance.drafters.protocol.Drafter` that is no model at all: at each
    offset it proposes ``reference[p]`` (``p``, the offset's sequence index)
    first, except at offsets in ``corrupt``, where a wrong token leads and the
    right one is second. The other candidates are the next ids in the
    vocabulary. It shows that the decoder needs nothing of a drafter but the
    protocol."""

    def __init__(self, reference, vocab: int, width: int = 4, max_depth: int = 7, corrupt=()):
        self.reference, self.vocab = list(reference), int(vocab)
        self.width, self.max_depth, self.corrupt = int(width), int(max_depth), frozenset(corrupt)
        self.calls = []  # (root, length, depth) of every proposal

    def start(self, hidden_states, input_ids=None) -> None:
        self.calls.clear()

    def advance(self, hidden_states, rows) -> None:
        pass

    def propose(self, root: int, length: int, depth: int):
        import numpy as np

        self.calls.append((root, length, depth))
        ids = np.empty((depth, self.width), dtype=np.int64)
        for j in range(depth):
            p = length + 1 + j
            right = self.reference[p] if p < len(self.reference) else 0
            row = [(right + i) % self.vocab for i in range(self.width)]
            if j + 1 in self.corrupt and self.width > 1:
                row[0], row[1] = row[1], row[0]
            ids[j] = row
        # a confident first choice: the whole spine outranks every side branch
        probs = np.array([0.9] + [0.1 / 2**i for i in range(1, self.width)])[: self.width]
        logprobs = np.log(probs)[None].repeat(depth, axis=0)
        return ids, logprobs
