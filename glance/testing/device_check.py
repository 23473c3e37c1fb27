"""The checks that need an accelerator, in one command.

    python -m glance.testing.device_check                  # on a CUDA machine: the full check
    python -m glance.testing.device_check --reduced        # anywhere: the same code, small

Three parts, each printed, and ``<out>/lossless.json``,
``<out>/verify_cost.json`` and ``<out>/train_cost.json`` (``results/device/``
by default):

* **Losslessness at float32 and bfloat16.** On tiny random Qwen3-VL and
  Qwen2.5-VL targets (``glance.testing``) and heads, each prompt decodes
  greedily twice (the control: does greedy agree with itself here?), then with
  GLANCE and with the chain. Per dtype it counts outputs equal to greedy,
  prompts where greedy already disagrees with itself, and mismatches. At
  bfloat16 the control measures how often the arithmetic itself is not
  reproducible, instead of guessing it.
* **Verify cost against tree size.** A text target with Qwen3-VL-8B's language
  model dimensions (36 layers, hidden 4096, 32 heads, 8 KV heads, vocabulary
  151936), random weights built from the config, no download, in bfloat16.
  After a prefill of ``--context`` tokens it times GLANCE's own verify pass
  (``glance.decoding.loop.verify`` with the ancestor-only mask) at tree sizes 1 to
  1024, the fastest of ``--repeats`` passes each, the cache cropped back after
  every pass.

* **Head training.** A five-layer DFlash head (block 16) trained a few steps
  with online features against the same random bfloat16 target with
  Qwen3-VL-8B's language-model dimensions: tokens per second and peak GPU
  memory, the numbers ``head=train`` on one GPU needs.

``--reduced`` shrinks every part (a 2-layer target of width 64, sizes up to 16,
fewer prompts) so the code path runs on a CPU under test in seconds. On one
H200 the full check is meant to finish within 8 minutes. CI does not run it.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

#: Qwen3-VL-8B-Instruct's language model (its ``text_config``).
QWEN3_VL_8B_TEXT = dict(
    num_hidden_layers=36,
    hidden_size=4096,
    intermediate_size=12288,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=5_000_000.0,
)
REDUCED_TEXT = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    max_position_embeddings=4096,
    rope_theta=10_000.0,
)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def lossless(device, dtypes, kinds, prompts: int, new_tokens: int) -> dict:
    """Per dtype and target kind: equal / control_differs / mismatch counts."""
    import torch

    import glance
    from glance import testing as tiny
    from glance.targets.vl import VisionPositions

    out = {}
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for kind in kinds:
            target = tiny.build_target(kind, dtype=dtype).to(device)
            head = tiny.build_head(target).to(device)
            counts = {"equal": 0, "control_differs": 0, "mismatch": 0}
            for p in range(prompts):
                rng = np.random.default_rng(p)
                before = [int(x) for x in rng.integers(3, 60, 4)]
                after = [int(x) for x in rng.integers(3, 60, 5)]
                ids, pixels, grid, types = tiny.image_prompt(target, before, after, seed=p)
                kw = dict(
                    positions=VisionPositions(pixels.to(device), grid.to(device), types.to(device))
                )
                ids = ids.to(device)
                greedy = glance.greedy_generate(target, ids, new_tokens, **kw)
                control = glance.greedy_generate(target, ids, new_tokens, **kw)
                rows = [
                    glance.generate(head, target, ids, new_tokens, budget=63, branch_k=8, **kw),
                    glance.chain_generate(head, target, ids, new_tokens, **kw),
                ]
                if all(torch.equal(r, greedy) for r in rows):
                    counts["equal"] += 1
                elif not torch.equal(control, greedy):
                    counts["control_differs"] += 1
                else:
                    counts["mismatch"] += 1
            out[f"{dtype_name}/{kind}"] = {"prompts": prompts, **counts}
    return out


def verify_cost(device, text: dict, sizes, context: int, repeats: int, dtype_name: str) -> dict:
    """Verify-pass milliseconds at each tree size, on a random target built
    from ``text`` (a Qwen3 text config), after a ``context``-token prefill."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from glance.core.tree import CandidateTree
    from glance.decoding.cache import KVCache
    from glance.decoding.loop import Cursor, verify, verify_inputs
    from glance.targets.vl import StreamPositions

    dtype = getattr(torch, dtype_name)
    config = Qwen3Config(**text)
    torch.manual_seed(0)
    with torch.device(device):
        target = Qwen3ForCausalLM(config).to(dtype).eval()
    cache = KVCache(config)
    ids = torch.randint(0, text["vocab_size"], (1, context), device=device)
    with torch.no_grad():
        target(
            input_ids=ids,
            position_ids=torch.arange(context, device=device)[None],
            past_key_values=cache.inner,
            use_cache=True,
        )
    at = Cursor(root=1, length=context, positions=StreamPositions(), delta=0)
    times = []
    with torch.no_grad():
        for size in sizes:
            tree = CandidateTree(
                np.full(size, 1, dtype=np.int64),
                np.full(size, -1, dtype=np.int64),
                np.ones(size, dtype=np.int64),
                np.zeros(size),
            )
            inputs = verify_inputs(target, tree, at)
            best = float("inf")
            for _ in range(repeats + 1):  # the first pass at a size warms it up
                _sync(device)
                t0 = time.perf_counter()
                verify(target, cache, inputs)
                _sync(device)
                best = min(best, time.perf_counter() - t0)
                cache.crop(context)
            times.append(best * 1e3)
    params = sum(p.numel() for p in target.parameters())
    return {
        "config": text,
        "parameters": params,
        "dtype": dtype_name,
        "context": context,
        "repeats": repeats,
        "sizes": list(sizes),
        "verify_ms": times,
        "ms_per_node": [t / s for t, s in zip(times, sizes, strict=True)],
    }


