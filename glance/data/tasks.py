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


def numbered_records(path, limit: int | None = None) -> list[tuple[int, dict]]:
    """Parse a task JSONL file: one JSON object per line with a non-empty
    string ``image`` (a path relative to the file's folder) and a non-empty
    string ``prompt``; blank lines are skipped. Returns ``(line, record)``
    pairs, numbered as the file's lines are; with ``limit``, only the first
    ``limit`` records (the rest of the file is not read). Anything else raises
    ``ValueError`` naming the file and line."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if limit is not None and len(records) >= limit:
                    break
                record = _record(path, number, line)
                if record is not None:
                    records.append((number, record))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err})") from err
    return records


def _record(path, number: int, line: str) -> dict | None:
    """One line's record, ``None`` for a blank line, or ``ValueError`` naming it."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path}:{number}: not JSON ({err})") from err
    if not isinstance(record, dict):
        raise ValueError(f"{path}:{number}: expected a JSON object; got {type(record).__name__}")
    missing = {"image", "prompt"} - set(record)
    if missing:
        raise ValueError(f"{path}:{number}: missing field(s) {sorted(missing)}")
    for key in ("image", "prompt"):
        value = record[key]
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{path}:{number}: {key}: expected a non-empty string; got {value!r}")
    return record


def read_task(path) -> list[dict]:
    """The records of a task JSONL file (:func:`numbered_records` without the numbers)."""
    return [record for _, record in numbered_records(path)]


#: the most pixels an image may have: Pillow's own decompression-bomb limit
#: (about 89 megapixels), treated as an error, not a warning, and checked from
#: the header, before any pixel is decoded
MAX_PIXELS = 89_478_485
#: the least side an image may have: vision processors patch images in 14 or 16
#: pixel squares and merge 2x2 of them, so a smaller image has no patch to read
MIN_SIDE = 28


def check_image(path: Path, where: str, decode: bool = True) -> tuple[int, int]:
    """``(width, height)`` of an image Pillow can decode, or ``ValueError``
    naming ``where``: not an image, more than :data:`MAX_PIXELS` pixels (read
    from the header, before decoding), or a side under :data:`MIN_SIDE`. With
    ``decode`` false only the header is read (a caller that decodes the image
    next anyway, and reports its errors, saves a second decode)."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                width, height = img.size
                if width * height > MAX_PIXELS:
                    raise ValueError(
                        f"{where}: image is {width}x{height}, {width * height} pixels; "
                        f"the limit is {MAX_PIXELS} (glance.data.tasks.MAX_PIXELS)"
                    )
                if decode:
                    img.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ValueError(
            f"{where}: image too large ({err}); the limit is {MAX_PIXELS} pixels "
            "(glance.data.tasks.MAX_PIXELS)"
        ) from err
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise ValueError(f"{where}: not an image Pillow can read ({err})") from err
    except ValueError as err:
        if str(err).startswith(where):
            raise
        raise ValueError(f"{where}: not an image Pillow can read ({err})") from err
    if min(width, height) < MIN_SIDE:
        raise ValueError(
            f"{where}: image is {width}x{height}; each side needs at least {MIN_SIDE} pixels "
            "(glance.data.tasks.MIN_SIDE) for the vision processor's patches"
        )
    return width, height


def head_lines(path, count: int) -> bytes:
    """The first ``count`` lines of the file at ``path``, byte for byte."""
    out = []
    with open(path, "rb") as f:
        for _, line in zip(range(count), f, strict=False):
            out.append(line)
    return b"".join(out)


def copy_folder(source, tasks, fill, need: int = 1) -> dict:
    """Check and copy ``<task>.jsonl`` and their images from ``source`` into
    ``fill``. Each record must parse, its image must stay inside the folder and
    open with Pillow (:func:`check_image`), and each file needs at least
    ``need`` records; only the first ``need`` are read and copied. Errors name
    the file and line."""
    from glance._io import inside

    source, counts = Path(source), {}
    for task in tasks:
        path = source / f"{task}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing task file (prepare.source={source})")
        records = numbered_records(path, limit=need)
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
        (Path(fill) / path.name).write_bytes(head_lines(path, records[-1][0]))
        counts[task] = len(records)
    return counts
