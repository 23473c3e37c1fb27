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
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: the file that marks a folder as one GLANCE wrote: it lists the files of the
#: set with their SHA-256, so a folder is only ever replaced if it holds what we
#: wrote there, and a reader can check that it reads one set
MARKER = ".glance-output"
#: version-control bookkeeping that may sit in an output folder (DVC writes a
#: ``.gitignore`` beside its outputs); carried over when the folder is replaced
BOOKKEEPING = (".gitignore", ".dvcignore")


def _digest(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _listing(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): _digest(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER and p.relative_to(folder).as_posix() not in BOOKKEEPING
    }


def _marker(folder: Path, what: str) -> dict:
    """``folder``'s :data:`MARKER` record, or ``ValueError`` naming it."""
    import json

    path = folder / MARKER
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(
            f"{what} {folder}: {MARKER} is not a GLANCE output marker ({err})"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("files", {}), dict):
        raise ValueError(f"{what} {folder}: {MARKER} is not a GLANCE output marker")
    return record


def _shown(names) -> str:
    names = sorted(names)
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_replaceable(path, what: str, expect=(), kind: str | None = None) -> None:
    """Refuse, naming ``what`` and ``path``, to replace a folder this kind of
    output does not own. ``path`` may be missing, or empty (version-control
    bookkeeping aside); or marked by :data:`MARKER` as ``kind`` (a marker of
    another kind, a stage's head where a scorer would go say, is refused) and
    holding no file the marker does not list (a file the user put there would
    be lost); or, unmarked, hold only names in ``expect`` (the set about to be
    written). A marker without a kind (written before kinds were recorded)
    passes only when it lists nothing outside ``expect``. Anything else, a
    repository root say, raises ``ValueError`` before any work is done; so
    does an unwritable parent."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ValueError(f"{what} {path}: exists and is not a folder; expected a folder to write")
    if path.is_dir() and (path / MARKER).is_file():
        record = _marker(path, what)
        theirs = record.get("kind")
        if theirs is not None and kind is not None and theirs != kind:
            raise ValueError(
                f"{what} {path}: holds GLANCE's {theirs} output, not a {kind}; refusing to "
                "replace it. Point it at a folder of its own"
            )
        listed = set(record.get("files") or ())
        if theirs is None and expect:
            extra = {name.split("/")[0] for name in listed} - set(expect)
            if extra:
                raise ValueError(
                    f"{what} {path}: holds another kind of GLANCE output ({_shown(extra)}); "
                    "refusing to replace it. Point it at a folder of its own"
                )
        if "files" in record:
            known = listed | {MARKER, *BOOKKEEPING}
            found = (p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
            unlisted = [name for name in found if name not in known]
            if unlisted:
                raise ValueError(
                    f"{what} {path}: holds files GLANCE did not write ({_shown(unlisted)}) "
                    "beside its output; refusing to replace it. Move them out first"
                )
    elif path.is_dir():
        foreign = [p.name for p in path.iterdir() if p.name not in BOOKKEEPING + tuple(expect)]
        if foreign:
            raise ValueError(
                f"{what} {path}: holds files GLANCE did not write ({_shown(foreign)}) and no "
                f"{MARKER}; refusing to replace it. Point it at a new or empty folder, or empty "
                "it yourself"
            )
    parent = path.parent if path.parent != Path("") else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{what} {path}: {probe} is a file, so no folder can be made there")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path}: {probe} is not writable")


def mark(folder, kind: str) -> None:
    """Mark ``folder``, which a stage fills file by file (the corpus, say), as
    GLANCE's output of ``kind``, without a listing of its files (its own
    index checks them)."""
    import json

    record = {"written_by": "glance", "kind": kind}
    atomic_write_text(Path(folder) / MARKER, json.dumps(record, indent=1, sort_keys=True) + "\n")


def check_set(folder, names=None) -> None:
    """Check that ``folder`` holds one written set: each file its
    :data:`MARKER` lists (or just ``names``) is present with the recorded
    SHA-256. A folder without a marker passes (written before markers, or by
    hand). Raises ``ValueError`` naming the folder and the file that differs."""
    import json

    folder = Path(folder)
    marker = folder / MARKER
    if not marker.is_file():
        return
    try:
        files = json.loads(marker.read_text(encoding="utf-8")).get("files") or {}
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{marker}: not a GLANCE output marker ({err})") from err
    for name, digest in files.items():
        if names is not None and name not in names:
            continue
        file = folder / name
        if not file.is_file() or _digest(file) != digest:
            raise ValueError(
                f"{folder}: {name} is not the one written with the rest of this folder "
                f"({MARKER}); the folder holds a mix of two runs; rerun the stage that writes it"
            )


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``);
    ``False`` where the system cannot."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the file system cannot
        return False
    raise OSError(errno, os.strerror(errno), f"{a} <-> {b}")


def replace_dir(
    path, fill, what: str = "output folder", expect=(), kind: str | None = None
) -> None:
    """Build a folder with ``fill(tmp_path)`` in a temporary sibling, then put it
    in place of ``path`` in one step, so a reader, or a killed run, leaves the
    old set or the new one, never a mix. ``path`` is first checked with
    :func:`check_replaceable` (``what``, ``expect`` and ``kind`` as there),
    before ``fill`` does any work. The new folder gets :data:`MARKER` (its
    kind, its files and their SHA-256), any bookkeeping the old one had, and
    the modes ``mkdir`` and ``open`` would give its folders and files (0755
    and 0644 under umask 022; ``save_pretrained`` writes weights 0600)."""
    import json
    import shutil

    path = Path(path)
    check_replaceable(path, what, expect, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # as mkdir would, not mkdtemp's 0700
        fill(tmp)
        for name in BOOKKEEPING:
            if (path / name).is_file() and not (tmp / name).exists():
                shutil.copy2(path / name, tmp / name)
        _follow_umask(tmp)
        marker = {"written_by": "glance", "files": _listing(tmp)}
        if kind is not None:
            marker["kind"] = kind
        atomic_write_text(tmp / MARKER, json.dumps(marker, indent=1, sort_keys=True) + "\n")
        if path.is_dir() and _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old set
        elif path.exists():
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


def _follow_umask(folder: Path) -> None:
    """Give everything under ``folder`` the mode ``mkdir`` or ``open`` would."""
    mask = _umask()
    for p in folder.rglob("*"):
        if not p.is_symlink():
            os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def write_files(folder, files: dict, check_writable: bool = True) -> None:
    """Write several files into a shared ``folder`` (``results/``, say) as one
    set: every temporary file is written first, so a full disk or a write error
    changes nothing, then each is renamed into place, the first-named last.
    ``files`` maps a file name to its text. The renames are not one step: a set
    whose readers must detect a kill between them records its siblings' SHA-256
    in its first file (:func:`set_digests`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmps = {}
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            tmps[name] = tmp
            os.fchmod(fd, 0o666 & ~_umask())
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        for name in reversed(list(files)):
            os.replace(tmps.pop(name), folder / name)
    finally:
        for tmp in tmps.values():
            Path(tmp).unlink(missing_ok=True)


def text_digest(text: str) -> str:
    """SHA-256 of ``text`` as :func:`write_files` writes it (UTF-8)."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_siblings(folder, digests: dict, where: str) -> None:
    """Check that each file named in ``digests`` (a set's first file's record
    of its siblings) in ``folder`` has that SHA-256; raises ``ValueError``
    naming ``where`` and the file, for a set mixed by a killed write."""
    for name, digest in digests.items():
        file = Path(folder) / name
        if not file.is_file() or _digest(file) != digest:
            raise ValueError(
                f"{where}: {file} is not the one written with it (a mix of two runs); "
                "rerun the stage that writes them"
            )


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
