"""The training corpus: conversations answered by the target itself, on disk as
``datasets`` Arrow shards.

Layout of a corpus folder::

    corpus.json                 what made it (the recipe) and its parts' shards
    images/<sha256>.png         every prompt image, named by its content
    <part>/shard-00000/         one ``Dataset.save_to_disk`` folder per shard,
        made_by.json            with the recipe, the part, the shard's rows

A part is ``train`` or ``heldout``. A shard's rows are ``input_ids`` (the
prompt, image placeholders expanded, then the answer up to its stop token),
``prompt_len``, ``images`` (references into ``images/``), ``temperature`` (0
for greedy answers) and ``source``/``source_row``: which conversation it
answers.

Answering is the costly step on a real target, so :func:`build_corpus` writes
one shard at a time, atomically, and a run that was killed continues after its
last finished shard. A shard is reused only if its ``made_by.json`` equals what
this run would write (same target, same recipe, same rows); any other shard is
removed and made again, with a log line. :class:`Corpus` reads a finished
corpus and checks it before any training step: a shard that cannot be read, a
shard made by another recipe, a row that does not fit the target, or a missing
image fails naming the shard and row.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "Corpus",
    "CorpusError",
    "Part",
    "build_corpus",
    "check_corpus_folder",
    "target_identity",
]

log = logging.getLogger("glance")

#: the corpus format, recorded in every shard: a change here remakes shards
FORMAT = 1
PARTS = ("train", "heldout")
_IMAGE = re.compile(r"images/[0-9a-f]{64}\.png")
#: the names a corpus folder holds at its top level
NAMES = ("corpus.json", "images", *PARTS)
_SHARD = re.compile(r"shard-\d{5}|\.shard-\d{5}\.tmp")


class CorpusError(ValueError):
    """A corpus that cannot be trained on; the message names the shard or row."""


@dataclass(frozen=True)
class Part:
    """A run of conversations answered alike: ``temperature`` 0 is greedy;
    ``seed`` seeds the sampling (batch ``j`` of the run draws with
    ``seed + j * batch``); ``source`` names where the conversations came from
    and ``rows`` their row numbers there."""

    name: str  # train or heldout
    source: str
    conversations: Sequence
    rows: Sequence[int]
    temperature: float
    seed: int


def target_identity(folder) -> str:
    """SHA-256 over a checkpoint folder's files (names and contents): which
    target answered. Hashing the weights costs a read of them, far less than
    the answering it guards."""
    h = hashlib.sha256()
    root = Path(folder)
    for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as stream:
            while chunk := stream.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def _save_image(image, folder: Path) -> str:
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    data = buf.getvalue()
    name = f"images/{hashlib.sha256(data).hexdigest()}.png"
    path = folder / name
    if not path.exists():
        from glance._io import atomic_write_bytes

        atomic_write_bytes(path, data)
    return name


def _images(conversation) -> list:
    return [
        item["image"]
        for message in conversation
        for item in (message.get("content") or [])
        if isinstance(item, dict) and item.get("type") == "image"
    ]


def check_corpus_folder(out, what: str = "corpus") -> None:
    """Refuse, naming the folder and what is foreign there, to build a corpus
    in ``out`` unless it is missing, empty, or a corpus folder: GLANCE's
    marker of kind ``corpus`` (or none, for a corpus made before markers), and
    nothing but :data:`NAMES` at the top and shard folders that record what
    made them in each part. Raises :class:`CorpusError`; nothing is removed."""
    from glance._io import BOOKKEEPING, MARKER, check_replaceable

    out = Path(out)
    try:
        check_replaceable(out, what, expect=NAMES, kind="corpus")
    except ValueError as err:
        raise CorpusError(str(err)) from None
    if not out.is_dir():
        return
    foreign = [p.name for p in out.iterdir() if p.name not in (*NAMES, MARKER, *BOOKKEEPING)]
    for part in PARTS:
        if (out / part).is_dir():
            foreign += [
                f"{part}/{p.name}"
                for p in (out / part).iterdir()
                if not (_SHARD.fullmatch(p.name) and p.is_dir())
                or (not p.name.startswith(".") and not (p / "made_by.json").is_file())
            ]
    if foreign:
        shown = ", ".join(sorted(foreign)[:5]) + (" ..." if len(foreign) > 5 else "")
        raise CorpusError(
            f"{what} {out}: holds files a corpus does not ({shown}); refusing to build a "
            "corpus there. Point it at a new or empty folder"
        )


def _shard_plan(parts: Sequence[Part], shard_size: int):
    """``(part, start, stop, shard_name)`` for every shard, in order."""
    counts = dict.fromkeys(PARTS, 0)
    for part in parts:
        for start in range(0, len(part.conversations), shard_size):
            stop = min(start + shard_size, len(part.conversations))
            yield part, start, stop, f"{part.name}/shard-{counts[part.name]:05d}"
            counts[part.name] += 1


def build_corpus(
    out,
    parts: Sequence[Part],
    answer: Callable,
    recipe: dict,
    *,
    shard_size: int = 128,
    batch_size: int = 32,
    progress: bool = False,
) -> dict:
    """Write (or finish) the corpus of ``parts`` in ``out``; returns ``corpus.json``.

    ``answer(conversations, temperature, seed)`` returns one
    :class:`~glance.training.block.Sequence` per conversation (see
    :func:`glance.training.block.regenerate`). ``recipe`` is everything that
    decides the answers (the target's identity, the sampling, the length
    limit); it is recorded in every shard and compared on reuse.
    ``shard_size`` must be a multiple of ``batch_size`` so that a shard's
    sampling seeds do not depend on where a run stopped. With ``progress``, a
    bar on stderr counts the answers made.
    """
    import datasets
    from tqdm import tqdm

    from glance._io import atomic_write_text, mark

    if shard_size % batch_size:
        raise ValueError(f"shard_size {shard_size} must be a multiple of {batch_size}")
    out = Path(out)
    check_corpus_folder(out)  # nothing below removes what a corpus did not make
    out.mkdir(parents=True, exist_ok=True)
    mark(out, "corpus")
    (out / "images").mkdir(exist_ok=True)
    plan = list(_shard_plan(parts, shard_size))
    keep = {name for *_, name in plan}
    for stale in sorted(out.glob("*/shard-*")):
        if f"{stale.parent.name}/{stale.name}" not in keep:
            log.info("corpus: removing %s, which this recipe does not make", stale)
            shutil.rmtree(stale)
    made = 0
    total = sum(b - a for _, a, b, _ in plan)
    bar = tqdm(total=total, desc="corpus", unit="answer", disable=not progress)
    for part, start, stop, name in plan:
        record = {
            "format": FORMAT,
            "recipe": recipe,
            "part": part.name,
            "source": part.source,
            "rows": [int(r) for r in part.rows[start:stop]],
            "temperature": part.temperature,
            "seed": part.seed,
            "offset": start,
        }
        folder = out / name
        if folder.is_dir():
            if _made_by(folder) == record:
                bar.update(stop - start)
                continue
            log.info("corpus: %s was made by another recipe or target; making it again", folder)
            shutil.rmtree(folder)
        images = [[_save_image(i, out) for i in _images(c)] for c in part.conversations[start:stop]]
        sequences = []
        for b in range(start, stop, batch_size):
            batch = part.conversations[b : min(b + batch_size, stop)]
            sequences += answer(batch, part.temperature, part.seed + b)
            bar.update(len(batch))
        table = datasets.Dataset.from_dict(
            {
                "input_ids": [s.input_ids.tolist() for s in sequences],
                "prompt_len": [int(s.prompt_len) for s in sequences],
                "images": images,
                "temperature": [float(part.temperature)] * len(sequences),
                "source": [part.source] * len(sequences),
                "source_row": record["rows"],
            }
        )
        tmp = folder.with_name(f".{folder.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            table.save_to_disk(str(tmp))
            atomic_write_text(tmp / "made_by.json", json.dumps(record, sort_keys=True) + "\n")
            tmp.replace(folder)
        except BaseException:  # a kill (SIGTERM raises SystemExit) leaves no hidden folder
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        made += 1
        log.info("corpus: wrote %s (%d answers)", folder, len(sequences))
    index = {
        "format": FORMAT,
        "recipe": recipe,
        "shards": {p: [n for *_, n in plan if n.startswith(p + "/")] for p in PARTS},
        "rows": {p: sum(b - a for q, a, b, _ in plan if q.name == p) for p in PARTS},
    }
    atomic_write_text(out / "corpus.json", json.dumps(index, indent=1, sort_keys=True) + "\n")
    bar.close()
    log.info("corpus: %d shards made, %d reused", made, len(plan) - made)
    return index


def _made_by(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "made_by.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


class Corpus:
    """One part of a finished corpus, read lazily from its shards.

    Checked on opening: every shard reads, records the corpus's recipe and its
    row count, and every row has a prompt and an answer; with ``vocab_size``,
    every token id is below it; every image exists inside ``images/``. Rows are
    built into :class:`~glance.training.block.Sequence` one at a time
    (:meth:`sequence`), so memory does not grow with the corpus.
    """

    def __init__(self, folder, part: str = "train", *, processor=None, vocab_size=None):
        import datasets

        self.folder, self.part, self.processor = Path(folder), part, processor
        index_file = self.folder / "corpus.json"
        try:
            index = json.loads(index_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise CorpusError(
                f"corpus {index_file}: cannot be read ({err}); run stages.corpus"
            ) from err
        if part not in index.get("shards", {}):
            raise CorpusError(f"corpus {index_file}: no part {part!r}")
        self.recipe = index["recipe"]
        shards, lengths = [], []
        for name in index["shards"][part]:
            from glance._io import inside

            path = inside(self.folder, name, f"corpus {index_file}")
            record = _made_by(path)
            if record is None or record.get("recipe") != self.recipe:
                raise CorpusError(
                    f"corpus shard {path}: made_by.json is missing or records another "
                    "recipe than corpus.json; run stages.corpus again"
                )
            try:
                table = datasets.load_from_disk(str(path))
                lengths.append(_check_rows(table, path, vocab_size, self.folder))
            except CorpusError:
                raise
            except Exception as err:  # pyarrow and datasets raise many kinds
                raise CorpusError(f"corpus shard {path}: cannot be read ({err})") from err
            if len(table) != len(record["rows"]):
                raise CorpusError(
                    f"corpus shard {path}: {len(table)} rows; made_by.json records "
                    f"{len(record['rows'])}"
                )
            shards.append(table)
        if not shards:
            raise CorpusError(f"corpus {index_file}: part {part!r} has no shards")
        self._rows = datasets.concatenate_datasets(shards)
        self.lengths = np.concatenate(lengths)
        self.prompt_lens = np.asarray(self._rows["prompt_len"], dtype=np.int64)

    def __len__(self) -> int:
        return len(self._rows)

    def input_ids(self, i: int):
        """Row ``i``'s token ids, ``(L,)`` int64, without its images."""
        import torch

        return torch.tensor(self._rows[int(i)]["input_ids"], dtype=torch.long)

    def sequence(self, i: int):
        """Row ``i`` as a :class:`~glance.training.block.Sequence`, its images
        run through the processor's image processor as the target sees them."""
        import torch

        from glance.targets.vl import StreamPositions, VisionPositions
        from glance.training.block import Sequence as Row

        row = self._rows[int(i)]
        ids = torch.tensor(row["input_ids"], dtype=torch.long)
        positions = StreamPositions()
        if row["images"]:
            from PIL import Image

            if self.processor is None:
                raise CorpusError(f"corpus {self.folder}: row {i} has images; pass a processor")
            images = [Image.open(self.folder / ref).convert("RGB") for ref in row["images"]]
            pixels = self.processor.image_processor(images=images, return_tensors="pt")
            positions = VisionPositions(pixels["pixel_values"], pixels["image_grid_thw"])
        return Row(ids, int(row["prompt_len"]), positions)


