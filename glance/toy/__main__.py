"""Build the toy world from the command line: ``python -m glance.toy --help``.

    python -m glance.toy tasks    --out data/toy --n 40 --seed 1
    python -m glance.toy target   --out models/toy-target --steps 600
    python -m glance.toy head     --target models/toy-target --out models/toy-head
    python -m glance.toy evaluate --target models/toy-target --head models/toy-head --data data/toy
    python -m glance.toy calibrate --knobs '{"voices": {"chartqa": [2, 3, 2.5]}}'

Each command is seeded, shows progress, writes atomically and prints a JSON
summary (also written next to its output).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def cmd_tasks(args) -> dict:
    from glance.toy.tasks import TASKS, write_task

    for task in TASKS:
        write_task(task, args.n, args.out, args.seed)
    return {"tasks": list(TASKS), "n": args.n, "seed": args.seed, "out": str(args.out)}


def cmd_target(args) -> dict:
    import yaml

    from glance.toy.config import TargetSize, TrainConfig
    from glance.toy.soft import train_target
    from glance.toy.world import save_json

    conf = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    if not isinstance(conf, dict) or not isinstance(conf.get("train"), dict):
        raise SystemExit(f"{args.config}: expected a target config with a train: mapping")
    given = {k: getattr(args, k) for k in ("steps", "phases", "batch", "lr", "seed")}
    train = conf["train"] | {k: v for k, v in given.items() if v is not None}
    if args.init is not None:
        train["init"] = str(args.init)
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep or key not in TrainConfig.__dataclass_fields__:
            raise SystemExit(
                f"--set {item}: expected KEY=VALUE with KEY a train key of {args.config}"
            )
        train[key] = yaml.safe_load(value)
    cfg, size = TrainConfig(**train), TargetSize(**conf.get("size") or {})
    log = train_target(args.out, cfg, size)
    log["how"] = "python -m glance.toy " + " ".join(sys.argv[1:])
    save_json(Path(args.out) / "train_log.json", log)
    return log


def cmd_head(args) -> dict:
    from glance.toy.config import HeadTrain
    from glance.toy.world import save_json, train_toy_head

    train = HeadTrain(
        greedy=args.greedy,
        sampled=args.sampled,
        block_size=args.block_size,
        layers=args.layers,
        steps=args.steps,
        lr=args.lr,
        seed=args.seed,
        mask_span=args.mask_span,
        max_new_tokens=704,
        long_share=0.05,
        context=512,
        heldout=64,
    )
    log = train_toy_head(args.target, args.out, train)
    save_json(Path(args.out) / "train_log.json", log)
    return log


def cmd_evaluate(args) -> dict:
    import torch

    import glance
    from glance.core.law import DraftabilityLaw
    from glance.targets.vl import load_target
    from glance.toy.evaluate import evaluate_decoding, evaluate_target
    from glance.toy.world import save_json

    target, processor = load_target(args.target, dtype=torch.float32)
    summary = {"target": evaluate_target(target, processor, args.data, args.n)}
    if args.head:
        head = glance.load_block_head(args.head, target=target)
        decoding = evaluate_decoding(target, processor, head, args.data, n=args.n)
        rounds = [r for t in decoding.values() for r in t.pop("rounds")]
        entropy, accepted, cap, censored = np.array(rounds, dtype=np.float64).T
        accepted = np.minimum(accepted, cap)  # tokens accepted past the output's end never count
        law = DraftabilityLaw.fit(
            entropy, accepted.astype(int), cap=cap.astype(int), censored=censored.astype(bool)
        )
        summary.update(
            decoding=decoding,
            law={
                "b0": law.b0,
                "b1": law.b1,
                "holds": law.holds()[1],
                "r2_round": law.r2_round,
                "r2_ceiling": law.r2_ceiling,
            },
        )
    if args.out:
        save_json(args.out, summary)
    return summary


def cmd_calibrate(args) -> dict:
    from glance.toy.calibrate import main as calibrate

    return calibrate(args.knobs, args.out, args.sizes, keep=args.keep)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m glance.toy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tasks", help="write the five task files and images")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser(
        "target", help="train and save a tiny toy target (of the family its config names)"
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--config",
        type=Path,
        default=Path("conf/target/toy.yaml"),
        help="the target config whose train: and size: to use (the pipeline's by default)",
    )
    p.add_argument("--steps", type=int, help="override train.steps")
    p.add_argument("--phases", type=int, help="override train.phases")
    p.add_argument("--batch", type=int, help="override train.batch")
    p.add_argument("--lr", type=float, help="override train.lr")
    p.add_argument("--seed", type=int, help="override train.seed")
    p.add_argument("--init", type=Path, help="override train.init: start from this target")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override any train key (a YAML value: --set init=null trains from scratch)",
    )
    p = sub.add_parser("head", help="train and save a DFlash head on the target's own answers")
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--greedy", type=int, default=1500)
    p.add_argument("--sampled", type=int, default=1500)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mask-span", choices=("fixed", "variable"), default="variable")
    p = sub.add_parser("evaluate", help="exact match, entropy, tau per task, the law")
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--head", type=Path)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--out", type=Path)
    p = sub.add_parser("calibrate", help="predict each task's tau for a setting of the knobs")
    p.add_argument(
        "--knobs", help="JSON: alpha, k, row_seed, voices {task: [words, letters, beta]}"
    )
    p.add_argument("--sizes", help="JSON: the short run's sizes (glance.toy.calibrate.Short)")
    p.add_argument("--keep", type=Path, help="save the try's target and head in this folder")
    p.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = {
        "tasks": cmd_tasks,
        "target": cmd_target,
        "head": cmd_head,
        "evaluate": cmd_evaluate,
        "calibrate": cmd_calibrate,
    }[args.cmd](args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
