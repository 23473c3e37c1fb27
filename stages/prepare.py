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

from pathlib import Path

from glance.pipeline.app import app, log, setup
from glance.pipeline.files import write_json


def check_lengths(cfg, data: Path, names, shown=None) -> str:
    """Check that every record's prompt, rendered by the target's own processor
    (image and chat template included), leaves room for its task's
    ``max_new_tokens`` within the target's positions. Loads the processor and
    config only, never weights. Returns what was checked against, for the log.
    Errors name the file as it is in ``shown`` (the source folder), not in the
    temporary folder being filled.

    When the target is to be trained here (``target.retrain``) or its files
    cannot be reached, the check is left to the decode stage, which makes it
    again before any prompt runs; the return value says so.
    """
    from transformers import AutoConfig

    from glance._io import checkpoint_path
    from glance.data.tasks import numbered_records
    from glance.pipeline.app import task_by_name
    from glance.targets.vl import load_processor
    from stages.inputs import prompt_inputs

    t = cfg.target
    if t.source == "toy":
        import glance.toy.processor  # noqa: F401  (registers the toy processor)
    if t.retrain or not t.path:
        return "not checked here: the target is trained after prepare"
    try:
        source = checkpoint_path(t.path, "target.path")
        config = AutoConfig.from_pretrained(str(source), revision=t.revision)
        processor = load_processor(source, hasattr(config, "vision_config"), revision=t.revision)
    except OSError as err:
        return f"not checked here: the target's files are out of reach ({err})"
    if processor is None:
        return "not checked here: the target ships no processor"
    limit = config.get_text_config().max_position_embeddings
    for name in names:
        room = limit - int(task_by_name(name).max_new_tokens)
        path = data / f"{name}.jsonl"
        for number, record in numbered_records(path):
            where = f"{Path(shown or data) / path.name}:{number}: prompt"
            try:
                ids, _ = prompt_inputs(processor, record, data)
            except Exception as err:  # the processor's own words, placed
                raise ValueError(f"{where}: the target's processor cannot read it ({err})") from err
            if ids.shape[1] > room:
                raise ValueError(
                    f"{where}: {ids.shape[1]} tokens with its image; with {name}'s "
                    f"max_new_tokens that exceeds the target's {limit} positions (room: {room})"
                )
    return f"{t.path}: {limit} positions"


@app
def main(cfg) -> None:
    from glance._io import replace_dir

    setup(cfg)
    source = str(cfg.prepare.source)
    summary = {"source": source, "tasks": {}}
    need = int(cfg.n) + 1
    if source == "toy" and int(cfg.prepare.n) < need:
        raise SystemExit(
            f"prepare.n: expected at least n + 1 = {need} toy examples per task; "
            f"got {cfg.prepare.n}"
        )

    mapping = None
    if cfg.prepare.dataset is not None:  # checked before anything is read or written
        from glance.data.benchmarks import Mapping

        conf = Path(__file__).resolve().parent.parent / "conf" / "dataset"
        mapping = Mapping.from_file(conf / f"{cfg.prepare.dataset}.yaml")
        if source == "toy":
            raise SystemExit(
                "prepare.source: expected hf, hf:<name> or a local dataset path "
                f"with prepare.dataset={cfg.prepare.dataset}; got toy"
            )
        if list(cfg.tasks) != [mapping.task]:
            raise SystemExit(
                f"tasks: dataset {mapping.name} fills one task, {mapping.task}; "
                f"set tasks=[{mapping.task}] (got {list(cfg.tasks)})"
            )

    def fill(tmp: Path) -> None:
        if mapping is not None:
            from glance.data.benchmarks import load_rows, write_task

            limit = cfg.prepare.limit if cfg.prepare.limit is not None else need
            rows = load_rows(
                source, mapping, split=cfg.prepare.split, revision=cfg.prepare.revision, limit=limit
            )
            count = write_task(rows, mapping, tmp, source)
            if count < need:
                raise SystemExit(
                    f"{source}: {count} rows; the pipeline needs at least n + 1 = "
                    f"{need} (n measured prompts and one warm-up)"
                )
            summary["tasks"][mapping.task] = count
            summary["dataset"] = {
                "mapping": mapping.name,
                "split": cfg.prepare.split or mapping.split,
                "revision": cfg.prepare.revision,
            }
            summary["lengths"] = check_lengths(cfg, tmp, cfg.tasks, shown=source)
        elif source == "toy":
            from glance.toy.tasks import WRITABLE, write_task

            # the bench's length task too, when it is a toy task (longform)
            extra = [cfg.bench.length_task] if cfg.bench.length_task in WRITABLE else []
            for task in dict.fromkeys([*cfg.tasks, *extra]):
                write_task(task, cfg.prepare.n, tmp, cfg.prepare.seed)
                summary["tasks"][task] = int(cfg.prepare.n)
        else:
            from glance.data.tasks import copy_folder

            summary["tasks"] = copy_folder(Path(source), cfg.tasks, tmp, need)
            summary["lengths"] = check_lengths(cfg, tmp, cfg.tasks, shown=source)
        write_json(tmp / "data.json", summary)

    names = [*cfg.tasks, str(cfg.bench.length_task)]
    expect = {"data.json", *names, *(f"{t}.jsonl" for t in names)}
    try:  # refuses a folder it did not write, before anything is read
        replace_dir(cfg.paths.data, fill, "paths.data", expect=expect)
    except ValueError as err:
        if str(err).startswith("paths.data"):
            raise SystemExit(str(err)) from None
        raise
    log.info("prepared %s in %s", summary["tasks"], cfg.paths.data)


if __name__ == "__main__":
    main()
