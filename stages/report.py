"""Execute ``notebooks/results.ipynb`` on the pipeline's outputs and save it with them.

    python -m stages.report --config-name from_params

Its inputs' SHA-256 go into the notebook's metadata, so ``tests/test_report.py``
can tell whether the saved outputs are current (:mod:`glance.reporting.notebook`).
"""

from __future__ import annotations

import time
from pathlib import Path

from glance.pipeline.app import app, log, setup
from glance.reporting.notebook import NOTEBOOK, execute


@app
def main(cfg) -> None:
    setup(cfg)
    root = Path.cwd()
    start = time.perf_counter()
    digests = execute(root / NOTEBOOK, root)
    seconds = time.perf_counter() - start
    log.info("%s executed in %.1f s from %d inputs", NOTEBOOK, seconds, len(digests))


if __name__ == "__main__":
    main()
