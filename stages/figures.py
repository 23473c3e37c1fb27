"""Three of the paper's four panels and its tables, from the stages' JSON
outputs (drawn by :mod:`glance.reporting.report`; panel (c), against the
EAGLE-style head, is the arms stage's ``figures/arms_context.png``).

* ``figures/law.png`` (a): per task, the mean accepted length per entropy
  decile with its interval and the task's fitted law; the pooled law dashed.
* ``figures/tree_vs_chain.png`` (b): GLANCE's tau over the chain's per task.
* ``figures/context.png``: GLANCE's tau over the chain's at two context lengths.
* ``figures/budget.png`` (d): speedup over greedy against the verifier budget N.
* ``figures/verify_cost.png``, ``length.png``, ``host_share.png``: the bench's
  cost curves.
* ``results/main_table``, ``regime_table``, ``seeds_table`` and
  ``sampling_table`` (``.md`` and ``.json``).
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, log, setup
from glance.pipeline.files import write_set
from glance.reporting import paper


@app
def main(cfg) -> None:
    setup(cfg)
    results, figures = Path(cfg.paths.results), Path(cfg.paths.figures)
    out = paper.read_outputs(cfg)
    paper.draw(out, cfg, figures)
    tables = paper.tables(out)
    for name, (data, markdown) in tables.items():
        write_set(results, f"{name}.json", data, {f"{name}.md": markdown})
    log.info("figures in %s; main table:\n%s", figures, tables["main_table"][1])


if __name__ == "__main__":
    main()
