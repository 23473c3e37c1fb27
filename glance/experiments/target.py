"""The target stage's work: what a checkpoint is, read from its config alone;
the shipped toy target checked against its hash; the record ``target.json``."""

from __future__ import annotations

from pathlib import Path

#: what the target stage writes to ``paths.target``: its record, and a retrained
#: toy target's files
FILES = (
    "target.json",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "train_log.json",
    "processor_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
)


def vision_language(info: dict, source) -> None:
    """Exit naming ``source`` when its config has no vision tower: GLANCE's
    targets are vision-language models (a head folder or a text-only model
    would otherwise be recorded as the target)."""
    if not info["vision"]:
        raise SystemExit(
            f"target.path {source}: {info['architecture']} ({info['model_type']}) has no "
            "vision_config; expected a vision-language checkpoint such as Qwen3-VL"
        )


def describe(path, revision=None) -> dict:
    """What a checkpoint is, read from its config alone (no weights loaded)."""
    from pathlib import Path

    from transformers import AutoConfig

    from glance._io import checkpoint_path

    source = checkpoint_path(path, "target.path")
    try:
        config = AutoConfig.from_pretrained(str(source), revision=revision)
    except (OSError, ValueError) as err:  # a folder that is no transformers checkpoint
        raise SystemExit(
            f"target.path {path}: not a model checkpoint transformers reads ({err})"
        ) from None
    if not hasattr(config, "get_text_config"):
        raise SystemExit(f"target.path {path}: {type(config).__name__} is not a model config")
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


def toy_record(cfg, tmp: Path, out: Path) -> dict:
    """The toy target's record: the shipped one (or one retrained into
    ``tmp``), its weights' SHA-256 and its held-out exact match on the
    run's ``tasks``."""
    from glance.pipeline.app import torch_dtype
    from glance.pipeline.files import write_timing
    from glance.targets.vl import load_target
    from glance.toy.evaluate import evaluate_target
    from glance.toy.soft import train_target

    t, train_log = cfg.target, None
    if t.retrain:
        if t.train is None or t.size is None:
            raise SystemExit("target.retrain: needs target.train and target.size")
        train_log = train_target(tmp, t.train, t.size)
        load_from, path = tmp, out
    else:
        load_from = path = shipped_toy(t)
    model, processor = load_target(load_from, dtype=torch_dtype(cfg.dtype))
    quality = evaluate_target(
        model, processor, cfg.paths.data, n=int(t.heldout), tasks=list(cfg.tasks)
    )
    info = describe(load_from) | {
        "path": str(path),
        "sha256": sha256(Path(load_from) / "model.safetensors"),
        "retrained": bool(t.retrain),
        "heldout": quality,
    }
    if train_log is not None:
        info["train"] = write_timing(cfg, "target", train_log)
    return info
