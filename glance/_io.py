"""Small file helpers shared by the library and the stages."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def inside(base, relative, where: str) -> Path:
    """``base / relative``, refused unless it resolves inside ``base`` (symlinks
    followed): a path read from data never leaves its folder. ``where`` (for
    example ``"tasks.jsonl:3"``) starts the error message."""
    root = Path(base).resolve()
    if not isinstance(relative, str) or not relative:
        raise ValueError(f"{where}: expected a non-empty relative path; got {relative!r}")
    if Path(relative).is_absolute():
        raise ValueError(f"{where}: path {relative!r} is absolute; expected one inside {base}")
    full = (root / relative).resolve()
    if full != root and root not in full.parents:
        raise ValueError(f"{where}: path {relative!r} leaves its folder {base}")
    return Path(base) / relative


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder, then
    rename it into place, so a reader never sees a half-written file. The file
    gets the mode a plain ``open()`` would give it (0644 under umask 022)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_dir(path, fill) -> None:
    """Build a folder with ``fill(tmp_path)`` in a temporary sibling, then put it
    in place of ``path``, so a reader never sees a half-written checkpoint. The
    folder gets the mode ``mkdir`` would give it (0755 under umask 022)."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # as mkdir would, not mkdtemp's 0700
        fill(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
