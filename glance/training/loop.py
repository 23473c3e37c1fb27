"""The training loop every draft head shares: deterministic kernels, AdamW with
warm-up and cosine decay, gradient clipping, a held-out curve and the log.

A head kind supplies only its loss on a batch (drawn from the loop's seeded
generator) and its loss on one held-out row; :func:`fit` does the rest, so the
block head (:mod:`glance.training.block`) and the EAGLE-style head
(:mod:`glance.training.eagle`) train under the same schedule and seeds.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "PROBE_SEED",
    "Clock",
    "RunFiles",
    "deterministic",
    "fit",
    "lr_at",
    "my_share",
    "optimizer_step",
    "world",
]

#: the seed every trainer's held-out probe is drawn from, whatever the run's
#: own seed: with the training seed, each seed's run was scored on a probe of
#: its own, and the committed block head's loss moves 5% between two draws
PROBE_SEED = 0


@contextmanager
def deterministic() -> Iterator[None]:
    """Bit-reproducible kernels inside the block (cuBLAS needs a fixed workspace
    for them), restored to the caller's setting afterwards."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def lr_at(step: int, cfg) -> float:
    """Learning rate at ``step`` for a config with ``lr``, ``warmup`` and ``steps``:
    linear warm-up, then cosine decay to a tenth."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    done = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))


def optimizer_step(optim, module, loss, lr: float, clip: float = 1.0, clock=None) -> float:
    """One clipped AdamW step at learning rate ``lr``; returns the loss as a float.
    ``clock`` (a :class:`Clock`), when given, is charged the backward pass and
    the optimizer's step apart."""
    clock = clock or Clock()
    for group in optim.param_groups:
        group["lr"] = lr
    with clock("backward"):
        optim.zero_grad(set_to_none=True)
        loss.backward()
    with clock("optimizer"):
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optim.step()
    return float(loss.detach())


