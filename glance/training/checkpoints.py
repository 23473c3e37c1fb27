"""Where a training run keeps its checkpoint between steps.

Each run has its own folder, ``<base>/<digest of its key>``, so two runs that
share ``paths.checkpoints`` (another learning rate, another seed) never
overwrite or remove each other's state. A run holds ``<folder>.lock`` while it
uses the folder; a second run of the same key is refused while the first
lives, and a lock whose process is gone is taken over. A finished run removes
its own folder and nothing else. A damaged checkpoint (garbage ``state.json``,
a truncated or missing weight file) is moved aside under a name that says so,
and the run starts afresh rather than being blocked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CheckpointBusy", "finish", "locked", "run_folder", "set_aside"]

log = logging.getLogger("glance")


class CheckpointBusy(RuntimeError):
    """Another live run holds the checkpoint folder's lock."""


def run_folder(base, key: str) -> Path:
    """``base / <16 hex digits of key's SHA-256>``: the run's own folder."""
    return Path(base) / hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def locked(folder) -> Iterator[Path]:
    """Hold ``<folder>.lock`` (this process's pid and host) for the block;
    then remove the lock, and its parent if that is left empty.

    Raises :class:`CheckpointBusy`, naming the lock, when a live process on
    this host holds it, or a process on another host (which this one cannot
    check: remove the lock if that run is gone). A lock whose process is gone
    is taken over."""
    folder = Path(folder)
    lock = folder.with_name(folder.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    mine = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            try:
                other = json.loads(lock.read_text(encoding="utf-8"))
                pid, host = int(other["pid"]), str(other["host"])
            except (OSError, ValueError, KeyError, TypeError):
                pid, host = None, mine["host"]  # half-written by a killed run
            if pid is not None and (host != mine["host"] or _alive(pid)):
                where = f"process {pid}" + ("" if host == mine["host"] else f" on {host}")
                raise CheckpointBusy(
                    f"{lock}: {where} is training this very run in {folder}; wait for it, or "
                    "remove the lock if that run is gone"
                ) from None
            log.warning("%s: its process is gone; taking the checkpoint over", lock)
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(mine) + "\n")
        break
    else:
        raise CheckpointBusy(f"{lock}: could not take the lock (another run keeps taking it)")
    try:
        yield folder
    finally:
        try:
            if json.loads(lock.read_text(encoding="utf-8")) == mine:
                lock.unlink()
        except (OSError, ValueError):
            pass
        with contextlib.suppress(OSError):  # the stage's folder, once no run uses it
            lock.parent.rmdir()


def finish(folder) -> None:
    """Remove the finished run's checkpoint ``folder``, if it is one GLANCE
    wrote as a checkpoint (anything else is left where it is, with a warning),
    then its parent if that is left empty."""
    from glance._io import MARKER

    folder = Path(folder)
    if not folder.exists():
        return
    try:
        kind = json.loads((folder / MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != "checkpoint":
        log.warning("%s: not a checkpoint GLANCE wrote; leaving it in place", folder)
        return
    shutil.rmtree(folder)
    with contextlib.suppress(OSError):  # the stage's folder, once no run has one there
        folder.parent.rmdir()


def set_aside(folder, why: str) -> Path:
    """Move the damaged checkpoint ``folder`` to ``<folder>.damaged-<n>``
    (the first free ``n``), log ``why``, and return the new path."""
    folder = Path(folder)
    n = 1
    while (aside := folder.with_name(f"{folder.name}.damaged-{n}")).exists():
        n += 1
    os.replace(folder, aside)
    log.warning(
        "checkpoint %s is damaged (%s); moved it to %s and starting afresh", folder, why, aside
    )
    return aside
