"""A decode run's token ids on record (``outputs.jsonl``), under the recipe
that made them, so the audit can reuse them instead of decoding again."""

from __future__ import annotations

import json
from pathlib import Path

from glance._io import atomic_write_text


def inputs_digest(cfg, task) -> dict:
    """SHA-256 of what a row's ids are made from beyond the config: the task
    file, the target's record (its weights' hash, or hub name and revision),
    the head's files and the sources decoding reads (the import closure of
    :mod:`glance.experiments.decode`, :func:`glance._closure.closure`: an edit
    elsewhere, which DVC does not rerun decoding for, leaves it as it is). Part
    of the audit's reuse recipe (:func:`glance.experiments.settings.token_recipe`),
    so the recipe goes stale when any of them changes, also when a stage is run
    by hand outside DVC."""
    import hashlib

    from glance._closure import ROOT, closure

    def digest(paths, names=None) -> str:
        h = hashlib.sha256()
        for p, name in sorted(zip(paths, names or [p.name for p in paths], strict=True)):
            h.update(name.encode() + b"\0" + p.read_bytes())
        return h.hexdigest()

    sources = closure("glance.experiments.decode")
    head = json.loads((Path(cfg.paths.head) / "head.json").read_text(encoding="utf-8"))
    head_dir = Path(head["path"])
    return {
        "task_file": digest([Path(cfg.paths.data) / task.file]),
        "target": digest([Path(cfg.paths.target) / "target.json"]),
        "head": digest([*head_dir.glob("*.safetensors"), head_dir / "config.json"]),
        "glance": digest([ROOT / f for f in sources], sources),
    }


def outputs_text(recipe: dict, ids: dict) -> str:
    """``outputs.jsonl``'s text: the recipe, then one line per row and prompt
    (``ids``: row -> one token list per measured prompt, prompts numbered from 1)."""
    lines = [json.dumps({"recipe": recipe})]
    for row, prompts in ids.items():
        lines += [json.dumps({"row": row, "prompt": i, "ids": t}) for i, t in enumerate(prompts, 1)]
    return "\n".join(lines) + "\n"


def write_outputs(path, recipe: dict, ids: dict) -> None:
    """Write :func:`outputs_text` to ``path``, atomically."""
    atomic_write_text(path, outputs_text(recipe, ids))


def read_outputs(path, recipe: dict) -> dict:
    """``{(row, prompt): ids}`` from an ``outputs.jsonl`` written under
    ``recipe``; empty when the file is missing or its recipe differs."""
    from glance._io import check_set

    path = Path(path)
    if not path.is_file():
        return {}
    try:  # one decode run's set, not a file left beside another run's
        check_set(path.parent, names=(path.name,))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    with path.open(encoding="utf-8") as f:
        try:
            head = json.loads(f.readline() or "{}")
        except ValueError as err:
            raise SystemExit(f"{path}, line 1: not a recipe record ({err})") from None
        if not isinstance(head, dict):
            raise SystemExit(f"{path}, line 1: expected a recipe record; got {head!r:.60}")
        if head.get("recipe") != recipe:
            return {}
        found = {}
        for number, line in enumerate(f, 2):
            try:
                r = json.loads(line)
                ids = r["ids"]
                if not isinstance(ids, list) or any(
                    isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids
                ):
                    raise ValueError(f"ids: expected a list of token ids >= 0; got {ids!r:.60}")
                found[(str(r["row"]), int(r["prompt"]))] = ids
            except (ValueError, KeyError, TypeError) as err:
                raise SystemExit(f"{path}, line {number}: not a row record ({err})") from None
    return found
