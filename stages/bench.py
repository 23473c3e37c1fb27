"""Speed side by side: GLANCE against what a user would otherwise run.

Rows, all on the same prompts in one process, interleaved prompt by prompt
(A B C ... A B C ...) so that machine drift falls on every row alike:

* ``hf_greedy``: ``target.generate(do_sample=False)``, the baseline;
* ``hf_prompt_lookup``: ``target.generate(prompt_lookup_num_tokens=...)``, the
  strongest draft-free method (it copies from the text prompt, never the image);
* ``dflash_chain``: ``dflash.model.dflash_generate``, the package's own chain,
  with the same head (its target calls get the image inputs and M-RoPE rows);
* ``glance_greedy``, ``glance_chain``, ``glance_tree`` (``budget``),
  ``glance_auto`` (``budget="auto"``) and ``glance_extend`` (``budget`` plus
  ``extend_budget=decode.extend_row``; only for a head trained with a variable
  mask span).

Every row is timed the same way, wall clock around the whole call (prefill
included), with the device synchronised. Per task and row: median ms per
token, tokens per second, tau where it applies, peak memory (the device
allocator's peak on CUDA; on CPU the peak resident-set growth during the call,
sampled every millisecond), and the speedup over ``hf_greedy`` with its paired
bootstrap interval. Then the cost curves: verify-pass time against tree size,
ms per token against output length, and the host share of a round against the
budget. Writes ``results/bench.json`` and ``results/bench.md``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from glance.baselines import dflash_generate, hf_generate
from glance.vl import stop_ids
from stages.common import (
    app,
    decode_settings,
    extend_row,
    load_head,
    load_target,
    log,
    prompt_inputs,
    setup,
    task_by_name,
    task_records,
    verify_costs,
    write_json,
)

ROWS = (
    "hf_greedy",
    "hf_prompt_lookup",
    "dflash_chain",
    "glance_greedy",
    "glance_chain",
    "glance_tree",
    "glance_auto",
    "glance_extend",
)


class PeakMemory:
    """Peak memory growth (MiB) over a block: CUDA's allocator peak, or on CPU
    the resident set sampled every millisecond from ``/proc/self/statm``."""

    def __init__(self, device):
        self.device = device
        self.mib = float("nan")

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        self._base = self._peak = self._rss()
        self._stop = threading.Event()

        def poll():
            while not self._stop.wait(0.001):
                self._peak = max(self._peak, self._rss())

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            self._thread.join()
            peak = max(self._peak, self._rss())
        self.mib = (peak - self._base) / 2**20
        return False


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_row(row, cfg, target, head, processor, ids, positions, max_new, stops) -> dict:
    """One timed call of one row: new tokens, wall ms, tau (or None), peak MiB."""
    import torch

    import glance

    device = target.device
    kw = dict(positions=positions, stop_token_ids=stops, return_stats=True)
    rounds = None  # (committed, rounds) for the rows that draft
    with PeakMemory(device) as mem, torch.inference_mode():
        sync(device)
        start = time.perf_counter()
        if row.startswith("hf_"):
            extra = {}
            if row == "hf_prompt_lookup":
                extra["prompt_lookup_num_tokens"] = int(cfg.bench.lookup_tokens)
            new = hf_generate(target, ids, positions, max_new, stops, **extra)
        elif row == "dflash_chain":
            new, rounds = dflash_generate(head, target, ids, positions, max_new, stops)
        else:
            if row == "glance_greedy":
                out, stats = glance.greedy_generate(target, ids, max_new, **kw)
            elif row == "glance_chain":
                out, stats = glance.chain_generate(head, target, ids, max_new, **kw)
            else:
                budget = "auto" if row == "glance_auto" else decode_settings(cfg)["budget"]
                out, stats = glance.generate(
                    head,
                    target,
                    ids,
                    max_new,
                    budget=budget,
                    branch_k=int(cfg.branch_k),
                    extend_budget=int(cfg.decode.extend_row) if row == "glance_extend" else 0,
                    costs=verify_costs(),
                    **kw,
                )
            if row != "glance_greedy":
                rounds = (sum(r.committed for r in stats.rounds), len(stats.rounds))
            new = out[0, ids.shape[1] :].tolist()
        sync(device)
        ms = (time.perf_counter() - start) * 1e3
    return {"ids": new, "ms": ms, "new_tokens": len(new), "rounds": rounds, "peak_mib": mem.mib}


def summarise(runs: dict, seed: int, resamples: int) -> dict:
    from glance.metrics import drop_warmup, paired_bootstrap, pooled_tau

    base = list(drop_warmup(runs["hf_greedy"]))
    out = {}
    for row, calls in runs.items():
        calls = list(drop_warmup(calls))
        per_token = [c["ms"] / max(c["new_tokens"], 1) for c in calls]
        tokens = sum(c["new_tokens"] for c in calls)
        ms = sum(c["ms"] for c in calls)
        drafted = [c["rounds"] for c in calls if c["rounds"] is not None]
        est = paired_bootstrap(
            [b["ms"] for b in base], [c["ms"] for c in calls], seed=seed, n_resamples=resamples
        )
        out[row] = {
            "median_ms_per_token": float(np.median(per_token)),
            "tokens_per_s": 1e3 * tokens / ms,
            "tau": pooled_tau(*zip(*drafted, strict=True)) if drafted else None,
            "peak_mib": float(np.max([c["peak_mib"] for c in calls])),
            "speedup": {"estimate": est.estimate, "low": est.low, "high": est.high},
            "same_output_as_hf_greedy": sum(
                c["ids"] == b["ids"] for c, b in zip(calls, base, strict=True)
            ),
        }
    return out


def length_curve(cfg, target, head, processor) -> dict:
    """ms per token (decode_only window) at each output length, with no stop token.

    A length the target's ``max_position_embeddings`` cannot hold after the
    prompt is cut to what it can, and ``new_tokens`` records what ran."""
    import glance

    task = task_by_name(cfg.bench.length_task)
    records = task_records(cfg, task, int(cfg.bench.length_n) + 1)
    out = {
        "task": task.name,
        "lengths": list(cfg.bench.lengths),
        "new_tokens": [],
        "glance_tree": [],
        "glance_greedy": [],
        "glance_tree_round_ms": [],
        "glance_tree_tau": [],
    }
    prompts = [prompt_inputs(processor, r, cfg.paths.data) for r in records]
    room = target.config.get_text_config().max_position_embeddings
    room -= max(ids.shape[1] for ids, _ in prompts)
    for asked in cfg.bench.lengths:
        length = min(int(asked), room)
        out["new_tokens"].append(length)
        per = {"glance_tree": [], "glance_greedy": []}
        for ids, positions in prompts:
            for row in per:
                if row == "glance_tree":
                    _, stats = glance.generate(
                        head,
                        target,
                        ids,
                        int(length),
                        budget=decode_settings(cfg)["budget"],
                        branch_k=int(cfg.branch_k),
                        positions=positions,
                        return_stats=True,
                        costs=verify_costs(),
                    )
                else:
                    _, stats = glance.greedy_generate(
                        target, ids, int(length), positions=positions, return_stats=True
                    )
                per[row].append(stats)
        for row, values in per.items():  # the first prompt is the warm-up
            out[row].append(float(np.median([st.ms_per_token for st in values[1:]])))
        # Separates cost from acceptance: a round's time, and tokens per round.
        rounds = [r for st in per["glance_tree"][1:] for r in st.rounds]
        out["glance_tree_round_ms"].append(
            float(np.mean([r.draft_ms + r.verify_ms + r.host_ms for r in rounds]))
        )
        out["glance_tree_tau"].append(sum(r.committed for r in rounds) / len(rounds))
    return out


def budget_curve(cfg, target, head, processor) -> dict:
    """Per budget: mean tree size, verify ms, draft ms, host ms and host share of a round."""
    import glance
    from glance.budget import AUTO_SIZES

    task = task_by_name(cfg.bench.cost_task)
    records = task_records(cfg, task, int(cfg.bench.cost_n) + 1)
    max_new = int(cfg.max_new_tokens or task.max_new_tokens)
    stops = stop_ids(processor, target)
    inputs = [prompt_inputs(processor, r, cfg.paths.data) for r in records]
    rows = []
    for budget in AUTO_SIZES:
        rounds = []
        for i, (ids, positions) in enumerate(inputs):
            _, stats = glance.generate(
                head,
                target,
                ids,
                max_new,
                budget=budget,
                branch_k=int(cfg.branch_k),
                positions=positions,
                stop_token_ids=stops,
                return_stats=True,
            )
            if i > 0:
                rounds += stats.rounds
        draft = float(np.mean([r.draft_ms for r in rounds]))
        verify = float(np.mean([r.verify_ms for r in rounds]))
        host = float(np.mean([r.host_ms for r in rounds]))
        rows.append(
            {
                "budget": budget,
                "tree_size": float(np.mean([r.tree_size for r in rounds])),
                "tau": sum(r.committed for r in rounds) / len(rounds),
                "draft_ms": draft,
                "verify_ms": verify,
                "host_ms": host,
                "tree_ms": float(np.mean([r.tree_ms for r in rounds])),
                "host_share": host / (draft + verify + host),
            }
        )
    return {"task": task.name, "rows": rows}


def markdown(result: dict) -> str:
    lines = [
        "| task | row | ms/token | tokens/s | tau | peak MiB | speedup vs hf_greedy |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, rows in result["tasks"].items():
        for row, x in rows.items():
            sp = x["speedup"]
            tau = f"{x['tau']:.2f}" if x["tau"] is not None else ""
            lines.append(
                f"| {task} | {row} | {x['median_ms_per_token']:.2f} | {x['tokens_per_s']:.1f} | "
                f"{tau} | {x['peak_mib']:.1f} | {sp['estimate']:.2f}x "
                f"[{sp['low']:.2f}, {sp['high']:.2f}] |"
            )
    return "\n".join(lines) + "\n"


@app
def main(cfg) -> None:
    from tqdm import tqdm

    from glance._io import atomic_write_text

    setup(cfg)
    decode_settings(cfg)  # bad settings fail before any model loads
    target, processor = load_target(cfg)
    head = load_head(cfg, target)
    stops = stop_ids(processor, target)
    rows = ROWS if extend_row(cfg, head) else ROWS[:-1]
    result = {
        "target": cfg.target.name,
        "device": str(target.device),
        "dtype": str(cfg.dtype),
        "budget": decode_settings(cfg)["budget"],
        "branch_k": int(cfg.branch_k),
        "extend_budget": int(cfg.decode.extend_row) if "glance_extend" in rows else 0,
        "n": int(cfg.bench.n),
        "tasks": {},
    }
    for name in cfg.bench.tasks:
        task = task_by_name(name)
        max_new = int(cfg.max_new_tokens or task.max_new_tokens)
        runs = {row: [] for row in rows}
        records = task_records(cfg, task, int(cfg.bench.n) + 1)
        for record in tqdm(records, desc=f"bench {name}", unit="prompt"):
            ids, positions = prompt_inputs(processor, record, cfg.paths.data)
            for row in rows:  # interleaved: every row on this prompt, then the next prompt
                runs[row].append(
                    run_row(row, cfg, target, head, processor, ids, positions, max_new, stops)
                )
        result["tasks"][name] = summarise(runs, int(cfg.seed), int(cfg.decode.bootstrap))
    result["length_curve"] = length_curve(cfg, target, head, processor)
    result["budget_curve"] = budget_curve(cfg, target, head, processor)
    results = Path(cfg.paths.results)
    write_json(results / "bench.json", result)
    atomic_write_text(results / "bench.md", markdown(result))
    log.info("bench:\n%s", markdown(result))


if __name__ == "__main__":
    main()
