"""Peak memory of head training against the corpus's size, in both feature modes.

    python -m glance.testing.train_memory                    # 400 and 1600 answers
    python -m glance.testing.train_memory --answers 400 1600 --steps 200 --out mem.json

Builds toy corpora of each size with the corpus stage's code
(:func:`glance.training.corpus.build_corpus`: the toy target answering the
toy world's prompts, half greedy, half sampled), then trains a block head on
each for ``--steps`` steps with ``features=online`` and ``features=offline``,
each run in a fresh process, and prints the process's peak resident memory
while it trains (Linux's ``VmHWM``, reset once the target and the corpus have
loaded) and that peak over the memory held at that point. A corpus's
features never enter memory whole, so the peak should not grow with the
corpus: the table gives the ratio of the largest corpus's peak to the
smallest's per mode. Run it with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "models" / "toy-target"

_CHILD = r"""
import json, sys
import torch
from glance.core.numerics import Numerics, pin
pin(Numerics(threads=1), reexec=True)
torch.set_num_threads(1)
from glance.targets.vl import load_target
from glance.training.block import HeadConfig, train_head
from glance.training.corpus import Corpus
folder, mode, steps, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
target, processor = load_target(sys.argv[5], dtype=torch.float32)
rows = Corpus(folder, "train", processor=processor)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])

open("/proc/self/clear_refs", "w").write("5")  # the peak so far (loading) is not training's
loaded = status("VmRSS")
cfg = HeadConfig(block_size=16, layers=1, steps=steps, seed=0, mask_span="variable")
mask = processor.tokenizer.convert_tokens_to_ids("<|mask|>")
_, log = train_head(target, rows, mask, cfg, features=mode, work_dir=work, progress=False)
peak = status("VmHWM")
print(json.dumps({"answers": len(rows), "mode": mode, "loaded_mib": loaded / 1024,
                  "peak_mib": peak / 1024, "train_seconds": log["train_seconds"]}))
"""


def build(folder: Path, answers: int, max_new_tokens: int) -> None:
    """A toy corpus of ``answers`` training answers (half sampled) in ``folder``."""
    import torch

    from glance.targets.vl import load_target
    from glance.toy.world import toy_answerer, toy_parts
    from glance.training.corpus import build_corpus

    torch.set_num_threads(1)
    target, processor = load_target(TOY, dtype=torch.float32)
    half = answers // 2
    parts = toy_parts(
        greedy=answers - half, sampled=half, seed=0, long_share=0.05, context=512, heldout=0
    )
    answer = toy_answerer(target, processor, max_new_tokens)
    build_corpus(folder, parts, answer, {"answers": answers}, shard_size=128)


def measure(folder: Path, mode: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as work:
        cmd = [sys.executable, "-c", _CHILD, str(folder), mode, str(steps), work, str(TOY)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, nargs="+", default=[400, 1600])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=704)
    parser.add_argument("--out", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.answers:
            folder = Path(tmp) / f"corpus-{n}"
            build(folder, n, args.max_new_tokens)
            for mode in ("online", "offline"):
                rows.append(measure(folder, mode, args.steps))
                print(json.dumps(rows[-1]), flush=True)
    print("| answers | features | peak MiB | peak over loaded MiB |\n|---|---|---|---|")
    for r in rows:
        extra = r["peak_mib"] - r["loaded_mib"]
        print(f"| {r['answers']} | {r['mode']} | {r['peak_mib']:.0f} | {extra:.0f} |")
    for mode in ("online", "offline"):
        peaks = [r["peak_mib"] for r in rows if r["mode"] == mode]
        print(f"{mode}: largest corpus's peak / smallest's = {peaks[-1] / peaks[0]:.3f}")
    if args.out:
        from glance._io import atomic_write_text

        atomic_write_text(args.out, json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