class Clock:
    """Wall seconds by phase: ``with clock("backward"): ...`` adds the block's time."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class RunFiles:
    """Where a training run keeps its state between steps.

    ``checkpoint``: a folder for the run's checkpoint, written every
    ``save_every`` steps (0: never) and read back when the same run starts
    again; ``key`` says what run it is (the config, the corpus, the target), so
    a checkpoint of another run is never resumed. ``live``: a folder for
    dvclive's metrics (``dvc plots show``, ``dvc exp show``), or ``None``.
    """

    checkpoint: Path | None = None
    save_every: int = 0
    key: str = ""
    live: Path | None = None
    log_every: int = 25


def world() -> tuple[int, int]:
    """``(rank, size)`` of the ``torch.distributed`` group, ``(0, 1)`` without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def my_share(count: int) -> range:
    """The contiguous share of ``count`` global batch rows this rank computes."""
    rank, size = world()
    return range(rank * count // size, (rank + 1) * count // size)


class NonFiniteLoss(FloatingPointError, ValueError):
    """A training step's loss is NaN or infinite: every later step would train
    on it. A ``ValueError`` too, so a stage reports it as one line."""


def fit(
    head: torch.nn.Module,
    cfg,
    batch_loss: Callable[[np.random.Generator], torch.Tensor],
    row_loss: Callable[[object], torch.Tensor],
    probe: Sequence,
    *,
    desc: str,
    eval_every: int,
    progress: bool,
    feature_seconds: float,
    files: RunFiles = RunFiles(),
    tokens_per_step: int = 0,
) -> dict:
    """Train ``head`` for ``cfg.steps`` steps and return the log.

    ``cfg`` gives ``steps``, ``lr``, ``warmup``, ``weight_decay`` and ``seed``.
    Each step's loss is ``batch_loss(rng)``, with ``rng`` a NumPy generator
    seeded by ``cfg.seed`` (torch's global seed is set to it as well). Every
    ``eval_every`` steps and at the end, the mean ``row_loss`` over the fixed
    held-out rows ``probe`` is logged as ``[step, loss]`` in
    ``log["heldout_curve"]``. The head ends in eval mode with no gradients.

    Under ``torch.distributed`` every rank draws the same global batch from the
    same generator and ``batch_loss`` returns the loss of this rank's share
    (:func:`my_share`), scaled so that the shares sum to the global batch's
    loss; gradients are summed across ranks before each step, so the run does
    not depend on the number of ranks beyond float rounding. Only rank 0 writes
    checkpoints and metrics. ``files`` (:class:`RunFiles`) sets checkpoints and
    dvclive; a run that finds its own checkpoint continues from it, bit for bit.
    The first step whose loss is not finite raises :class:`NonFiniteLoss`,
    naming the step (every rank sees the same global loss, so all stop).
    """
    from tqdm import tqdm

    rank, size = world()
    start = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    head.train()
    optim = torch.optim.AdamW(
        head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95)
    )
    state = {"step": 0, "losses": [], "curve": [], "history": [], "seconds": 0.0}
    if files.checkpoint is not None:
        state = _resume(files, head, optim, rng) or state
    losses, curve, history = state["losses"], state["curve"], state["history"]
    live = _Live(files.live, history) if rank == 0 and files.live is not None else None
    if live is not None:
        live.logged_at = len(losses)

    def evaluate(step: int) -> None:
        if probe:
            head.eval()
            with torch.no_grad():
                loss = float(np.mean([row_loss(r).item() for r in probe]))
            curve.append([step, loss])
            if live is not None:
                live.log(step, {"heldout/loss": loss})
            head.train()

    bar = tqdm(
        range(state["step"], cfg.steps),
        desc=desc,
        disable=not progress or rank != 0,
        initial=state["step"],
        total=cfg.steps,
    )
    window, clock = time.perf_counter(), Clock()
    for step in bar:
        lr = lr_at(step, cfg)
        with clock("loss"):
            loss = batch_loss(rng)
        if size > 1:
            losses.append(_distributed_step(optim, head, loss, lr, clock=clock))
        else:
            losses.append(optimizer_step(optim, head, loss, lr, clock=clock))
        if not math.isfinite(losses[-1]):  # a float already on the host: no sync
            raise NonFiniteLoss(
                f"{desc}: loss is {losses[-1]} at step {step}; lower the learning rate "
                f"(lr {cfg.lr}) or check the corpus"
            )
        if step % files.log_every == 0:
            mean = float(np.mean(losses[-files.log_every :]))
            bar.set_postfix(loss=f"{mean:.3f}")
            if live is not None:
                now = time.perf_counter()
                rate = tokens_per_step * (len(losses) - live.logged_at) / max(now - window, 1e-9)
                live.logged_at, window = len(losses), now
                live.log(step, {"train/loss": mean, "train/lr": lr,
                                "train/tokens_per_second": rate})  # fmt: skip
        if step % eval_every == 0:
            with clock("heldout"):
                evaluate(step)
        done = step + 1
        if files.save_every and done % files.save_every == 0 and done < cfg.steps:
            seconds = state["seconds"] + time.perf_counter() - start
            progress_made = {"step": done, "losses": losses, "curve": curve, "seconds": seconds}
            with clock("checkpoint"):
                _save(files, (head, optim, rng), progress_made, live)
    with clock("heldout"):
        evaluate(cfg.steps)
    head.eval().requires_grad_(False)
    if live is not None:
        live.close()
    phases = {k: round(v, 3) for k, v in sorted(clock.seconds.items())}
    phases["other"] = round(time.perf_counter() - start - sum(clock.seconds.values()), 3)
    log = {
        "feature_seconds": feature_seconds,
        "train_seconds": state["seconds"] + time.perf_counter() - start,
        "phase_seconds": phases,
        "steps": cfg.steps,
        "final_loss": float(np.mean(losses[-25:])),
        "parameters": sum(p.numel() for p in head.parameters()),
    }
    if state["step"]:
        log["resumed_from"] = state["step"]
    if curve:
        log["heldout_curve"] = curve
    return log


def _distributed_step(optim, module, loss, lr: float, clip: float = 1.0, clock=None) -> float:
    """:func:`optimizer_step` with this rank's gradients summed over every rank
    first; returns the global batch's loss."""
    import torch.distributed as dist

    clock = clock or Clock()
    for group in optim.param_groups:
        group["lr"] = lr
    with clock("backward"):
        optim.zero_grad(set_to_none=True)
        loss.backward()
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    with clock("all_reduce"):
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
        dist.all_reduce(flat)
        at = 0
        for p in params:
            p.grad.copy_(flat[at : at + p.numel()].view_as(p.grad))
            at += p.numel()
    with clock("optimizer"):
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optim.step()
    return float(flat[-1])


class _Live:
    """dvclive's logger, rebuilt from the run's history on a resume so that
    its files hold each logged step once."""

    def __init__(self, folder: Path, history: list):
        from dvclive import Live

        self.history = history
        self.live = Live(str(folder), resume=False, report=None, save_dvc_exp=False, dvcyaml=False)
        for step, values in history:
            self._write(step, values)
        self.logged_at = 0

    def _write(self, step: int, values: dict) -> None:
        self.live.step = step
        for name, value in values.items():
            self.live.log_metric(name, value)

    def log(self, step: int, values: dict) -> None:
        self.history.append([step, values])
        self._write(step, values)

    def close(self) -> None:
        self.live.make_summary()
        self.live.end()


