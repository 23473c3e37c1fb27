"""What every stage shares: the Hydra entry point, seeding, model and task loading.

Stages are thin: each composes ``conf/`` (or takes the overrides ``dvc.yaml``
passes from ``params.yaml``), calls the library, and writes to fixed paths built
from the config, atomically.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import sys
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from glance._io import atomic_write_text
from glance.core.numerics import NumericsError, pin, record
from stages.schema import (
    check_config,
)
from stages.schema import numerics as numerics_of

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
log = logging.getLogger("glance")


def app(fn):
    """``fn(cfg)`` as a Hydra app over ``conf/config.yaml``. The composed
    config is checked against the typed schema (:mod:`stages.schema`) first, so
    a bad value exits in milliseconds, before any model loads; then the CPU
    numerics are pinned (:func:`pin_numerics`)."""

    @functools.wraps(fn)
    def checked(cfg: DictConfig):
        check_config(cfg)
        pin_numerics(cfg)
        return fn(cfg)

    hydra_main = hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")(checked)

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        if _run_as_stage() and not args and not kwargs:
            _pin_before_launch()
        return hydra_main(*args, **kwargs)

    return entry


def _pin_before_launch() -> None:
    """Compose the command line's ``numerics`` and ``threads`` and pin them
    (re-executing the process) before Hydra launches any job, so that a
    multirun's worker processes start pinned too. A command line this cannot
    read is left to :func:`pin_numerics` in the job itself."""
    from hydra import compose, initialize_config_dir

    args, name = sys.argv[1:], "config"
    for i, a in enumerate(args):
        if a in ("--config-name", "-cn") and i + 1 < len(args):
            name = args[i + 1]
        elif a.startswith("--config-name="):
            name = a.split("=", 1)[1]
    keys = ("numerics", "threads", "+numerics", "+threads", "++numerics", "++threads")
    overrides = [a for a in args if "=" in a and a.split("=", 1)[0].split(".")[0] in keys]
    try:
        with initialize_config_dir(CONF_DIR, version_base=None):
            cfg = compose(config_name=name, overrides=overrides)
        check_config(cfg)
    except Exception:  # noqa: BLE001  (the job's own composition reports it)
        return
    pin_numerics(cfg)


def _run_as_stage() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return bool(spec and spec.name.startswith("stages."))


def pin_numerics(cfg: DictConfig) -> None:
    """Pin ``cfg.numerics`` (:func:`glance.core.numerics.pin`). A stage run as a
    program re-executes itself under the pinned environment when it was not
    started with it; called in a process where torch or numpy already loaded
    with other numerics, it exits naming the variable."""
    try:
        pin(numerics_of(cfg), reexec=_run_as_stage())
    except NumericsError as err:
        raise SystemExit(str(err)) from None


def numerics_record(cfg: DictConfig) -> dict:
    """The numerics an output was made under (:func:`glance.core.numerics.record`)."""
    return record(numerics_of(cfg))


def setup(cfg: DictConfig) -> None:
    """Seed every generator from ``cfg.seed``, set torch's thread count, and
    check that ``cfg.device`` exists here, before any model loads."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    check_device(str(cfg.device))


def check_device(device: str) -> None:
    """Exit naming ``device`` when this machine has no such device."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise SystemExit(f"device: expected cpu, cuda or cuda:N; got {device!r} ({err})") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise SystemExit(
                f"device: {device!r}, but this machine has no CUDA device; use device=cpu"
            )
        if dev.index is not None and dev.index >= count:
            raise SystemExit(f"device: {device!r}, but this machine has {count} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise SystemExit(f"device: {device!r}, but MPS is not available here; use device=cpu")


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


def write_timing(cfg: DictConfig, stage: str, log: dict) -> dict:
    """Move the ``*seconds`` entries of a training ``log`` to
    ``results/timing/<stage>.json`` and return the rest: the wall times follow
    the machine, so they stay out of the outputs that must reproduce bit for bit."""
    rest, seconds = _split_seconds(log)
    write_json(Path(cfg.paths.results) / "timing" / f"{stage}.json", seconds or {})
    return rest


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


def torch_dtype(name: str):
    import torch

    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype: expected a torch dtype name such as float32; got {name!r}")
    return dtype


def task_config(cfg: DictConfig) -> DictConfig:
    """``cfg.task``, or a clear error naming the missing ``+task=...``."""
    if "task" not in cfg:
        options = ", ".join(sorted(p.stem for p in (Path(CONF_DIR) / "task").glob("*.yaml")))
        raise SystemExit(f"no task: add +task=NAME, one of {options}")
    return cfg.task


def task_by_name(name: str) -> DictConfig:
    """``conf/task/<name>.yaml``, for stages that loop over ``cfg.tasks``."""
    path = Path(CONF_DIR) / "task" / f"{name}.yaml"
    if not path.is_file():
        options = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise SystemExit(f"tasks: no task {name!r}; options are {options}")
    return OmegaConf.load(path)


def load_target(cfg: DictConfig):
    """The target and processor that the target stage resolved (``target.json``)."""
    from glance.targets.vl import load_target as load

    info = read_json(Path(cfg.paths.target) / "target.json", "run `python -m stages.target` first")
    if cfg.target.source == "toy":
        import glance.toy.processor  # noqa: F401  (registers the toy processor)
    return load(
        Path(info["path"]) if info.get("local") else info["path"],
        dtype=torch_dtype(cfg.dtype),
        device=cfg.device,
        revision=info.get("revision"),
    )


def plain(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)
