"""Benchmarks as task files: a Hugging Face dataset, read through ``datasets``,
mapped column by column to ``{"image", "prompt", "answers"}`` records.

A mapping (``conf/dataset/<name>.yaml``) names the task it fills, where the
benchmark lives on the hub (``hub``, ``config``, ``split``), which columns
hold the image, the question and the answers, and the prompt template, the
benchmark's usual one: ``{question}`` is the question as stored,
``{question_capitalized}`` the same with its first letter upper-cased (as
lmms-eval's TextVQA does). A benchmark without a question (COCO captions) maps
``question: null`` and its template is the fixed prompt.

Sources (:func:`load_rows`): ``hf:<name>`` (or ``hf`` for the mapping's own
``hub``), loaded with ``datasets.load_dataset``, which reads a cached copy and
honours ``HF_HUB_OFFLINE``; or a local path: a parquet file or a folder of
them, an arrow file, or a folder written by ``Dataset.save_to_disk``. A local
source never reaches the network.

:func:`write_task` writes each image as a PNG under ``images/<task>/`` beside
``<task>.jsonl``. Errors name the mapping file and key, the missing column
(with those present), or the row whose image cannot be read.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Conversations", "Mapping", "corpus_conversations", "load_rows", "write_task"]

_KEYS = ("task", "hub", "config", "split", "columns", "prompt")
_COLUMNS = ("image", "question", "answers")


@dataclass(frozen=True)
class Mapping:
    """One benchmark's columns and prompt; see the module docstring."""

    name: str
    task: str
    hub: str
    config: str | None
    split: str
    image: str
    question: str | None
    answers: str
    prompt: str

    @classmethod
    def from_file(cls, path) -> Mapping:
        """Read and check ``conf/dataset/<name>.yaml``; errors name the file and key."""
        import yaml

        path = Path(path)
        if not path.is_file():
            known = sorted(p.stem for p in path.parent.glob("*.yaml"))
            raise FileNotFoundError(f"{path}: no such dataset mapping; known: {known}")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of {list(_KEYS)}")
        missing = [k for k in _KEYS if k not in data]
        if missing:
            raise ValueError(f"{path}: missing key(s) {missing}")
        columns = data["columns"]
        if not isinstance(columns, dict) or set(columns) != set(_COLUMNS):
            raise ValueError(f"{path}: columns: expected exactly {list(_COLUMNS)}; got {columns!r}")
        for key in ("task", "hub", "split", "prompt"):
            if not isinstance(data[key], str) or not data[key]:
                raise ValueError(f"{path}: {key}: expected a non-empty string; got {data[key]!r}")
        for key in ("image", "answers"):
            if not isinstance(columns[key], str):
                raise ValueError(f"{path}: columns.{key}: expected a column name")
        if columns["question"] is None and "{question" in data["prompt"]:
            raise ValueError(f"{path}: prompt uses the question, but columns.question is null")
        return cls(
            path.stem,
            data["task"],
            data["hub"],
            data["config"],
            data["split"],
            columns["image"],
            columns["question"],
            columns["answers"],
            data["prompt"],
        )

    def prompt_for(self, question: str | None) -> str:
        if question is None:
            return self.prompt
        q = question.strip()
        return self.prompt.format(question=q, question_capitalized=q[:1].upper() + q[1:])


def load_rows(source: str, mapping: Mapping, *, split=None, revision=None, limit=None):
    """The benchmark's rows as a ``datasets.Dataset``, the first ``limit`` of
    ``split`` (the mapping's split by default); images stay undecoded, so a bad
    one is named by its row in :func:`write_task`."""
    import datasets

    split = split or mapping.split
    if source == "hf" or source.startswith("hf:"):
        name = source[3:] or mapping.hub
        ds = datasets.load_dataset(name, mapping.config, split=split, revision=revision)
    else:
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"prepare.source: {path} does not exist")
        if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise ValueError(f"{path}: no split {split!r}; it has {sorted(ds)}")
                ds = ds[split]
        elif path.suffix == ".arrow":
            ds = datasets.Dataset.from_file(str(path))
        else:
            files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
            if not files or any(f.suffix != ".parquet" for f in files):
                raise ValueError(
                    f"prepare.source: {path}: expected hf:<name>, a parquet file or folder, "
                    "an arrow file, or a save_to_disk folder"
                )
            ds = datasets.load_dataset(
                "parquet", data_files={split: [str(f) for f in files]}, split=split
            )
    missing = [
        f"{key} ({col!r})"
        for key in _COLUMNS
        if (col := getattr(mapping, key)) is not None and col not in ds.column_names
    ]
    if missing:
        raise ValueError(
            f"{source}: column(s) {', '.join(missing)} of mapping {mapping.name!r} not found; "
            f"the dataset has {ds.column_names}"
        )
    if isinstance(ds.features[mapping.image], datasets.Image):
        ds = ds.cast_column(mapping.image, datasets.Image(decode=False))
    if limit is not None:
        ds = ds.select(range(min(int(limit), len(ds))))
    return ds


