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
    MAX_BUDGET,
    MIN_PROMPTS,
    TIMINGS,
    auto_cost,
    budget,
    check_config,
    integer,
    number,
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
        from glance.experiments.gate import NotLossless

        check_config(cfg)
        pin_numerics(cfg)
        try:
            return fn(cfg)
        except NotLossless as err:
            raise SystemExit(str(err)) from None

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


def task_records(cfg: DictConfig, task: DictConfig, n: int | None) -> list[dict]:
    """The first ``n`` records of the task's JSONL file (all when ``None``; the
    rest of the file is not read); each image must exist inside the data
    folder. Errors name the file and line."""
    from glance._io import inside
    from glance.data.tasks import numbered_records

    data_dir = Path(cfg.paths.data)
    path = inside(data_dir, str(task.file), f"task {task.name}: file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing task file; run `python -m stages.prepare`")
    numbered = numbered_records(path, limit=n)
    records = [r for _, r in numbered]
    for line, r in numbered:
        if not inside(data_dir, r["image"], f"{path}:{line}: image").is_file():
            raise FileNotFoundError(f"{path}:{line}: image {r['image']} not under {data_dir}")
    if n is not None and len(records) < n:
        raise ValueError(f"{path}: {len(records)} records; this run needs {n}")
    return records


def decode_settings(cfg: DictConfig, task: DictConfig | None = None) -> dict:
    """The decode settings that run: ``budget`` (an integer in 1..MAX_BUDGET,
    or ``"auto"``), ``branch_k``, ``n``, ``context``, ``max_new_tokens`` (the
    task's own when null), ``timing``, ``temperature`` and ``extend_budget``.
    :func:`app` has checked them already; a bad value here exits naming the
    key, the value and what is allowed. Nothing is coerced."""
    out = {
        "budget": budget("budget", cfg.budget),
        "branch_k": integer("branch_k", cfg.branch_k, 1),
        "n": integer("n", cfg.n, MIN_PROMPTS),
        "context": integer("context", cfg.context, 0),
        "extend_budget": integer("extend_budget", cfg.extend_budget, 0, MAX_BUDGET),
    }
    if cfg.max_new_tokens is not None:
        out["max_new_tokens"] = integer("max_new_tokens", cfg.max_new_tokens, 1)
    elif task is not None:
        out["max_new_tokens"] = integer("task.max_new_tokens", task.max_new_tokens, 1)
    if cfg.timing not in TIMINGS:
        raise SystemExit(f"timing: expected one of {TIMINGS}; got {cfg.timing!r}")
    out["timing"] = str(cfg.timing)
    out["temperature"] = number("temperature", cfg.temperature, 0)
    return out


def verify_costs(cfg: DictConfig):
    """The run's :class:`glance.core.budget.VerifyCosts`: ``target.auto_cost`` when
    the config fixes it (the auto rows then reproduce bit for bit), else a
    book that measures a target's verify cost once per stage process."""
    global _measured
    from glance.core.budget import VerifyCosts

    fixed = auto_cost(cfg)
    if fixed is not None:
        return VerifyCosts(fixed=fixed)
    if _measured is None:
        _measured = VerifyCosts()
    return _measured


_measured = None  # the process's book of measured costs


def load_target(cfg: DictConfig):
    """The target and processor that the target stage resolved (``target.json``)."""
    from glance.targets.vl import load_target as load

    info = read_json(Path(cfg.paths.target) / "target.json", "run `python -m stages.target` first")
    if cfg.target.source == "toy":
        import glance.toy.world  # noqa: F401  (registers the toy processor)
    return load(
        Path(info["path"]) if info.get("local") else info["path"],
        dtype=torch_dtype(cfg.dtype),
        device=cfg.device,
        revision=info.get("revision"),
    )


def target_positions(cfg: DictConfig) -> int | None:
    """The target's positions (its text model's ``max_position_embeddings``),
    read from its config alone; ``None`` when the config is out of reach."""
    from transformers import AutoConfig

    info = read_json(Path(cfg.paths.target) / "target.json", "run `python -m stages.target` first")
    try:
        config = AutoConfig.from_pretrained(str(info["path"]), revision=info.get("revision"))
    except (OSError, ValueError):
        return None
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def check_context(cfg: DictConfig, settings: dict) -> None:
    """Exit naming ``context`` when its filler and ``max_new_tokens`` cannot fit
    the target's positions, before any model loads or text is tokenised."""
    limit = target_positions(cfg)
    need = settings["context"] + settings.get("max_new_tokens", 0) + 1
    if limit is not None and need > limit:
        raise SystemExit(
            f"context: {settings['context']} filler tokens and max_new_tokens="
            f"{settings.get('max_new_tokens', 0)} exceed the target's {limit} positions"
        )


