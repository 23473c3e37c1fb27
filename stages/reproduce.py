"""Compare two checkouts' pipeline outputs field by field, timings left out.

    python -m stages.reproduce /path/to/other/clone [--root .]

Prints each difference as ``file: field: ours against theirs`` and exits 1
when there is any (:mod:`glance.experiments.reproduce` says what is compared).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> None:
    from glance.experiments.reproduce import compare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path)
    parser.add_argument("--root", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    found, n = compare(args.root, args.other)
    for line in found:
        print(line)
    print(f"{n} files compared, {len(found)} non-timing differences")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
