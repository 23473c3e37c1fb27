"""The pipeline's output files: strict JSON, written atomically, as sets.

Every JSON a stage writes goes through :func:`write_json` or :func:`write_set`
(a NaN is refused, never written), wall times are split off into
``results/timing/`` (:func:`write_timing`), and every JSON a stage reads goes
through :func:`read_json`, which checks its set.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from glance._io import atomic_write_text


def write_json(path, data) -> None:
    """``data`` as strict JSON at ``path``, atomically (:func:`json_text`)."""
    atomic_write_text(path, json_text(data))


def json_text(data) -> str:
    """``data`` as indented strict JSON: a NaN or infinity raises
    ``ValueError`` rather than writing a bare ``NaN`` no JSON reader accepts."""
    try:
        return json.dumps(data, indent=2, default=_plain, allow_nan=False) + "\n"
    except ValueError as err:
        raise ValueError(
            f"refusing to write a non-finite number as JSON: {_non_finite(data)}"
        ) from err


def _non_finite(x, where="") -> str:
    """The first key path in ``x`` holding a NaN or infinity, for the error."""
    import math

    if isinstance(x, float | np.floating) and not math.isfinite(x):
        return f"{where or 'value'} = {x}"
    items = (
        x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list | tuple) else ()
    )
    for k, v in items:
        found = _non_finite(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return ""


def write_set(folder, name: str, data: dict, others: dict) -> None:
    """A JSON output ``name`` and its sibling files ``others`` (name -> text)
    into the shared ``folder``, as one set (:func:`glance._io.write_files`):
    the JSON records each sibling's SHA-256 under ``"files"``, which
    :func:`read_json` checks, so a kill between the renames is caught."""
    from glance._io import text_digest, write_files

    data = data | {"files": {k: text_digest(v) for k, v in others.items()}}
    write_files(folder, {name: json_text(data), **others})


def write_timing(cfg, stage: str, log: dict) -> dict:
    """Move the ``*seconds`` entries of a training ``log`` to
    ``results/timing/<stage>.json`` and return the rest: the wall times follow
    the machine, so they stay out of the outputs that must reproduce bit for bit."""
    rest, seconds = _split_seconds(log)
    seconds = (seconds or {}) | {"gauge_seconds": speed_gauge()}
    write_json(Path(cfg.paths.results) / "timing" / f"{stage}.json", seconds)
    return rest


def speed_gauge(repeats: int = 9) -> float:
    """Seconds of a fixed CPU workload on this process's threads (float32
    matrix products and elementwise passes at a toy training step's sizes),
    the fastest of ``repeats``. The same machine runs the same work up to 1.4x
    slower from one hour to the next, so a stage's wall time compares across
    runs only over the gauge measured beside it."""
    import time

    import torch

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2048, 128, generator=g), torch.randn(128, 128, generator=g)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(8):
            y = torch.nn.functional.silu(x @ w) * x
            (y.t() @ x).add_(w).mul_(0.5)
        best = min(best, time.perf_counter() - start)
    return best


def _split_seconds(x):
    """``(x without its *seconds keys, those keys in x's shape or None)``, at any depth."""
    if isinstance(x, dict):
        rest, timing = {}, {}
        for k, v in x.items():
            if k.endswith("seconds"):
                timing[k] = v
                continue
            rest[k], t = _split_seconds(v)
            if t:
                timing[k] = t
        return rest, timing or None
    if isinstance(x, list):
        pairs = [_split_seconds(v) for v in x]
        timing = [t for _, t in pairs]
        return [r for r, _ in pairs], timing if any(timing) else None
    return x, None


def read_json(path, what: str, nonnegative: bool = False) -> dict:
    """A stage's JSON output, checked where it is read: strict JSON (a bare
    ``NaN`` or ``Infinity`` is refused), with ``nonnegative`` no number below
    0 (a summary's times, rates, tau and ratios), and, when it records its set
    (``"files"``: sibling name -> SHA-256), siblings from the same run.
    ``what`` says how to make a missing file. Errors name the file and key."""
    from glance._io import check_siblings

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; {what}")

    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not a number JSON allows; expected a finite value")

    def finite(text):
        value = float(text)
        if not np.isfinite(value):
            refuse(text)
        return value

    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text, parse_constant=refuse, parse_float=finite)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not JSON ({err})") from err
    if nonnegative:
        bad = _negative(data)
        if bad:
            raise ValueError(f"{path}: {bad}; expected a number >= 0")
    if isinstance(data, dict) and isinstance(data.get("files"), dict):
        check_siblings(path.parent, data["files"], str(path))
    return data


def _negative(x, where="") -> str:
    """The first key path in ``x`` holding a negative number, for the error."""
    if isinstance(x, int | float) and not isinstance(x, bool) and x < 0:
        return f"{where or 'value'} = {x}"
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        found = _negative(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return ""


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"cannot write {type(x).__name__} as JSON")


def refuse_unreplaceable(path, key: str, files=(), kind: str | None = None, cfg=None) -> None:
    """Exit naming ``key`` when ``path`` may not be replaced by this stage's
    output of ``kind``: a folder GLANCE did not write, or wrote as another kind
    of output (:func:`glance._io.check_replaceable`), or, given the run's
    ``cfg``, a folder that another ``paths.*`` key names, contains or sits in
    (``paths.results`` aside, which holds the decode and sweep folders).
    Called before any work."""
    from glance._io import check_replaceable

    if cfg is not None:
        clash = _paths_clash(Path(path), key, cfg)
        if clash:
            raise SystemExit(clash)
    try:
        check_replaceable(path, key, expect=files, kind=kind)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _paths_clash(path: Path, key: str, cfg) -> str:
    """Why ``path`` (for ``key``) overlaps another ``paths.*`` folder, or ``""``."""
    from dataclasses import asdict

    mine = path.resolve()
    for name, value in asdict(cfg.paths).items():
        other = f"paths.{name}"
        if other == key or value is None:
            continue
        theirs = Path(str(value)).resolve()
        if mine == theirs:
            return f"{key} {path}: is {other}'s folder too; give each output its own folder"
        if mine in theirs.parents:
            return f"{key} {path}: holds {other} ({value}); replacing it would remove that"
        if theirs in mine.parents and name != "results":
            return f"{key} {path}: lies inside {other} ({value}); give it a folder of its own"
    return ""
