"""Task data: ``<paths.data>/<task>.jsonl`` plus images, for every task in ``tasks``.

``prepare.source=toy`` (the default) draws the toy tasks, seeded by
``prepare.seed``. Any other value is a folder of task files in the same format
(one ``{"image", "prompt"}`` record per line, the image path relative to the
folder); they are checked and copied in, so DVC tracks what was decoded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from stages.common import app, log, setup, write_json


def copy_folder(source: Path, tasks, fill: Path) -> dict:
    """Check and copy ``<task>.jsonl`` and their images from ``source`` into
    ``fill``; an image path that leaves its folder is refused with file:line."""
    from glance._io import inside
    from glance.toy.tasks import read_task

    counts = {}
    for task in tasks:
        path = source / f"{task}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing task file (prepare.source={source})")
        records = read_task(path)
        for number, r in enumerate(records, 1):
            image = inside(source, r["image"], f"{path}:{number}: image")
            if not image.is_file():
                raise FileNotFoundError(f"{path}:{number}: image {r['image']} not found")
            target = inside(fill, r["image"], f"{path}:{number}: image")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(image, target)
        shutil.copy2(path, fill / path.name)
        counts[task] = len(records)
    return counts


@app
def main(cfg) -> None:
    from glance._io import replace_dir

    setup(cfg)
    source = str(cfg.prepare.source)
    summary = {"source": source, "tasks": {}}

    def fill(tmp: Path) -> None:
        if source == "toy":
            from glance.toy.tasks import WRITABLE, write_task

            # the bench's length task too, when it is a toy task (longform)
            extra = [cfg.bench.length_task] if cfg.bench.length_task in WRITABLE else []
            for task in dict.fromkeys([*cfg.tasks, *extra]):
                write_task(task, cfg.prepare.n, tmp, cfg.prepare.seed)
                summary["tasks"][task] = int(cfg.prepare.n)
        else:
            summary["tasks"] = copy_folder(Path(source), cfg.tasks, tmp)
        write_json(tmp / "data.json", summary)

    replace_dir(cfg.paths.data, fill)
    log.info("prepared %s in %s", summary["tasks"], cfg.paths.data)


if __name__ == "__main__":
    main()
