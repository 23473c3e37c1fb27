"""Task data: ``<paths.data>/<task>.jsonl`` plus images, for every task in ``tasks``.

``prepare.source=toy`` (the default) draws the toy tasks, seeded by
``prepare.seed``. Any other value is a folder of task files in the same format
(one ``{"image", "prompt"}`` record per line, the image path relative to the
folder); they are checked and copied in, so DVC tracks what was decoded. With
``prepare.dataset=<mapping>`` (``conf/dataset/<mapping>.yaml``) the source is
a benchmark read through ``datasets`` (:mod:`glance.data.benchmarks`): ``hf``
(the mapping's hub name), ``hf:<name>``, or a local parquet file or folder,
arrow file or ``save_to_disk`` folder, with ``prepare.split``,
``prepare.limit`` (rows read; null: ``n + 1``) and ``prepare.revision``. It
fills the mapping's one task, so ``tasks`` must name only that task. Every
record must parse, its image must stay inside the folder and open with Pillow,
its prompt must fit the target's positions with the task's ``max_new_tokens``,
and each file needs ``n + 1`` records (only those are read and copied). On any
failure the old data folder is left as it was; a folder GLANCE did not write
(no ``.glance-output`` marker, and files other than task files) is never
replaced.
"""

from __future__ import annotations

from glance.data.prepare import benchmark_mapping, fill_data, toy_tasks
from glance.pipeline.app import CONF_DIR, app, log, setup
from glance.pipeline.files import write_json


@app
def main(cfg) -> None:
    from glance._io import replace_dir

    setup(cfg)
    need = int(cfg.n) + 1
    if str(cfg.prepare.source) == "toy" and int(cfg.prepare.n) < need:
        raise SystemExit(
            f"prepare.n: expected at least n + 1 = {need} toy examples per task; "
            f"got {cfg.prepare.n}"
        )
    mapping = benchmark_mapping(cfg, CONF_DIR)  # checked before anything is read or written
    summary = {}

    def fill(tmp):
        summary.update(fill_data(cfg, tmp, mapping, need))
        write_json(tmp / "data.json", summary)

    names = toy_tasks(cfg) if str(cfg.prepare.source) == "toy" else list(cfg.tasks)
    expect = {"data.json", *names, *(f"{t}.jsonl" for t in names)}
    try:  # refuses a folder it did not write, before anything is read
        replace_dir(cfg.paths.data, fill, "paths.data", expect=expect, kind="tasks")
    except ValueError as err:
        if str(err).startswith("paths.data"):
            raise SystemExit(str(err)) from None
        raise
    log.info("prepared %s in %s", summary["tasks"], cfg.paths.data)


if __name__ == "__main__":
    main()
