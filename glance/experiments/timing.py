"""Timed runs for the bench: every row timed the same way from outside its
call, the device synchronised, with its peak memory, and the prompt's time to
first token that the ``decode_only`` window subtracts.
"""

from __future__ import annotations

import time

import numpy as np

from glance.experiments.baselines import hf_generate
from glance.experiments.rows import run

__all__ = ["peak_memory", "prefill_ms", "sync", "timed_run"]


def peak_memory(device, fn):
    """``fn()`` and its peak allocated memory in MiB: the CUDA allocator's peak
    above what was allocated before the call. ``None`` on other devices, where
    no allocator peak exists (a resident-set poll would time the poller too)."""
    import torch

    if device.type != "cuda":
        return fn(), None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    return out, (torch.cuda.max_memory_allocated(device) - base) / 2**20


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill_ms(target, ids, positions, stops, repeats: int = 3) -> float:
    """The prompt's time to first token: the median wall time of
    ``target.generate`` for one new token. It is subtracted from every row's
    wall time on that prompt to give the ``decode_only`` window, so each row
    loses the same prefill."""
    import torch

    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            sync(target.device)
            start = time.perf_counter()
            hf_generate(target, ids, positions, 1, stops)
            sync(target.device)
            times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def timed_run(row, models, prompt) -> dict:
    """:func:`glance.experiments.rows.run` timed from outside, the device
    synchronised: the new ``ids``, wall ``ms`` (prefill included),
    ``new_tokens``, tau's counts as ``rounds`` (``(committed, rounds)`` or
    ``None``), ``peak_mib`` (CUDA only) and ``verify_ms``: the call's
    verify laps summed (the target pass and the walk; every step of a greedy
    loop), or ``None`` for a foreign loop, whose rounds are not timed."""
    import torch

    device = models.target.device

    def call():
        record = run(row, models, prompt)
        counts = None if record["rounds"] is None else (record["committed"], record["rounds"])
        return record["ids"], counts, record.get("stats")

    with torch.inference_mode():
        sync(device)
        start = time.perf_counter()
        (new, rounds, stats), mib = peak_memory(device, call)
        sync(device)
        ms = (time.perf_counter() - start) * 1e3
    verify = None if stats is None else float(sum(r.verify_ms for r in stats.rounds))
    return {
        "ids": new,
        "ms": ms,
        "new_tokens": len(new),
        "rounds": rounds,
        "peak_mib": mib,
        "verify_ms": verify,
    }
