"""Execute ``notebooks/arms.ipynb`` (the comparison arms, the head comparison
and the paper's claims) on the outputs and save it with them.

    python -m stages.arms_report --config-name from_params

Its inputs' SHA-256 go into the notebook's metadata, as for ``stages.report``
(:mod:`glance.reporting.notebook`).
"""

from __future__ import annotations

from glance.pipeline.app import app, setup
from glance.reporting.notebook import ARMS_NOTEBOOK, run_stage


@app
def main(cfg) -> None:
    setup(cfg)
    run_stage(ARMS_NOTEBOOK)


if __name__ == "__main__":
    main()