def train_cost(device, text: dict, steps: int, context: int, rows: int, dtype_name: str) -> dict:
    """Head-training throughput and peak memory: a DFlash head (five layers,
    block 16, as z-lab's) trained ``steps`` steps with online features against
    a frozen random target built from ``text``, on ``rows`` sequences of
    ``context`` tokens a step. Tokens per second count the head's labelled
    tokens over every step, the first (warm-up) included."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from glance.training.block import HeadConfig, Sequence, train_head

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    with torch.device(device):
        target = Qwen3ForCausalLM(Qwen3Config(**text)).to(dtype).eval()
    gen = torch.Generator().manual_seed(0)
    prompt = context // 4
    data = [
        Sequence(torch.randint(0, text["vocab_size"], (context,), generator=gen), prompt)
        for _ in range(4 * rows)
    ]
    cfg = HeadConfig(block_size=16, layers=5, steps=steps, rows=rows, warmup=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _, log = train_head(target, data, text["vocab_size"] - 1, cfg, progress=False, eval_every=10**9)
    tokens = cfg.rows * cfg.blocks_per_row * cfg.block_size * cfg.steps
    return {
        "config": text,
        "dtype": dtype_name,
        "steps": cfg.steps,
        "rows": rows,
        "context": context,
        "head_parameters": log["parameters"],
        "train_seconds": log["train_seconds"],
        "tokens_per_second": tokens / log["train_seconds"],
        "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30
        if device.type == "cuda"
        else None,
    }


def _write(path: Path, data: dict) -> None:
    from glance._io import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def main(argv=None) -> dict:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduced", action="store_true", help="small and fast, for any device")
    parser.add_argument("--out", default="results/device", help="folder for the JSON files")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--context", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not args.reduced:
        parser.error(f"the full check needs CUDA; this machine has {device.type} (use --reduced)")
    reduced = args.reduced
    sizes = [1, 2, 4, 8, 16] if reduced else [2**i for i in range(11)]
    context = args.context or (64 if reduced else 2048)
    repeats = args.repeats or (2 if reduced else 5)
    where = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "reduced": reduced,
    }
    start = time.perf_counter()
    checks = lossless(
        device,
        ["float32", "bfloat16"],
        ["qwen3_vl", "qwen2_5_vl"],
        prompts=2 if reduced else 16,
        new_tokens=16 if reduced else 96,
    )
    cost = verify_cost(
        device, REDUCED_TEXT if reduced else QWEN3_VL_8B_TEXT, sizes, context, repeats,
        "float32" if reduced and device.type == "cpu" else "bfloat16",
    )  # fmt: skip
    training = train_cost(
        device, REDUCED_TEXT if reduced else QWEN3_VL_8B_TEXT, 2 if reduced else 10,
        64 if reduced else 2048, 2 if reduced else 8,
        "float32" if reduced and device.type == "cpu" else "bfloat16",
    )  # fmt: skip
    where["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    _write(out / "lossless.json", where | {"checks": checks})
    _write(out / "verify_cost.json", where | cost)
    _write(out / "train_cost.json", where | training)
    print(f"{where['device']}, torch {where['torch']}, {where['seconds']:.0f} s")
    print("| dtype/target | prompts | equal | control differs | mismatch |\n|---|---|---|---|---|")
    for name, c in checks.items():
        print(
            f"| {name} | {c['prompts']} | {c['equal']} | {c['control_differs']} | {c['mismatch']} |"
        )
    print(f"\nverify pass, {cost['parameters'] / 1e9:.2f}B parameters, {cost['dtype']}, "
          f"context {context}")  # fmt: skip
    print("| tree size | ms | ms per node |\n|---|---|---|")
    for s, t, m in zip(cost["sizes"], cost["verify_ms"], cost["ms_per_node"], strict=True):
        print(f"| {s} | {t:.3f} | {m:.4f} |")
    peak = training["peak_gib"]
    print(f"\nhead training, {training['dtype']}, {training['rows']} rows of "
          f"{training['context']} tokens: {training['tokens_per_second']:.0f} tokens/s, "
          f"peak {'n/a' if peak is None else f'{peak:.1f} GiB'}")  # fmt: skip
    broken = [k for k, c in checks.items() if k.startswith("float32/") and c["mismatch"]]
    if broken:  # at bfloat16 a mismatch is reported, not failed: see the module docstring
        raise SystemExit(f"LOSSLESSNESS BROKEN at float32: {broken} (see {out / 'lossless.json'})")
    return {"lossless": checks, "verify_cost": cost, "train_cost": training}


if __name__ == "__main__":
    main()