def load_head(cfg: DictConfig, target):
    """The head that the head stage trained or checked (``head.json``), fitted to ``target``."""
    import glance

    info = read_json(Path(cfg.paths.head) / "head.json", "run `python -m stages.head` first")
    head = glance.load_block_head(Path(info["path"]), target=target)
    return head.to(device=target.device, dtype=target.dtype)


def extend_row(cfg: DictConfig, head) -> int:
    """``decode.extend_row`` when the head can extend (variable mask span), else 0."""
    from glance.heads.block import check_head_extends

    n = int(cfg.decode.extend_row)
    if n <= 0:
        return 0
    try:
        check_head_extends(head)
    except ValueError as err:
        log.warning("decode.extend_row=%d skipped: %s", n, err)
        return 0
    return n


def token_recipe(cfg: DictConfig, settings: dict, extend: int) -> dict:
    """Everything a decode row's token ids depend on, beyond the prompt's index
    and the row's name: two runs with equal recipes give the same ids on the
    same prompts, so the audit can take the decode stage's instead of decoding
    again (``outputs.jsonl``)."""
    cost = cfg.target.get("auto_cost")
    return {
        "target": str(cfg.target.name),
        "head": str(cfg.head.name),
        "data": str(cfg.paths.data),
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "seed": int(cfg.seed),
        "top_p": float(cfg.decode.top_p),
        "top_k": int(cfg.decode.top_k),
        "auto_cost": None if cost is None else OmegaConf.to_container(cost),
        "extend_row": int(extend),
        "numerics": numerics_record(cfg),
        **{k: settings[k] for k in ("budget", "branch_k", "context", "extend_budget")},
        **{k: settings[k] for k in ("max_new_tokens", "temperature")},
    }


def outputs_text(recipe: dict, ids: dict) -> str:
    """``outputs.jsonl``'s text: the recipe, then one line per row and prompt
    (``ids``: row -> one token list per measured prompt, prompts numbered from 1)."""
    lines = [json.dumps({"recipe": recipe})]
    for row, prompts in ids.items():
        lines += [json.dumps({"row": row, "prompt": i, "ids": t}) for i, t in enumerate(prompts, 1)]
    return "\n".join(lines) + "\n"


def write_outputs(path, recipe: dict, ids: dict) -> None:
    """Write :func:`outputs_text` to ``path``, atomically."""
    atomic_write_text(path, outputs_text(recipe, ids))


def read_outputs(path, recipe: dict) -> dict:
    """``{(row, prompt): ids}`` from an ``outputs.jsonl`` written under
    ``recipe``; empty when the file is missing or its recipe differs."""
    from glance._io import check_set

    path = Path(path)
    if not path.is_file():
        return {}
    try:  # one decode run's set, not a file left beside another run's
        check_set(path.parent, names=(path.name,))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    with path.open(encoding="utf-8") as f:
        try:
            head = json.loads(f.readline() or "{}")
        except ValueError as err:
            raise SystemExit(f"{path}, line 1: not a recipe record ({err})") from None
        if not isinstance(head, dict):
            raise SystemExit(f"{path}, line 1: expected a recipe record; got {head!r:.60}")
        if head.get("recipe") != recipe:
            return {}
        found = {}
        for number, line in enumerate(f, 2):
            try:
                r = json.loads(line)
                ids = r["ids"]
                if not isinstance(ids, list) or any(
                    isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids
                ):
                    raise ValueError(f"ids: expected a list of token ids >= 0; got {ids!r:.60}")
                found[(str(r["row"]), int(r["prompt"]))] = ids
            except (ValueError, KeyError, TypeError) as err:
                raise SystemExit(f"{path}, line {number}: not a row record ({err})") from None
    return found


def sampling_kwargs(cfg: DictConfig, temperature: float, prompt: int) -> dict:
    """``generate`` keyword arguments for one prompt at ``temperature``: the
    config's top-p and top-k, and a CPU generator seeded from ``seed`` and the
    prompt's index, so a rerun draws the same text."""
    import torch

    if float(temperature) == 0:
        return {}
    g = torch.Generator().manual_seed(int(cfg.seed) * 1_000_003 + prompt)
    return dict(
        temperature=float(temperature),
        top_p=float(cfg.decode.top_p),
        top_k=int(cfg.decode.top_k),
        generator=g,
    )


def filler(n_tokens: int, tokenizer) -> str:
    """:func:`glance.targets.vl.filler`: the preamble of the context runs."""
    from glance.targets.vl import filler as text

    return text(n_tokens, tokenizer)


def prompt_inputs(processor, record: dict, data_dir, preamble: str = ""):
    """:func:`glance.targets.vl.chat_inputs` for one task record: its question (after
    the optional preamble), then its image."""
    from PIL import Image

    from glance.data.tasks import check_image
    from glance.targets.vl import chat_inputs

    path = Path(data_dir) / record["image"]
    check_image(path, f"image {path}")  # bounded before decoding, named on failure
    with Image.open(path) as img:
        image = img.convert("RGB")
    return chat_inputs(processor, preamble + record["prompt"], image)


def plain(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)
