"""Execute ``notebooks/results.ipynb`` on the pipeline's outputs and save it with them.

    python -m stages.report --config-name from_params

It reads ``paths.results`` and ``paths.figures`` (the repository's ``results/``
and ``figures/`` by default), and refuses a folder missing a file it reads,
naming the file. Its inputs' SHA-256 go into the notebook's metadata, so ``tests/test_report.py``
can tell whether the saved outputs are current (:mod:`glance.reporting.notebook`).
"""

from __future__ import annotations

from glance.pipeline.app import app, setup
from glance.reporting.notebook import NOTEBOOK, run_stage


@app
def main(cfg) -> None:
    setup(cfg)
    run_stage(NOTEBOOK, cfg.paths.results, cfg.paths.figures)


if __name__ == "__main__":
    main()
