"""Where a decoding round's time goes, on a tiny random Qwen3-VL target.

``python -m glance.testing.round_bench`` prints, for a random DFlash head and for an
:class:`~glance.testing.OracleHead` that drafts the greedy text with some
corrupted offsets: tau, the draft pass, the tree build, the verify pass, the
walk with cache compaction, the host share (everything but the two forward
passes), and greedy decoding's ms per token as the baseline measured in the
same run. Needs the ``decode`` extra.
"""

from __future__ import annotations

import argparse

import numpy as np


def bench_decode(runs: int, new_tokens: int, budget: int, branch_k: int, seed: int) -> None:
    import torch

    import glance
    from glance import testing
    from glance.targets.vl import VisionPositions

    torch.manual_seed(seed)
    target = testing.build_target("qwen3_vl", hidden=128, layers=4, dtype=torch.float32)
    head = testing.build_head(target, block_size=16, layers=2)
    ids, pixels, grid, types = testing.image_prompt(target, [3, 17, 42, 8], [11, 29, 5], (1, 8, 8))
    positions = VisionPositions(pixels, grid, types)
    greedy = glance.greedy_generate(target, ids, new_tokens + 16, positions=positions)
    oracle = testing.OracleHead(target, greedy[0].tolist(), block_size=16, corrupt_rate=0.15)
    print(
        f"decode: tiny Qwen3-VL (hidden 128, 4 layers, fp32, {torch.get_num_threads()} threads), "
        f"{new_tokens} new tokens x {runs} runs after a warm-up, budget {budget}, "
        f"branch_k {branch_k}"
    )
    print(
        f"{'head':<16} {'tau':>5} {'round ms':>9} {'draft':>7} {'tree':>7} {'verify':>7} "
        f"{'walk':>7} {'host %':>7} {'ms/tok':>7} {'vs greedy':>9}"
    )

    def run(fn, *args, **kwargs):
        fn(*args, ids, new_tokens, positions=positions, **kwargs)  # warm-up
        return [
            fn(*args, ids, new_tokens, positions=positions, return_stats=True, **kwargs)[1]
            for _ in range(runs)
        ]

    base = float(np.median([s.ms_per_token for s in run(glance.greedy_generate, target)]))
    for name, drafter in (("dflash (random)", head), ("oracle", oracle)):
        stats = run(glance.generate, drafter, target, budget=budget, branch_k=branch_k)
        rounds = [r for s in stats for r in s.rounds]
        draft = np.mean([r.draft_ms for r in rounds])
        tree = np.mean([r.tree_ms for r in rounds])
        verify = np.mean([r.verify_ms for r in rounds])
        walk = np.mean([r.host_ms - r.tree_ms for r in rounds])
        total = draft + tree + verify + walk
        tau = sum(r.committed for r in rounds) / len(rounds)
        ms_tok = float(np.median([s.ms_per_token for s in stats]))
        print(
            f"{name:<16} {tau:>5.2f} {total:>9.2f} {draft:>7.2f} {tree:>7.2f} {verify:>7.2f} "
            f"{walk:>7.2f} {100 * (tree + walk) / total:>6.1f}% {ms_tok:>7.2f} "
            f"{base / ms_tok:>8.2f}x"
        )
    print(f"greedy baseline: {base:.2f} ms/token")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m glance.testing.round_bench", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--budget", type=int, default=63)
    parser.add_argument("--branch-k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bench_decode(args.runs, args.new_tokens, args.budget, args.branch_k, args.seed)


if __name__ == "__main__":
    main()
