"""The target: check the shipped toy one (or retrain it), or resolve a given
checkpoint, and record it.

Writes ``<paths.target>/target.json``: where the weights are (``path``,
``revision``), the architecture, layer count, hidden size, vocabulary, dtype,
and for the toy target its weights' SHA-256 and held-out exact match. The toy
target ships in the repository (``target.path``); its hash is checked against
``target.sha256``. With ``target.retrain=true`` a new one is trained into this
folder instead, and its training log is recorded too (its wall times in
``results/timing/target.json``).
"""

from __future__ import annotations

from pathlib import Path

from stages.common import app, log, numerics_record, plain, setup, write_json, write_timing


def describe(path, revision=None) -> dict:
    """What a checkpoint is, read from its config alone (no weights loaded)."""
    from pathlib import Path

    from transformers import AutoConfig

    from glance._io import checkpoint_path

    source = checkpoint_path(path, "target.path")
    config = AutoConfig.from_pretrained(str(source), revision=revision)
    text = config.get_text_config()
    return {
        "path": str(path),
        "local": isinstance(source, Path),
        "revision": revision,
        "architecture": (config.architectures or [type(config).__name__])[0],
        "model_type": config.model_type,
        "layers": text.num_hidden_layers,
        "hidden_size": text.hidden_size,
        "vocab_size": text.vocab_size,
        "vision": hasattr(config, "vision_config"),
    }


def sha256(path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def shipped_toy(t) -> Path:
    """The shipped toy checkpoint folder, its weights checked against ``target.sha256``."""
    path = Path(str(t.path))
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise SystemExit(
            f"target.path: {weights} is missing; the toy target ships in the repository "
            "(or set target.retrain=true to train one)"
        )
    if t.sha256 and sha256(weights) != str(t.sha256):
        raise SystemExit(
            f"{weights}: SHA-256 {sha256(weights)} does not match target.sha256 {t.sha256}"
        )
    return path


@app
def main(cfg) -> None:
    setup(cfg)
    out = Path(cfg.paths.target)
    t = cfg.target
    if t.source == "toy":
        from glance.toy.world import TargetSize, TrainConfig, evaluate_target, train_target
        from glance.vl import load_target

        train_log = None
        if t.retrain:
            train_log = train_target(
                out, TrainConfig(**plain(t.train)), TargetSize(**plain(t.size))
            )
            path = out
        else:
            path = shipped_toy(t)
            out.mkdir(parents=True, exist_ok=True)
        model, processor = load_target(path, dtype=_dtype(cfg))
        quality = evaluate_target(model, processor, cfg.paths.data, n=int(t.heldout))
        info = describe(path) | {
            "sha256": sha256(Path(path) / "model.safetensors"),
            "retrained": bool(t.retrain),
            "heldout": quality,
        }
        if train_log is not None:
            info["train"] = write_timing(cfg, "target", train_log)
    elif t.source == "pretrained":
        if not t.path:
            raise SystemExit("target.path: give a hub name or a local checkpoint folder")
        info = describe(t.path, t.revision)
        out.mkdir(parents=True, exist_ok=True)
    else:
        raise SystemExit(f"target.source: expected toy or pretrained; got {t.source!r}")
    info |= {"name": t.name, "source": t.source, "dtype": str(cfg.dtype)}
    if "train" not in info:
        write_timing(cfg, "target", {})  # nothing trained, nothing timed
    info["numerics"] = numerics_record(cfg)
    write_json(out / "target.json", info)
    log.info("target %s: %s, %d layers", t.name, info["architecture"], info["layers"])


def _dtype(cfg):
    from stages.common import torch_dtype

    return torch_dtype(cfg.dtype)


if __name__ == "__main__":
    main()
