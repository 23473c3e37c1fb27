"""The target: train the toy one, or resolve a given checkpoint, and record it.

Writes ``<paths.target>/target.json``: where the weights are (``path``,
``revision``), the architecture, layer count, hidden size, vocabulary, dtype,
and for the toy target its training log and held-out exact match. The toy
target's weights and processor are saved in the same folder.
"""

from __future__ import annotations

from pathlib import Path

from stages.common import app, log, plain, setup, write_json


def describe(path, revision=None) -> dict:
    """What a checkpoint is, read from its config alone (no weights loaded)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path), revision=revision)
    text = config.get_text_config()
    return {
        "path": str(path),
        "revision": revision,
        "architecture": (config.architectures or [type(config).__name__])[0],
        "model_type": config.model_type,
        "layers": text.num_hidden_layers,
        "hidden_size": text.hidden_size,
        "vocab_size": text.vocab_size,
        "vision": hasattr(config, "vision_config"),
    }


@app
def main(cfg) -> None:
    setup(cfg)
    out = Path(cfg.paths.target)
    t = cfg.target
    if t.source == "toy":
        from glance.toy.world import TargetSize, TrainConfig, evaluate_target, train_target
        from glance.vl import load_target

        train = TrainConfig(**plain(t.train))
        train_log = train_target(out, train, TargetSize(**plain(t.size)))
        model, processor = load_target(out, dtype=_dtype(cfg))
        quality = evaluate_target(model, processor, cfg.paths.data, n=int(t.heldout))
        info = describe(out) | {"train": train_log, "heldout": quality}
    elif t.source == "pretrained":
        if not t.path:
            raise SystemExit("target.path: give a hub name or a local checkpoint folder")
        info = describe(t.path, t.revision)
        out.mkdir(parents=True, exist_ok=True)
    else:
        raise SystemExit(f"target.source: expected toy or pretrained; got {t.source!r}")
    info |= {"name": t.name, "source": t.source, "dtype": str(cfg.dtype)}
    write_json(out / "target.json", info)
    log.info("target %s: %s, %d layers", t.name, info["architecture"], info["layers"])


def _dtype(cfg):
    from stages.common import torch_dtype

    return torch_dtype(cfg.dtype)


if __name__ == "__main__":
    main()
