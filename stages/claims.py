"""The paper's claims against the measurements: ``results/claims.json`` and
``results/claims.md`` (:mod:`glance.reporting.claims`).

    python -m stages.claims --config-name from_params

Reads the main pipeline's ``audit.json``, ``main_table.json`` and ``law.json``
and the arms' ``arms.json``, so it sits in the arms pipeline, after both.
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, log, setup
from glance.pipeline.files import write_set


@app
def main(cfg) -> None:
    from glance.reporting.claims import claims, claims_markdown

    setup(cfg)
    results = Path(cfg.paths.results)
    table = claims(results, cfg.tasks, str(cfg.device))
    md = claims_markdown(table)
    write_set(results, "claims.json", table, {"claims.md": md})
    log.info("claims:\n%s", md)


if __name__ == "__main__":
    main()
