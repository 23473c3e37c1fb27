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

from glance._weights import check_config_dtype
from glance.targets.vl import text_config

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


def default_layer_ids(n_layers: int, n_ids: int = 2) -> list[int]:
    """``n_ids`` target layers spread from the first to the second-to-last."""
    if n_layers < 2:
        return [0]
    return sorted({round(i * (n_layers - 2) / max(1, n_ids - 1)) for i in range(n_ids)})


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


#: Weights a ``speculators`` checkpoint may carry that a dflash head borrows
#: from the target (or never had): dropped on load.
_BORROWED = (
    "embed_tokens.weight",
    "lm_head.weight",
    "verifier_lm_head.weight",
    "verifier_norm.weight",
)


def _local_config(path) -> dict | None:
    """A local checkpoint's ``config.json``, or ``None`` (a hub name, or none)."""
    import json
    from pathlib import Path

    file = Path(str(path)) / "config.json"
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"head {file}: not JSON ({err})") from err


#: The block sizes a head may have. DFlash heads use 16 (its default; the
#: tests' tiny heads 8); the drafted chain is ``block_size - 1`` deep and the
#: head runs on ``block_size`` positions a round, so a size past 64 is a
#: damaged config, not a design, and 1 drafts nothing.
BLOCK_SIZES = (2, 64)


def _check_block_size(data: dict, path, top_level_only: bool = False) -> None:
    """Refuse a ``block_size`` that is not an integer in :data:`BLOCK_SIZES`,
    naming ``config.json``, the key and the range; absent is dflash's default."""
    inner = data.get("dflash_config")
    if not top_level_only and isinstance(inner, dict) and "block_size" in inner:
        key, value = "dflash_config.block_size", inner["block_size"]
    elif "block_size" in data:
        key, value = "block_size", data["block_size"]
    else:
        return
    low, high = BLOCK_SIZES
    where = f"head {path}/config.json"
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: {key} {value!r} must be an integer in [{low}, {high}]")
    if not low <= value <= high:
        raise ValueError(f"{where}: {key} {value} must be >= {low} and <= {high}")


def _speculators_config(path, data: dict, target):
    """The ``Qwen3Config`` dflash builds a head from, for a vLLM ``speculators``
    DFlash checkpoint: the draft layers from ``transformer_layer_config``; the
    kept layers from ``aux_hidden_state_layer_ids``, which count
    ``hidden_states`` indices (0 is the embedding output), so dflash's id is
    one less; ``num_target_layers`` from the target. Features dflash cannot
    express are refused, naming the field."""
    from transformers import Qwen3Config

    where = f"head {path}/config.json"
    if data.get("speculators_model_type") != "dflash":
        raise ValueError(
            f"{where}: speculators_model_type {data.get('speculators_model_type')!r}; "
            "expected 'dflash'"
        )
    layer = data.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError(f"{where}: transformer_layer_config: expected the draft layers' config")
    check_config_dtype(layer, f"{path}/config.json", "head", "transformer_layer_config.")
    for key in ("aux_hidden_state_layer_ids", "mask_token_id"):
        if data.get(key) is None:
            raise ValueError(f"{where}: missing {key}")
    if data.get("sample_from_anchor"):
        raise ValueError(
            f"{where}: sample_from_anchor true is not supported (dflash drafts "
            "from the bonus token)"
        )
    hidden = layer.get("hidden_size")
    if data.get("target_hidden_size") not in (None, hidden):
        raise ValueError(
            f"{where}: target_hidden_size {data['target_hidden_size']} != "
            f"hidden_size {hidden}; dflash reads features of its own width"
        )
    vocab = layer.get("vocab_size")
    if data.get("draft_vocab_size") not in (None, vocab):
        raise ValueError(
            f"{where}: draft_vocab_size {data['draft_vocab_size']} != vocab_size "
            f"{vocab}: a reduced draft vocabulary (t2d/d2t) is not supported"
        )
    aux = [int(a) for a in data["aux_hidden_state_layer_ids"]]
    if min(aux) < 1:
        raise ValueError(
            f"{where}: aux_hidden_state_layer_ids {aux}: index 0 is the embedding "
            "output, which a dflash head cannot read"
        )
    if target is not None:
        layers = text_config(target).num_hidden_layers
    elif data.get("num_target_layers") is not None:
        layers = int(data["num_target_layers"])
    else:
        raise ValueError(
            f"{where}: a speculators checkpoint does not record the target's layer "
            "count; load it with its target (load_block_head(path, target))"
        )
    skip = {"model_type", "architectures", "transformers_version", "dtype", "torch_dtype"}
    config = Qwen3Config(**{k: v for k, v in layer.items() if k not in skip})
    config.num_target_layers = layers
    config.dflash_config = {
        "target_layer_ids": [a - 1 for a in aux],
        "mask_token_id": int(data["mask_token_id"]),
        "block_size": int(data.get("block_size", 8)),  # checked by _check_block_size
    }
    if data.get("sliding_window_non_causal"):
        config.is_causal = False
    return config


