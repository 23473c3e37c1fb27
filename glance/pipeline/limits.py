"""The target's limits, read from its ``config.json`` before any weight loads.

A stage that would ask the target for more positions than it has, or for more
candidates than its vocabulary holds, fails only after minutes of loading (or
asks for hundreds of gigabytes). These checks read the checkpoint the target
stage recorded (``<paths.target>/target.json``) and its ``config.json`` as
plain JSON, in milliseconds, and exit naming the key, the value and the limit.
Where the config is out of reach (the target stage has not run, or a hub
target is not in the local cache) they pass, and loading names the problem.
"""

from __future__ import annotations

import json
from pathlib import Path

from glance.pipeline.config import _fail
from glance.pipeline.files import read_json


def target_text_config(cfg) -> dict | None:
    """The target's text model config (``text_config`` of a vision-language
    ``config.json``, else the whole file) as a dict, or ``None`` when the
    target stage's record or the checkpoint's ``config.json`` is out of reach."""
    record = Path(cfg.paths.target) / "target.json"
    if not record.is_file():
        return None
    info = read_json(record, "run `python -m stages.target` first")
    file = _config_file(info)
    if file is None:
        return None
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    text = config.get("text_config") if isinstance(config, dict) else None
    return text if isinstance(text, dict) else config if isinstance(config, dict) else None


def _config_file(info: dict) -> Path | None:
    """``config.json`` of the checkpoint ``target.json`` records: in its local
    folder, or in the hub cache (never fetched)."""
    if info.get("local"):
        file = Path(info["path"]) / "config.json"
        return file if file.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(str(info["path"]), "config.json", revision=info.get("revision"))
    return Path(found) if isinstance(found, str) else None


def check_corpus_positions(cfg) -> None:
    """Exit naming ``corpus.context`` (or ``corpus.max_new_tokens``) when a
    corpus prompt's filler, a question token and its answer cannot fit the
    target's ``max_position_embeddings``."""
    text = target_text_config(cfg)
    limit = (text or {}).get("max_position_embeddings")
    c = cfg.corpus
    if c is None or not isinstance(limit, int):
        return
    positions = f"the target's {limit} positions"
    if c.max_new_tokens + 1 > limit:
        _fail("corpus.max_new_tokens", c.max_new_tokens, f"at most {limit - 1} ({positions}, "
              "less the question)")  # fmt: skip
    room = limit - c.max_new_tokens - 1
    if c.context > room:
        _fail("corpus.context", c.context, f"at most {room} filler tokens ({positions}, less "
              f"corpus.max_new_tokens={c.max_new_tokens} and the question)")  # fmt: skip


def check_scorer_top_k(cfg) -> None:
    """Exit naming ``scorer.top_k`` when it asks for more candidates per offset
    than the target's vocabulary holds."""
    vocab = (target_text_config(cfg) or {}).get("vocab_size")
    s = cfg.scorer
    if s is not None and isinstance(vocab, int) and s.top_k > vocab:
        _fail("scorer.top_k", s.top_k, f"at most the target's vocabulary, {vocab} tokens")
