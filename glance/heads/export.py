"""A block head written in the layouts serving engines read.

:func:`export_head` writes GLANCE's own layout (``save_pretrained``), z-lab's
DFlash release layout, or vLLM ``speculators``' DFlash layout: the three that
:func:`glance.load_block_head` reads, so an export loads back bit for bit at
float32.

- ``zlab``: ``config.json`` as z-lab's released heads have it (``block_size``
  at the top level, ``dflash_config`` with the kept layers and the mask id,
  ``auto_map`` to dflash's model class), weights as saved.
- ``speculators``: ``speculators_model_type: dflash`` with the draft layers'
  config under ``transformer_layer_config`` and the kept layers as
  ``hidden_states`` indices (one above dflash's layer ids). With ``target``,
  the target's embedding and LM head are saved beside the head (the layout
  carries them for engines that load the speculator alone); ``fused_qkv``
  stores each layer's q, k and v projections as one ``qkv_proj``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

__all__ = ["LAYOUTS", "export_head"]

LAYOUTS = ("glance", "zlab", "speculators")


def export_head(head, path, layout: str = "glance", *, target=None, fused_qkv: bool = False):
    """Write ``head`` (a ``dflash.DFlashDraftModel``) to the folder ``path`` in
    ``layout`` (:data:`LAYOUTS`), atomically; returns the folder."""
    from glance._io import replace_dir

    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    if fused_qkv and layout != "speculators":
        raise ValueError("fused_qkv is a speculators layout option")
    path = Path(path)

    def fill(tmp: Path) -> None:
        head.save_pretrained(tmp)
        if layout == "zlab":
            _zlab(tmp)
        elif layout == "speculators":
            _speculators(tmp, head, target, fused_qkv)

    replace_dir(path, fill, f"export {layout}", kind="head export")
    return path


def _read(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def _write(folder: Path, data: dict) -> None:
    from glance._io import atomic_write_text

    atomic_write_text(folder / "config.json", json.dumps(data, indent=2, sort_keys=True) + "\n")


def _zlab(folder: Path) -> None:
    data = _read(folder)
    inner = dict(data.pop("dflash_config"))
    data["block_size"] = inner.pop("block_size")
    data["dflash_config"] = {k: inner[k] for k in ("mask_token_id", "target_layer_ids")}
    data["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    data["architectures"] = ["DFlashDraftModel"]
    _write(folder, data)


def _speculators(folder: Path, head, target, fused_qkv: bool) -> None:
    from safetensors.torch import load_file, save_file

    layer = _read(folder)
    inner = layer.pop("dflash_config")
    for key in ("architectures", "num_target_layers", "auto_map"):
        layer.pop(key, None)
    block = int(inner["block_size"])
    verifier = {"name_or_path": None, "architectures": []}
    if target is not None:
        verifier = {
            "name_or_path": getattr(target.config, "_name_or_path", None) or None,
            "architectures": [type(target).__name__],
        }
    config = {
        "speculators_model_type": "dflash",
        "architectures": ["DFlashSpeculator"],
        "transformer_layer_config": layer,
        "draft_vocab_size": layer["vocab_size"],
        "block_size": block,
        "target_hidden_size": None,
        "aux_hidden_state_layer_ids": [int(i) + 1 for i in inner["target_layer_ids"]],
        "mask_token_id": int(inner["mask_token_id"]),
        "sliding_window_non_causal": False,
        "sample_from_anchor": False,
        "num_target_layers": int(head.config.num_target_layers),
        "speculators_config": {
            "algorithm": "dflash",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": block - 1}],
            "default_proposal_method": "greedy",
            "verifier": verifier,
        },
    }
    files = sorted(folder.glob("*.safetensors"))
    state = {}
    for f in files:
        state.update(load_file(str(f)))
        f.unlink()
    for index in folder.glob("*.safetensors.index.json"):
        index.unlink()
    if target is not None:
        from glance.heads.block import lm_head

        state["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()
        state["lm_head.weight"] = lm_head(target).weight.detach().clone()
    if fused_qkv:
        for key in [k for k in state if k.endswith(".self_attn.q_proj.weight")]:
            stem = key[: -len(".q_proj.weight")]
            parts = [state.pop(f"{stem}.{n}_proj.weight") for n in "qkv"]
            state[f"{stem}.qkv_proj.weight"] = torch.cat(parts)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    _write(folder, config)
