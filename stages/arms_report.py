"""Execute ``notebooks/arms.ipynb`` (the comparison arms, the head comparison
and the paper's claims) on the outputs and save it with them.

    python -m stages.arms_report --config-name from_params

Its inputs' SHA-256 go into the notebook's metadata, as for ``stages.report``
(:mod:`glance.reporting.notebook`).
"""

from __future__ import annotations

import time
from pathlib import Path

from glance.pipeline.app import app, log, setup
from glance.reporting.notebook import ARMS_NOTEBOOK, execute


@app
def main(cfg) -> None:
    setup(cfg)
    root = Path.cwd()
    start = time.perf_counter()
    digests = execute(root / ARMS_NOTEBOOK, root)
    seconds = time.perf_counter() - start
    log.info("%s executed in %.1f s from %d inputs", ARMS_NOTEBOOK, seconds, len(digests))


if __name__ == "__main__":
    main()
