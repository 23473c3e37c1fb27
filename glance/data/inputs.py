"""A task's prompts as the target reads them: the task's records, the
context filler, and each record's ids and positions with its image checked.
Shared by ``prepare`` (which checks every prompt fits) and the decoding stages.
"""

from __future__ import annotations

from pathlib import Path


def task_records(data_dir, task, n: int | None) -> list[dict]:
    """The first ``n`` records of the task's JSONL file (all when ``None``; the
    rest of the file is not read); each image must exist inside the data
    folder. Errors name the file and line."""
    from glance._io import inside
    from glance.data.tasks import numbered_records

    data_dir = Path(data_dir)
    path = inside(data_dir, str(task.file), f"task {task.name}: file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing task file; run `python -m stages.prepare`")
    numbered = numbered_records(path, limit=n)
    records = [r for _, r in numbered]
    for line, r in numbered:
        if not inside(data_dir, r["image"], f"{path}:{line}: image").is_file():
            raise FileNotFoundError(f"{path}:{line}: image {r['image']} not under {data_dir}")
    if n is not None and len(records) < n:
        raise ValueError(f"{path}: {len(records)} records; this run needs {n}")
    return records


def filler(n_tokens: int, tokenizer) -> str:
    """:func:`glance.targets.vl.filler`: the preamble of the context runs."""
    from glance.targets.vl import filler as text

    return text(n_tokens, tokenizer)


def prompt_inputs(processor, record: dict, data_dir, preamble: str = ""):
    """:func:`glance.targets.vl.chat_inputs` for one task record: its question (after
    the optional preamble), then its image."""
    from PIL import Image

    from glance.data.tasks import check_image
    from glance.targets.vl import chat_inputs

    path = Path(data_dir) / record["image"]
    check_image(path, f"image {path}")  # bounded before decoding, named on failure
    with Image.open(path) as img:
        image = img.convert("RGB")
    return chat_inputs(processor, preamble + record["prompt"], image)
