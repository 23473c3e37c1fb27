"""Task files: one JSON record per line, ``{"image", "prompt", ...}``.

Every task, real or toy, is read here. ``image`` is a path relative to the
file's folder (the stages check that it stays inside); ``prompt`` is the user
turn's question. Other fields (``answer``, ``lines``, ``parts``) ride along.
:func:`copy_folder` checks and copies a folder of them (images through Pillow).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["check_image", "copy_folder", "numbered_records", "read_task"]


def numbered_records(path) -> list[tuple[int, dict]]:
    """Parse a task JSONL file: one JSON object per line with a non-empty
    string ``image`` (a path relative to the file's folder) and a non-empty
    string ``prompt``; blank lines are skipped. Returns ``(line, record)``
    pairs, numbered as the file's lines are. Anything else raises
    ``ValueError`` naming the file and line."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = list(f)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err})") from err
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            raise ValueError(f"{path}:{number}: not JSON ({err})") from err
        if not isinstance(record, dict):
            raise ValueError(
                f"{path}:{number}: expected a JSON object; got {type(record).__name__}"
            )
        missing = {"image", "prompt"} - set(record)
        if missing:
            raise ValueError(f"{path}:{number}: missing field(s) {sorted(missing)}")
        for key in ("image", "prompt"):
            value = record[key]
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"{path}:{number}: {key}: expected a non-empty string; got {value!r}"
                )
        records.append((number, record))
    return records


def read_task(path) -> list[dict]:
    """The records of a task JSONL file (:func:`numbered_records` without the numbers)."""
    return [record for _, record in numbered_records(path)]


def check_image(path: Path, where: str) -> None:
    """Refuse, naming ``where``, an image Pillow cannot decode or an empty one."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            width, height = img.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise ValueError(f"{where}: not an image Pillow can read ({err})") from err
    except Image.DecompressionBombError as err:
        raise ValueError(f"{where}: image too large ({err})") from err
    if width == 0 or height == 0:
        raise ValueError(f"{where}: empty image ({width}x{height})")


def copy_folder(source, tasks, fill, need: int = 1) -> dict:
    """Check and copy ``<task>.jsonl`` and their images from ``source`` into
    ``fill``. Each record must parse, its image must stay inside the folder and
    open with Pillow, and each file needs at least ``need`` records; errors
    name the file and line."""
    from glance._io import inside

    source, counts = Path(source), {}
    for task in tasks:
        path = source / f"{task}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing task file (prepare.source={source})")
        records = numbered_records(path)
        if len(records) < need:
            raise ValueError(
                f"{path}: {len(records)} records; the pipeline needs at least {need} "
                "(n measured prompts and one warm-up)"
            )
        for number, r in records:
            where = f"{path}:{number}: image {r['image']!r}"
            image = inside(source, r["image"], where)
            if not image.is_file():
                raise FileNotFoundError(f"{where} not found")
            check_image(image, where)
            target = inside(fill, r["image"], where)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(image, target)
        shutil.copyfile(path, Path(fill) / path.name)
        counts[task] = len(records)
    return counts
