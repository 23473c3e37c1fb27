"""The golden training run: a few dozen steps of the toy head, hashed.

``python -m glance.testing.golden`` pins the default numerics
(:class:`glance.core.numerics.Numerics`), regenerates a tiny corpus with the
shipped toy target, trains a one-layer block head on it for ``--steps`` steps
and prints the SHA-256 of the saved weights. ``tests/test_numerics.py``
compares it with the hash committed there, so a CI machine whose CPU rounds
differently from the one that made the results fails loudly.
``--unpinned`` leaves the machine's own numerics, and ``--aten LEVEL`` pins
ATen at another level (each to show the hash moves).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import tempfile
from pathlib import Path

from glance.core.numerics import Numerics, pin, record

TOY_TARGET = Path(__file__).resolve().parents[2] / "models" / "toy-target"


def golden_hash(steps: int = 30) -> str:
    """SHA-256 of the weights a ``steps``-step toy head training run saves."""
    from glance.toy.config import HeadTrain
    from glance.toy.world import train_toy_head

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "head"
        train = HeadTrain(
            block_size=16,
            layers=1,
            lr=2e-3,
            greedy=8,
            sampled=8,
            steps=steps,
            heldout=4,
            max_new_tokens=64,
            long_share=0.0,
            context=0,
            mask_span="variable",
            seed=0,
        )
        train_toy_head(TOY_TARGET, out, train)
        return hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--aten", help="pin ATen at this level instead of the default's")
    args = parser.parse_args(argv)
    numerics = Numerics(pin=not args.unpinned, threads=2)
    if args.aten:
        numerics = dataclasses.replace(numerics, aten_cpu_capability=args.aten)
    pin(numerics, reexec=True)
    import torch

    torch.set_num_threads(numerics.threads)
    digest = golden_hash(args.steps)
    print(json.dumps({"sha256": digest, "numerics": record(numerics)}))


if __name__ == "__main__":
    main()
