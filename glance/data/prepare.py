"""The prepare stage's work: fill a data folder with task files from the toy
world, a folder of task files, or a benchmark, and check every prompt fits
the target."""

from __future__ import annotations

from pathlib import Path


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
    from glance.data.inputs import prompt_inputs
    from glance.data.tasks import numbered_records
    from glance.pipeline.app import task_by_name
    from glance.targets.vl import load_processor

    t = cfg.target
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


def benchmark_mapping(cfg, conf_dir):
    """``prepare.dataset``'s mapping (``conf/dataset/<name>.yaml``), or ``None``;
    checked against ``prepare.source`` and ``tasks`` before anything is read."""
    if cfg.prepare.dataset is None:
        return None
    from glance.data.benchmarks import Mapping

    mapping = Mapping.from_file(Path(conf_dir) / "dataset" / f"{cfg.prepare.dataset}.yaml")
    if str(cfg.prepare.source) == "toy":
        raise SystemExit(
            "prepare.source: expected hf, hf:<name> or a local dataset path "
            f"with prepare.dataset={cfg.prepare.dataset}; got toy"
        )
    if list(cfg.tasks) != [mapping.task]:
        raise SystemExit(
            f"tasks: dataset {mapping.name} fills one task, {mapping.task}; "
            f"set tasks=[{mapping.task}] (got {list(cfg.tasks)})"
        )
    return mapping


def toy_tasks(cfg) -> list[str]:
    """The toy tasks the prepare stage writes: the run's ``tasks``, then those
    other stages read by name (the bench's length and cost tasks and its task
    list, the context sweep's task, the arms' tasks) when they are toy tasks,
    so that a run on a subset of ``tasks`` still finds them."""
    from glance.toy.tasks import WRITABLE

    b = cfg.bench
    named = [b.length_task, b.cost_task, *b.tasks, cfg.context_sweep.task, *cfg.arms.tasks]
    return list(dict.fromkeys([*cfg.tasks, *(str(t) for t in named if t in WRITABLE)]))


def fill_data(cfg, tmp: Path, mapping, need: int) -> dict:
    """Write the task files into ``tmp``; returns ``data.json``'s record."""
    source = str(cfg.prepare.source)
    summary = {"source": source, "tasks": {}}
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
        from tqdm import tqdm

        from glance.toy.tasks import write_task

        names, n = toy_tasks(cfg), int(cfg.prepare.n)
        with tqdm(total=len(names) * n, desc="prepare", unit="example") as bar:  # on stderr
            for task in names:
                write_task(task, n, tmp, cfg.prepare.seed)
                summary["tasks"][task] = n
                bar.update(n)
    else:
        from glance.data.tasks import copy_folder

        summary["tasks"] = copy_folder(Path(source), cfg.tasks, tmp, need)
        summary["lengths"] = check_lengths(cfg, tmp, cfg.tasks, shown=source)
    return summary
