"""Benchmarks that print numbers. Run ``python -m glance.core.tree_bench --help``.

``tree`` (the only one): the host-side cost of one round's candidate tree, i.e.
:func:`glance.core.tree.build_budget_tree` followed by :func:`glance.core.tree.tree_mask`,
on synthetic block drafts, with the compiled kernel and, as the baseline in the
same run, the pure-Python reference. Needs numpy only.

Where a decoding round's time goes on a tiny model is measured by
``python -m glance.testing.round_bench`` (it needs the test doubles).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from glance.core.tree import build_budget_tree, tree_mask

#: (D, k, budget) settings the tree benchmark reports.
TREE_SETTINGS = ((15, 8, 63), (15, 10, 255))


def synthetic_drafts(depth: int, k: int, n: int, seed: int, vocab: int = 4096):
    """``n`` block drafts as (top_ids, top_logprobs), each ``(depth, k)``.

    Per-offset logits are Gaussian with a temperature drawn per draft, so that
    the drafts range from flat (shallow, bushy trees) to peaked (deep spines).
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        logits = rng.normal(size=(depth, vocab)) * rng.uniform(1.0, 8.0)
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        top = np.argsort(-logp, axis=1)[:, :k]
        out.append((top.astype(np.int64), np.take_along_axis(logp, top, axis=1)))
    return out


def time_calls(fn, args_list, repeats: int) -> np.ndarray:
    """Per-call seconds of ``fn(*args)``, cycling through ``args_list``."""
    times = np.empty(repeats)
    clock = time.perf_counter
    for i in range(repeats):
        args = args_list[i % len(args_list)]
        start = clock()
        fn(*args)
        times[i] = clock() - start
    return times


def bench_tree(repeats: int, seed: int) -> None:
    import glance.core.tree

    kernel = glance.core.tree._ctree
    print(f"candidate tree: build_budget_tree + tree_mask, {repeats} calls per setting")
    print(f"implementation: {'compiled glance._ctree' if kernel else 'pure Python (no kernel)'}")
    print(
        f"{'D':>3} {'k':>3} {'budget':>6} {'median us':>10} {'p10 us':>8} {'p90 us':>8} "
        f"{'build us':>9} {'mask us':>8} {'depth':>6} {'python us':>10} {'ratio':>6}"
    )
    for depth, k, budget in TREE_SETTINGS:
        drafts = synthetic_drafts(depth, k, 64, seed)
        trees = [build_budget_tree(ids, lp, budget, k) for ids, lp in drafts]

        def both(ids, lp, budget=budget, k=k):
            return tree_mask(build_budget_tree(ids, lp, budget, k))

        time_calls(both, drafts, 200)  # warm-up
        total = time_calls(both, drafts, repeats) * 1e6
        build = (
            time_calls(lambda i, lp, b=budget, k=k: build_budget_tree(i, lp, b, k), drafts, repeats)
            * 1e6
        )
        mask = time_calls(tree_mask, [(t,) for t in trees], repeats) * 1e6
        # The pure-Python reference, in the same run, as the baseline of the ratio.
        glance.core.tree._ctree = None
        try:
            python = time_calls(both, drafts, max(repeats // 5, 1)) * 1e6
        finally:
            glance.core.tree._ctree = kernel
        mean_depth = np.mean([t.depths.max() for t in trees])
        print(
            f"{depth:>3} {k:>3} {budget:>6} {np.median(total):>10.1f} "
            f"{np.percentile(total, 10):>8.1f} {np.percentile(total, 90):>8.1f} "
            f"{np.median(build):>9.1f} {np.median(mask):>8.1f} {mean_depth:>6.1f} "
            f"{np.median(python):>10.1f} {np.median(python) / np.median(total):>5.1f}x"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m glance.core.tree_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="which", required=True)
    tree = sub.add_parser("tree", help="candidate tree build + mask")
    tree.add_argument("--repeats", type=int, default=5000)
    tree.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bench_tree(args.repeats, args.seed)


if __name__ == "__main__":
    main()