_STATE = "state.json"


def _save(files, trained, done: dict, live) -> None:
    """The run's checkpoint, swapped in as one set (rank 0): the ``(head,
    optimizer, generator)`` in ``trained`` and ``done``'s step, losses, curve
    and seconds."""
    import json

    from safetensors.torch import save_file

    from glance._io import atomic_write_text, replace_dir

    head, optim, rng = trained
    if world()[0] != 0:
        _barrier()
        return

    def fill(tmp: Path) -> None:
        save_file({k: v.contiguous() for k, v in head.state_dict().items()},
                  str(tmp / "model.safetensors"))  # fmt: skip
        opt = optim.state_dict()
        tensors = {"rng/torch": torch.get_rng_state()}
        for pid, slots in opt["state"].items():
            for name, value in slots.items():
                tensors[f"optim/{pid}/{name}"] = value.contiguous()
        save_file(tensors, str(tmp / "state.safetensors"))
        record = {
            "key": files.key,
            "param_groups": opt["param_groups"],
            "numpy_rng": rng.bit_generator.state,
            "history": live.history if live is not None else [],
            **done,
        }
        atomic_write_text(tmp / _STATE, json.dumps(record) + "\n")

    replace_dir(files.checkpoint, fill, "training checkpoint", kind="checkpoint")
    _barrier()


def _barrier() -> None:
    import torch.distributed as dist

    if world()[1] > 1:
        dist.barrier()


def _resume(files, head, optim, rng) -> dict | None:
    """Load the run's checkpoint into ``head``, ``optim`` and ``rng``; ``None``
    if there is none, or it belongs to another run (logged, then ignored), or
    it is damaged: then rank 0 moves it aside (logged, naming the file) and the
    run starts afresh. Nothing is loaded into ``head`` until every file has
    been read and checked."""
    import logging

    folder = Path(files.checkpoint)
    if not (folder / _STATE).is_file():
        return None
    try:
        record, weights, tensors = _read_checkpoint(folder, head)
    except _Damaged as err:
        _barrier()
        if world()[0] == 0 and folder.is_dir():
            from glance.training.checkpoints import set_aside

            set_aside(folder, str(err))
        _barrier()
        return None
    if record.get("key") != files.key:
        logging.getLogger("glance").warning(
            "checkpoint %s is another run's (its key differs); starting afresh", folder
        )
        return None
    head.load_state_dict(weights, strict=True)
    slots: dict = {}
    for name, value in tensors.items():
        if name.startswith("optim/"):
            _, pid, slot = name.split("/", 2)
            slots.setdefault(int(pid), {})[slot] = value
    optim.load_state_dict({"state": slots, "param_groups": record["param_groups"]})
    torch.set_rng_state(tensors["rng/torch"])
    rng.bit_generator.state = record["numpy_rng"]
    logging.getLogger("glance").info("resuming %s from step %d", folder, record["step"])
    return record


class _Damaged(ValueError):
    pass


def _read_checkpoint(folder: Path, head) -> tuple[dict, dict, dict]:
    """``(state.json's record, the head's weights, the other tensors)`` of the
    checkpoint in ``folder``, each checked; :class:`_Damaged` naming the file
    that is garbage, truncated, missing or does not fit ``head``."""
    import json

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from glance._io import check_set

    def read(name, load):
        try:
            return load(folder / name)
        except (OSError, ValueError, SafetensorError) as err:
            raise _Damaged(f"{folder / name}: {str(err).splitlines()[0]}") from None

    try:
        check_set(folder)  # every file as written with the rest: a truncated one differs
    except ValueError as err:
        raise _Damaged(str(err)) from None
    record = read(_STATE, lambda p: json.loads(p.read_text(encoding="utf-8")))
    need = ("key", "param_groups", "numpy_rng", "step", "losses", "curve", "history", "seconds")
    if not isinstance(record, dict) or any(k not in record for k in need):
        raise _Damaged(f"{folder / _STATE}: expected a checkpoint record with {need}")
    weights = read("model.safetensors", lambda p: load_file(str(p)))
    tensors = read("state.safetensors", lambda p: load_file(str(p)))
    expected = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    if {k: tuple(v.shape) for k, v in weights.items()} != expected:
        raise _Damaged(f"{folder / 'model.safetensors'}: its weights do not fit the head")
    if "rng/torch" not in tensors:
        raise _Damaged(f"{folder / 'state.safetensors'}: no rng/torch state")
    return record, weights, tensors
