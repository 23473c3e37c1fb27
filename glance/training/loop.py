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

import numpy as np
import torch

__all__ = ["deterministic", "fit", "lr_at", "optimizer_step"]


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


def optimizer_step(optim, module, loss, lr: float, clip: float = 1.0) -> float:
    """One clipped AdamW step at learning rate ``lr``; returns the loss as a float."""
    for group in optim.param_groups:
        group["lr"] = lr
    optim.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
    optim.step()
    return float(loss.detach())


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
) -> dict:
    """Train ``head`` for ``cfg.steps`` steps and return the log.

    ``cfg`` gives ``steps``, ``lr``, ``warmup``, ``weight_decay`` and ``seed``.
    Each step's loss is ``batch_loss(rng)``, with ``rng`` a NumPy generator
    seeded by ``cfg.seed`` (torch's global seed is set to it as well). Every
    ``eval_every`` steps and at the end, the mean ``row_loss`` over the fixed
    held-out rows ``probe`` is logged as ``[step, loss]`` in
    ``log["heldout_curve"]``. The head ends in eval mode with no gradients.
    """
    from tqdm import tqdm

    start = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    head.train()
    optim = torch.optim.AdamW(
        head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95)
    )
    losses, curve = [], []

    def evaluate(step: int) -> None:
        if probe:
            head.eval()
            with torch.no_grad():
                loss = float(np.mean([row_loss(r).item() for r in probe]))
            curve.append([step, loss])
            head.train()

    bar = tqdm(range(cfg.steps), desc=desc, disable=not progress)
    for step in bar:
        losses.append(optimizer_step(optim, head, batch_loss(rng), lr_at(step, cfg)))
        if step % 25 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-25:]):.3f}")
        if step % eval_every == 0:
            evaluate(step)
    evaluate(cfg.steps)
    head.eval().requires_grad_(False)
    log = {
        "feature_seconds": feature_seconds,
        "train_seconds": time.perf_counter() - start,
        "steps": cfg.steps,
        "final_loss": float(np.mean(losses[-25:])),
        "parameters": sum(p.numel() for p in head.parameters()),
    }
    if curve:
        log["heldout_curve"] = curve
    return log