def _speculators_weights(path, config, target=None) -> dict:
    """The checkpoint's safetensors as dflash's keys: borrowed weights dropped
    (with ``target``, a borrowed embedding must be the target's own, or this
    raises naming the file: a same-shape head of another target), a fused
    ``qkv_proj`` split into q, k, v (sizes heads x head_dim, then kv_heads x
    head_dim twice)."""
    from pathlib import Path

    from safetensors.torch import load_file

    files = sorted(Path(str(path)).glob("*.safetensors"))
    if not files:
        raise ValueError(f"head {path}: no *.safetensors; GLANCE loads safetensors only")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    if target is not None and "embed_tokens.weight" in state:
        saved, own = state["embed_tokens.weight"], embeddings(target).weight.detach()
        if saved.shape != own.shape or not torch.equal(saved.to(own.device, own.dtype), own):
            raise ValueError(
                f"head {path}: its embed_tokens.weight is not the target's embedding; "
                "the head was exported for another target (see its speculators_config.verifier)"
            )
    for key in (*_BORROWED, "t2d", "d2t"):
        state.pop(key, None)
    d = config.head_dim or config.hidden_size // config.num_attention_heads
    sizes = [config.num_attention_heads * d, config.num_key_value_heads * d,
             config.num_key_value_heads * d]  # fmt: skip
    for key in [k for k in state if ".self_attn.qkv_proj." in k]:
        stem, kind = key.rsplit(".qkv_proj.", 1)
        if f"{stem}.q_proj.{kind}" in state:
            raise ValueError(f"head {path}: both {key} and separate q/k/v projections")
        for name, part in zip(("q", "k", "v"), state.pop(key).split(sizes), strict=True):
            state[f"{stem}.{name}_proj.{kind}"] = part.contiguous()
    return state


def load_block_head(path, target=None, dtype=None, device=None, allow_pickle: bool = False):
    """Load a trained ``dflash.DFlashDraftModel`` from a checkpoint directory.

    Three layouts load: GLANCE's own (``save_pretrained``), z-lab's DFlash
    releases (``config.json`` with ``dflash_config`` holding
    ``target_layer_ids`` and ``mask_token_id``, ``block_size`` there or at the
    top level, ``num_target_layers``; no embedding or LM head), and vLLM
    ``speculators`` DFlash checkpoints (``speculators_model_type: dflash``; see
    :func:`_speculators_config`; their copies of the target's embedding and LM
    head are dropped, a fused ``qkv_proj`` is split). With ``target``, also
    check that the head fits it (:func:`check_head_fits`), and default
    ``dtype`` and ``device`` to the target's. Returns the head in eval mode with
    gradients off. Loading is strict: a missing folder fails at once, pickle
    weights are refused unless ``allow_pickle``, and missing or unexpected
    weights raise ``ValueError`` naming them. So does a damaged checkpoint,
    naming the file and the field or tensor: a truncated or foreign
    safetensors file, a non-floating ``dtype`` in ``config.json``, a
    ``block_size`` outside :data:`BLOCK_SIZES`, integer tensors, or NaN or
    infinite weights.
    """
    from dflash import DFlashDraftModel

    from glance._io import load_strict
    from glance._weights import check_checkpoint, check_finite

    if target is not None:
        dtype = dtype or target.dtype
        device = device or target.device
    check_checkpoint(path, "head")
    data = _local_config(path)
    if data is not None:
        _check_block_size(data, path, top_level_only="speculators_model_type" in data)
    if data is not None and "speculators_model_type" in data:
        config = _speculators_config(path, data, target)
        state = _speculators_weights(path, config, target)
        head = DFlashDraftModel(config)
        missing, unexpected = head.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"head {path}: the speculators checkpoint does not match DFlashDraftModel: "
                f"missing {sorted(missing)[:8]}, unexpected {sorted(unexpected)[:8]}"
            )
        head = head.to(dtype or torch.bfloat16)
    else:
        extra = {}
        if data is not None and "num_target_layers" not in data and target is not None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(str(path))  # dflash reads it eagerly
            config.num_target_layers = text_config(target).num_hidden_layers
            extra["config"] = config
        head = load_strict(
            DFlashDraftModel,
            path,
            "head",
            allow_pickle=allow_pickle,
            dtype=dtype or torch.bfloat16,
            **extra,
        )
    if device is not None:
        head = head.to(device)
    check_finite(head.state_dict().items(), path, "head")  # on the device: faster there
    if target is not None:
        check_head_fits(head, target)
    return head.eval().requires_grad_(False)


def describe_head(folder, target, **record) -> dict:
    """``record`` and what the head saved in ``folder`` is: its block size,
    layers, the target layers it reads and its parameter count. Loading it
    through :func:`load_block_head` refuses a head that does not fit ``target``."""
    import json
    from pathlib import Path

    head = load_block_head(folder, target=target)
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    return {
        **{k: str(v) if isinstance(v, Path) else v for k, v in record.items()},
        "block_size": int(head.block_size),
        "layers": int(config.get("num_hidden_layers", 0)),
        "target_layer_ids": list(head.target_layer_ids),
        "parameters": sum(p.numel() for p in head.parameters()),
    }
