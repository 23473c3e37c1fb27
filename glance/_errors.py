"""How the stages and the ``glance`` command end on an error: one line, or a traceback.

A refusal GLANCE means (its own errors, a bad value, a damaged or missing file)
ends the program with status 2 and one line on stderr, the error's message,
which names the file, key or field. A programming error (``TypeError``,
``KeyError``, a failed ``assert``, ...) is a bug and keeps its traceback.
``GLANCE_DEBUG=1`` prints the traceback of a refusal too, above its line.

A SIGTERM (``kill``, a scheduler's stop, torchrun stopping the other ranks)
becomes ``SystemExit(143)``, so the ``except BaseException`` cleanups of
:mod:`glance._io` remove their temporary files before the process ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback

#: the exit status of a refusal, as argparse's for a bad argument
STATUS = 2
#: the exit status after a SIGTERM: 128 + 15, as a shell reports it
SIGTERM_STATUS = 128 + signal.SIGTERM


def _refusals() -> tuple[type[BaseException], ...]:
    """The error types that are refusals, not bugs. ``OSError`` counts when it
    names a file (an ``OSError`` without one is the machine's, not the
    input's, and keeps its traceback: see :func:`message`)."""
    from glance.core.numerics import NumericsError

    kinds: list[type[BaseException]] = [
        ValueError,  # json.JSONDecodeError, glance.training.corpus.CorpusError, HFValidationError
        OSError,  # FileNotFoundError, huggingface_hub's LocalEntryNotFoundError
        NumericsError,
    ]
    with contextlib.suppress(ImportError):
        from safetensors import SafetensorError

        kinds.append(SafetensorError)
    with contextlib.suppress(ImportError):
        from huggingface_hub.errors import EntryNotFoundError

        kinds.append(EntryNotFoundError)
    return tuple(kinds)


def message(err: BaseException) -> str | None:
    """``err``'s message as one line (newlines flattened), or ``None`` when
    ``err`` is a bug that keeps its traceback."""
    if not isinstance(err, _refusals()) and not _not_lossless(err):
        return None
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    if (
        isinstance(err, OSError)
        and not isinstance(err, FileNotFoundError)
        and err.filename is None
        and "/" not in text
        and os.sep not in text
    ):
        return None  # the machine's error, not an input's: no file to name
    if isinstance(err, json.JSONDecodeError) or not text:
        text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text


def _not_lossless(err: BaseException) -> bool:
    """Whether ``err`` is :class:`glance.experiments.gate.NotLossless`, an
    ``AssertionError`` that is a result, not a bug; matched by name, so that
    every stage's import closure (its DVC deps) stays without the gate."""
    kind = type(err)
    return kind.__name__ == "NotLossless" and kind.__module__ == "glance.experiments.gate"


@contextlib.contextmanager
def reported():
    """Run the block; a refusal (:func:`message`) ends the process with
    :data:`STATUS` and its one line on stderr (the traceback above it with
    ``GLANCE_DEBUG=1``); any other error propagates with its traceback."""
    try:
        yield
    except Exception as err:  # noqa: BLE001  (sorted into refusals and bugs)
        line = message(err)
        if line is None:
            raise
        if os.environ.get("GLANCE_DEBUG", "") not in ("", "0"):
            traceback.print_exc(file=sys.stderr)
        print(line, file=sys.stderr, flush=True)
        raise SystemExit(STATUS) from None


def stop_on_sigterm() -> None:
    """Make a SIGTERM raise ``SystemExit(143)`` in the main thread, so cleanups
    run; a handler someone else installed is kept."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
    raise SystemExit(SIGTERM_STATUS)