def _check_rows(table, path, vocab_size, folder) -> np.ndarray:
    """The shard's row lengths, after checking its rows with Arrow's kernels
    (no Python copy of the token ids); errors name the shard and row."""
    import pyarrow.compute as pc

    data = table.data
    ids = data.column("input_ids").combine_chunks()
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    prompt = data.column("prompt_len").to_numpy().astype(np.int64)
    bad = np.flatnonzero((prompt < 1) | (prompt >= lengths))
    if bad.size:
        r = int(bad[0])
        raise CorpusError(
            f"corpus shard {path}, row {r}: prompt_len {prompt[r]} for {lengths[r]} tokens"
        )
    if vocab_size is not None:
        flat = pc.list_flatten(ids)
        low, high = pc.min_max(flat).values()
        if low.as_py() < 0 or high.as_py() >= vocab_size:
            ends = np.cumsum(lengths)
            out = np.flatnonzero((flat.to_numpy() < 0) | (flat.to_numpy() >= vocab_size))[0]
            r = int(np.searchsorted(ends, out, side="right"))
            raise CorpusError(
                f"corpus shard {path}, row {r}: token ids outside 0..{vocab_size - 1}"
            )
    for r, refs in enumerate(data.column("images").to_pylist()):
        for ref in refs:
            if not _IMAGE.fullmatch(ref) or not (folder / ref).is_file():
                raise CorpusError(
                    f"corpus shard {path}, row {r}: image {ref!r} is missing from {folder}"
                )
    return lengths
