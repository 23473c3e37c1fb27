"""The DFlash block head: loading it, checking it fits a target, and what it reads.

The head is ``dflash.DFlashDraftModel``, imported from the ``dflash`` package.
It reads *context features*: the target's hidden states after the layers in
``head.target_layer_ids`` (dflash's convention: layer ``i`` is
``hidden_states[i + 1]``), concatenated, for every position the target has
processed, image positions included. It never sees pixels. It borrows the
target's input embeddings and LM head, found here through :func:`embeddings`
and :func:`lm_head` whatever the target's class.
"""

from __future__ import annotations

import torch

from glance.vl import text_config

__all__ = [
    "check_head_extends",
    "check_head_fits",
    "context_features",
    "embeddings",
    "lm_head",
    "load_block_head",
    "noise_embedding",
]


def embeddings(target) -> torch.nn.Embedding:
    """The target's token embedding (text and VL classes alike)."""
    emb = target.get_input_embeddings()
    if emb is None:
        raise ValueError(f"{type(target).__name__} exposes no input embeddings")
    return emb


def lm_head(target) -> torch.nn.Module:
    """The target's output projection to vocabulary logits."""
    head = getattr(target, "lm_head", None)
    if head is None:
        head = target.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(target).__name__} exposes no LM head")
    return head


def _head_value(head, name, default=None):
    return getattr(head.config, "dflash_config", {}).get(name, getattr(head.config, name, default))


def noise_embedding(head, target, block_ids: torch.Tensor) -> torch.Tensor:
    """The head's block input: the target's embedding of ``block_ids``, scaled as
    the head's config says (``input_embedding_scale``, default 1)."""
    scale = float(_head_value(head, "input_embedding_scale", 1.0))
    return embeddings(target)(block_ids) * scale


def context_features(hidden_states, layer_ids) -> torch.Tensor:
    """``(batch, n, len(layer_ids) * hidden)``: the kept layers' states, concatenated."""
    from dflash import extract_context_feature

    return extract_context_feature(hidden_states, list(layer_ids))


def check_head_fits(head, target) -> None:
    """Raise ``ValueError`` naming the field and both values if ``head`` cannot
    draft for ``target``: hidden size, vocabulary, target layer count and ids,
    mask id, block size and dtype."""
    text = text_config(target)

    def same(field, mine, theirs):
        if mine != theirs:
            raise ValueError(f"head {field} {mine} != target {field} {theirs}")

    same("hidden_size", head.config.hidden_size, text.hidden_size)
    same("vocab_size", head.config.vocab_size, text.vocab_size)
    layers = text.num_hidden_layers
    counted = getattr(head.config, "num_target_layers", None)
    if counted is not None:
        same("num_target_layers (num_hidden_layers)", counted, layers)
    bad = [i for i in head.target_layer_ids if not 0 <= int(i) < layers]
    if bad:
        raise ValueError(
            f"head target_layer_ids {list(head.target_layer_ids)} must lie in [0, {layers}) "
            f"for a target with num_hidden_layers={layers}; out of range: {bad}"
        )
    mask = head.mask_token_id
    if mask is None or not 0 <= int(mask) < text.vocab_size:
        raise ValueError(
            f"head mask_token_id {mask} must be a token of the target's vocabulary "
            f"(vocab_size {text.vocab_size})"
        )
    if int(head.block_size) < 2:
        raise ValueError(f"head block_size {head.block_size} must be >= 2")
    head_dtype = next(head.parameters()).dtype
    target_dtype = next(target.parameters()).dtype
    if head_dtype != target_dtype:
        raise ValueError(
            f"head dtype {head_dtype} != target dtype {target_dtype}; "
            "load the head with dtype=target.dtype (load_block_head(path, target) does)"
        )


def check_head_extends(head) -> None:
    """Raise ``ValueError`` unless ``head`` was trained with a variable mask
    span, which ``extend_budget`` needs: its second pass reveals the spine."""
    span = _head_value(head, "mask_span", "fixed")
    if span != "variable":
        raise ValueError(
            f"extend_budget needs a head trained with a variable mask span "
            f"(dflash_config mask_span 'variable'); this head's mask_span is {span!r}. "
            "Train one with HeadConfig(mask_span='variable')."
        )


def load_block_head(path, target=None, dtype=None, device=None, allow_pickle: bool = False):
    """Load a trained ``dflash.DFlashDraftModel`` from a checkpoint directory.

    With ``target``, also check that the head fits it (:func:`check_head_fits`),
    and default ``dtype`` and ``device`` to the target's. Returns the head in
    eval mode with gradients off. Loading is strict: a missing folder fails at
    once, pickle weights are refused unless ``allow_pickle``, and missing or
    unexpected weights raise ``ValueError`` naming them.
    """
    from dflash import DFlashDraftModel

    from glance._io import load_strict

    if target is not None:
        dtype = dtype or target.dtype
        device = device or target.device
    head = load_strict(
        DFlashDraftModel,
        path,
        "head",
        allow_pickle=allow_pickle,
        dtype=dtype or torch.bfloat16,
    )
    if device is not None:
        head = head.to(device)
    if target is not None:
        check_head_fits(head, target)
    return head.eval().requires_grad_(False)
