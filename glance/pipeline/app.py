"""What every stage shares: the Hydra entry point, numerics, seeding, loading.

A stage is ``@app def main(cfg)``: :func:`app` composes ``conf/`` (or the
overrides ``dvc.yaml`` passes from ``params.yaml``), builds and checks the
typed :class:`~glance.pipeline.config.Config` before any model loads, pins the
CPU numerics, and hands ``main`` the built object.
"""

from __future__ import annotations

import functools
import logging
import random
import sys
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from glance._errors import reported, stop_on_sigterm
from glance.core.numerics import NumericsError, pin, record
from glance.pipeline.config import Config, Task, build, check_config
from glance.pipeline.config import numerics as numerics_of

#: the pipeline's config folder: ``conf/`` at the repository root
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
log = logging.getLogger("glance")


def app(fn):
    """``fn(cfg)`` as a Hydra app over ``conf/config.yaml``. The composed
    config is built into a :class:`~glance.pipeline.config.Config` and checked
    first (:func:`glance.pipeline.config.build`), so a bad value exits in
    milliseconds, before any model loads; then the CPU numerics are pinned
    (:func:`pin_numerics`), and ``fn`` receives the built config.

    A refusal (a project error, a bad value, a damaged or missing file) ends
    the stage with status 2 and one line on stderr; a bug keeps its traceback
    (:func:`glance._errors.reported`). A SIGTERM ends it with status 143 after
    its temporary files are removed (:func:`glance._errors.stop_on_sigterm`)."""

    @functools.wraps(fn)
    def checked(composed: DictConfig):
        with reported():  # a refusal is one line and status 2, a bug its traceback
            cfg = build(composed)
            pin_numerics(cfg)
            return fn(cfg)

    hydra_main = hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")(checked)

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        stop_on_sigterm()  # so a killed stage removes its temporary files
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


def pin_numerics(cfg: Config) -> None:
    """Pin ``cfg.numerics`` (:func:`glance.core.numerics.pin`). A stage run as a
    program re-executes itself under the pinned environment when it was not
    started with it; called in a process where torch or numpy already loaded
    with other numerics, it exits naming the variable."""
    try:
        pin(numerics_of(cfg), reexec=_run_as_stage())
    except NumericsError as err:
        raise SystemExit(str(err)) from None


def numerics_record(cfg: Config) -> dict:
    """The numerics an output was made under (:func:`glance.core.numerics.record`)."""
    return record(numerics_of(cfg))


def timing_record(cfg: Config) -> tuple[dict, str]:
    """What a timing stage records of the machine it timed on: the numerics
    record plus the CPU (:func:`glance.core.numerics.cpu`), and one line that
    says so above its tables."""
    from glance.core.numerics import cpu, describe_timing_machine

    pinned = numerics_of(cfg)
    return numerics_record(cfg) | {"cpu": cpu()}, describe_timing_machine(pinned)


def setup(cfg: Config) -> None:
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


def torch_dtype(name: str):
    import torch

    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype: expected a torch dtype name such as float32; got {name!r}")
    return dtype


def task_config(cfg: Config) -> Task:
    """``cfg.task``, or a clear error naming the missing ``+task=...``."""
    if cfg.task is None:
        options = ", ".join(sorted(p.stem for p in (Path(CONF_DIR) / "task").glob("*.yaml")))
        raise SystemExit(f"no task: add +task=NAME, one of {options}")
    return cfg.task


def task_by_name(name: str) -> Task:
    """``conf/task/<name>.yaml``, for stages that loop over ``cfg.tasks``."""
    path = Path(CONF_DIR) / "task" / f"{name}.yaml"
    if not path.is_file():
        options = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise SystemExit(f"tasks: no task {name!r}; options are {options}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Task), OmegaConf.load(path))
    except Exception as err:  # noqa: BLE001  (a type error, named with the file)
        raise SystemExit(f"{path}: {str(err).splitlines()[0]}") from None
    return OmegaConf.to_object(merged)


def load_target(cfg: Config):
    """The target and processor that the target stage resolved (``target.json``)."""
    from glance.pipeline.files import read_json
    from glance.targets.vl import load_target as load

    info = read_json(Path(cfg.paths.target) / "target.json", "run `python -m stages.target` first")
    return load(
        Path(info["path"]) if info.get("local") else info["path"],
        dtype=torch_dtype(cfg.dtype),
        device=cfg.device,
        revision=info.get("revision"),
    )