def _image(value, where: str):
    """A PIL image from an image cell: undecoded ``{"bytes", "path"}``, or a
    decoded image. Anything Pillow cannot read is refused naming ``where``."""
    from PIL import Image, UnidentifiedImageError

    try:
        if isinstance(value, Image.Image):
            img = value
        elif isinstance(value, dict) and value.get("bytes"):
            img = Image.open(io.BytesIO(value["bytes"]))
        else:
            raise ValueError(f"no image bytes ({type(value).__name__})")
        img.load()
        return img.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise ValueError(f"{where}: image cannot be read ({err})") from err


def write_task(ds, mapping: Mapping, out: Path, source: str) -> int:
    """Write ``<out>/<task>.jsonl`` and ``<out>/images/<task>/<row>.png`` from
    the rows of ``ds``; returns the number of records. Each record keeps the
    row's index (``row``) and its reference answers (``answers``, a list)."""
    folder = Path(out) / "images" / mapping.task
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(ds):
        where = f"{source}: row {i}"
        question = None
        if mapping.question is not None:
            question = row[mapping.question]
            if not isinstance(question, str) or not question.strip():
                raise ValueError(f"{where}: column {mapping.question!r}: expected a question")
        answers = row[mapping.answers]
        answers = [answers] if isinstance(answers, str) else list(answers or [])
        if not all(isinstance(a, str) for a in answers):
            raise ValueError(f"{where}: column {mapping.answers!r}: expected strings")
        rel = f"images/{mapping.task}/{i:06d}.png"
        _image(row[mapping.image], f"{where}, column {mapping.image!r}").save(Path(out) / rel)
        record = {"image": rel, "prompt": mapping.prompt_for(question), "answers": answers}
        lines.append(json.dumps(record | {"row": i}))
    if not lines:
        raise ValueError(f"{source}: no rows in split {mapping.split!r}")
    (Path(out) / f"{mapping.task}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _first_user_turn(value, where: str) -> str:
    """The question a cell holds: its text, or a conversation's first user turn
    (The Cauldron's ``{user, assistant}``, chat ``{role, content}``, or
    LLaVA's ``{from, value}``), with LLaVA's ``<image>`` tag removed."""
    text = value
    if isinstance(value, list) and value:
        turn = value[0]
        if isinstance(turn, dict):
            text = turn.get("user")
            if text is None and turn.get("role") == "user":
                text = turn.get("content")
            if text is None and turn.get("from") == "human":
                text = turn.get("value")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: expected a question or a conversation with a user turn")
    return text.replace("<image>", "").strip()


class Conversations:
    """A corpus source's rows as chat conversations, built when indexed
    (``rows[i]``, ``rows[a:b]``), so images are decoded a batch at a time."""

    def __init__(self, ds, image: str, question: str, prompt: str, source: str, rows=None):
        self.ds, self.image, self.question, self.prompt = ds, image, question, prompt
        self.source = source
        self.rows = range(len(ds)) if rows is None else rows

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, rows) -> Conversations:
        return Conversations(self.ds, self.image, self.question, self.prompt, self.source,
                             self.rows[rows.start:rows.stop])  # fmt: skip

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row_no = self.rows[i]
        row = self.ds[row_no]
        where = f"{self.source}: row {row_no}"
        cell = row[self.image]
        cell = cell[0] if isinstance(cell, list) and cell else cell
        text = _first_user_turn(row[self.question], f"{where}, column {self.question!r}")
        content = [
            {"type": "image", "image": _image(cell, f"{where}, column {self.image!r}")},
            {"type": "text", "text": self.prompt.format(question=text)},
        ]
        return [{"role": "user", "content": content}]


def corpus_conversations(c) -> Conversations:
    """The rows a corpus recipe (:class:`~glance.pipeline.config.CorpusConfig`)
    answers, as conversations: the first ``greedy + sampled + heldout`` rows of
    the split. Errors name the source and the missing column."""
    import datasets

    need = c.greedy + c.sampled + c.heldout
    if c.source == "hf" or c.source.startswith("hf:"):
        name = c.source[3:] or c.hub
        ds = datasets.load_dataset(name, c.config, split=c.split, revision=c.revision)
    else:
        path = Path(c.source)
        if not path.exists():
            raise FileNotFoundError(f"corpus.source: {path} does not exist")
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if c.split not in ds:
                raise ValueError(f"{path}: no split {c.split!r}; it has {sorted(ds)}")
            ds = ds[c.split]
    missing = [col for col in (c.image, c.question) if col not in ds.column_names]
    if missing:
        raise ValueError(
            f"{c.source}: column(s) {missing} of corpus {c.name!r} not found; "
            f"the dataset has {ds.column_names}"
        )
    if len(ds) < need:
        raise ValueError(f"{c.source}: {len(ds)} rows; corpus {c.name!r} needs {need}")
    return Conversations(ds.select(range(need)), c.image, c.question, c.prompt, c.source)
