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
    if not isinstance(relative, str) or not relative or "\0" in relative:
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


_PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def checkpoint_path(name_or_path, what: str):
    """``name_or_path`` as a local folder (a ``Path``) or a hub id (a ``str``).

    A ``Path``, or a string that exists, starts with ``/``, ``.`` or ``~``, or
    has more than one ``/``, is local: it must be a folder holding
    ``config.json``, or this raises ``FileNotFoundError`` naming it, before any
    network attempt. Any other string (``"org/name"``, ``"gpt2"``) is a hub id.
    """
    text = str(name_or_path)
    local = Path(text).expanduser()
    is_local = (
        isinstance(name_or_path, os.PathLike)
        or local.exists()
        or text.startswith(("/", ".", "~"))
        or text.count("/") > 1
    )
    if not is_local:
        return text
    if not local.is_dir():
        raise FileNotFoundError(f"{what} {text}: no such checkpoint folder")
    if not (local / "config.json").is_file():
        raise FileNotFoundError(f"{what} {text}: no config.json, so this is not a saved checkpoint")
    return local


def load_strict(cls, name_or_path, what: str, allow_pickle: bool = False, **kwargs):
    """``cls.from_pretrained(name_or_path, **kwargs)``, refusing any mismatch.

    Loads safetensors only unless ``allow_pickle`` (a pickle can run code when
    it loads). Missing, unexpected or mis-shaped weights raise ``ValueError``
    naming them, where ``from_pretrained`` would only print a report and
    initialise the missing ones at random.
    """
    path = checkpoint_path(name_or_path, what)
    if isinstance(path, Path) and not allow_pickle and not any(path.glob("*.safetensors")):
        pickles = sorted(p.name for pattern in _PICKLE_WEIGHTS for p in path.glob(pattern))
        found = f"pickle weights {pickles}" if pickles else "no weight files"
        raise ValueError(
            f"{what} {path}: {found} and no *.safetensors; GLANCE loads safetensors only "
            "(convert the weights, or pass allow_pickle=True if you trust the file)"
        )
    model, info = cls.from_pretrained(
        str(path),
        output_loading_info=True,
        use_safetensors=None if allow_pickle else True,
        **kwargs,
    )
    problems = [
        f"{label} {sorted(info.get(key) or ())[:8]}"
        + (f" and {len(info[key]) - 8} more" if len(info.get(key) or ()) > 8 else "")
        for key, label in (
            ("missing_keys", "missing"),
            ("unexpected_keys", "unexpected"),
            ("mismatched_keys", "mis-shaped"),
        )
        if info.get(key)
    ]
    if problems:
        raise ValueError(
            f"{what} {path}: the checkpoint does not match {cls.__name__}: "
            + "; ".join(problems)
            + " weights"
        )
    return model
