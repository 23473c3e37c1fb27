"""Compare two checkouts' pipeline outputs field by field, timings left out.

Walks every output the pipeline writes (``results/``, ``figures/``,
``notebooks/``, ``data/``, ``models/``, the DVC-cached ones included) in both
trees. JSON and JSONL files are compared value by value, skipping the fields
that hold a wall-clock measurement (:data:`TIMING`: milliseconds, seconds,
tokens per second, speedups and the intervals under them); every other file
byte for byte, except the figures and tables drawn from timings
(:data:`TIMED_FILES`), and not at all the timing stages' outputs, made on the
machine's own kernels (:data:`UNPINNED_FILES`). :func:`compare` returns each difference as ``file:
field: ours against theirs`` (``python -m stages.reproduce`` prints them and
exits 1 when there is any). ``budget="auto"`` rows are compared like
the rest: under ``target.auto_cost`` their tree sizes come from a fixed table,
not the clock (with ``auto_cost: null`` they would differ, and this says so).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

OUTPUTS = ("results", "figures", "notebooks", "data", "models")

#: a field whose value is a measured time, or a ratio or summary of times
TIMING = re.compile(
    r"(^|_)(ms|seconds|s|speedup|speed|per_s|time|e2e|decode|latency)(_|$)"
    r"|ms_per|tokens_per|_ms$|^speed|over hf_greedy|auto over|efficiency|ms/token|tokens/s"
    r"|host_share|_over$|^glance_(tree|greedy)$"
    r"|^best_budget$|^(glance|eagle)_best$|^auto_vs_eagle_best$"  # the fastest budget: a timing
)

#: files drawn wholly or partly from timings: compared only where JSON or
#: Markdown tables let the timing columns be left out
TIMED_FILES = re.compile(
    r"figures/(verify_cost|length|host_share|budget|tree_vs_chain|context|context_cost|arms_context)\.png$"
    r"|notebooks/(results|arms)\.ipynb$|results/(bench|arms|claims)\.md$|results/verify_cost\.csv$"
    r"|results/train/[^/]+/plots/metrics/.*tokens_per_second\.tsv$"
    r"|results/length_curve\.csv$|results/context_cost\.csv$|results/sweep/[^/]+/curve\.csv$|results/main_table\.md$|results/sampling_table\.md$"
)


#: outputs of the timing stages, which run on the machine's own kernels
#: (``numerics.pin=false``): every field of them follows the machine, the tau
#: and token counts of their rows included, so none is compared
UNPINNED_FILES = re.compile(r"results/(bench|compile)\.(json|md)$")


def timing_key(key) -> bool:
    return isinstance(key, str) and bool(TIMING.search(key))


def diff_values(a, b, where: str, out: list) -> None:
    """Append ``where: a against b`` for each differing non-timing leaf."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if timing_key(key):
                continue
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'ours' if key in a else 'theirs'}")
                continue
            diff_values(a[key], b[key], f"{where}.{key}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items against {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff_values(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: {a!r} against {b!r}")


def _records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def compare_file(rel: str, ours: Path, theirs: Path) -> list[str]:
    if UNPINNED_FILES.search(rel):
        return []
    if rel.endswith(".json"):
        out: list[str] = []
        a, b = json.loads(ours.read_text()), json.loads(theirs.read_text())
        diff_values(a, b, rel, out)
        return out
    if rel.endswith(".jsonl"):
        a, b = _records(ours), _records(theirs)
        if len(a) != len(b):
            return [f"{rel}: {len(a)} records against {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True), start=1):
            diff_values(x, y, f"{rel}:{i}", out)
        return out
    if TIMED_FILES.search(rel):
        return []
    return [] if ours.read_bytes() == theirs.read_bytes() else [f"{rel}: bytes differ"]


def files(root: Path) -> set[str]:
    found = set()
    for top in OUTPUTS:
        for p in (root / top).rglob("*"):
            if p.is_file() and "sweeps" not in p.parts:
                found.add(str(p.relative_to(root)))
    return found


def compare(root: Path, other: Path) -> tuple[list[str], int]:
    """``(differences, files compared)`` between the outputs of two checkouts."""
    ours, theirs = files(root), files(other)
    out = [f"{rel}: only in {'ours' if rel in ours else 'theirs'}" for rel in sorted(ours ^ theirs)]
    both = sorted(ours & theirs)
    for rel in both:
        out += compare_file(rel, root / rel, other / rel)
    return out, len(both)
