"""Five synthetic grounded tasks, from free-running to strongly grounded.

Every image is a small page of monospace text: ``ROWS`` lines of ``COLS``
cells, each cell ``CELL`` x ``CELL`` pixels holding one character, so one
vision patch is one glyph. The question comes before the image in the prompt.

=========  ==========================================================  ============
task       answer                                                      grounding
=========  ==========================================================  ============
caption    a randomly phrased description with a few image facts       weakest
textvqa    a word read off a given line, inside one of many replies
infovqa    a number read off a labelled item, in one of three templates
docvqa     a field value copied verbatim, in an almost fixed template
chartqa    a long run of values copied verbatim, in a fixed template   strongest
=========  ==========================================================  ============

:func:`make_example` draws one example; ``answer`` is the reference answer and
:meth:`Example.sample_answer` draws a phrasing from the task's distribution, as
training text. :func:`write_task` writes ``<task>.jsonl`` plus PNG images,
deterministically from a seed. Needs numpy and Pillow.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glance._io import atomic_write_text

TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa")
ROWS, COLS, CELL = 4, 12, 8
FONT_SIZE = 8
#: every character a page, prompt or answer may use
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:;!?'-=/"

WORDS = (
    "maple cedar river stone amber frost ember coral lotus pearl cloud delta "
    "ivory mango olive prism quartz raven sable tiger umber violet willow zephyr "
    "basil cocoa dune fern grove hazel iris jade kiwi lemon moss nova opal plum"
).split()
ITEMS = ("figs", "pears", "limes", "plums", "dates", "kiwis", "yams", "beets")
FIELDS = ("name", "city", "code", "date")  # equal length: the value sits at a fixed offset


@dataclass(frozen=True)
class Example:
    """One task example: the page's lines, the prompt and the reference answer."""

    task: str
    lines: tuple[str, ...]
    prompt: str
    answer: str
    # Phrasings the answer may take, with their probabilities (training text).
    variants: tuple[tuple[str, float], ...] = field(default=())

    def sample_answer(self, rng: np.random.Generator) -> str:
        if not self.variants:
            return self.answer
        texts, probs = zip(*self.variants, strict=True)
        return texts[int(rng.choice(len(texts), p=np.array(probs) / sum(probs)))]


def _word(rng, exclude=()):
    choices = [w for w in WORDS if w not in exclude]
    return choices[int(rng.integers(len(choices)))]


def _alnum(rng, n):
    pool = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(pool[int(i)] for i in rng.integers(len(pool), size=n))


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


#: short words of the free-running caption tail, and each word's successors
TAIL = (
    "sun sky oak elm fog dew ice ash bay cap den fin gem hut ink jet "
    "kit lid mud nap owl pen ray zen"
).split()
_SUCCESSORS = {
    w: tuple(TAIL[(i * 7 + 3 * j + 1) % len(TAIL)] for j in range(8)) for i, w in enumerate(TAIL)
}


def _caption(rng):
    n = int(rng.integers(2, ROWS + 1))
    lines = [f"{_word(rng)} {_pick(rng, ITEMS)}"[:COLS] for _ in range(n)]
    if rng.random() < 0.5:
        lines[int(rng.integers(n))] = f"{_word(rng)} {int(rng.integers(10, 99))}"[:COLS]
    adjectives = (
        "plain",
        "small",
        "quiet",
        "busy",
        "neat",
        "faded",
        "crisp",
        "short",
        "light",
        "dense",
        "clean",
        "odd",
        "calm",
        "bold",
        "worn",
        "pale",
    )
    nouns = ("page", "note", "card", "sheet", "memo", "slip")
    count = ("two", "three", "four")[n - 2]
    # The tail starts from a word keyed to the page's first letter (an image
    # fact), then wanders: each next word is one of eight successors.
    first = TAIL[ALPHABET.index(lines[0][0]) % len(TAIL)]

    def phrase(r):
        words = [_pick(r, _SUCCESSORS[first])]
        for _ in range(5):
            words.append(_pick(r, _SUCCESSORS[words[-1]]))
        return f"a {_pick(r, adjectives)} {_pick(r, nouns)}: {' '.join(words)}, {count} lines."

    answer = phrase(rng)
    pool = [phrase(np.random.default_rng(int(rng.integers(2**31)))) for _ in range(64)]
    return lines, "describe the page.", answer, tuple((p, 1.0) for p in pool)


def _textvqa(rng):
    words = [_word(rng) for _ in range(ROWS)]
    lines = [f"{i + 1} {w}" for i, w in enumerate(words)]
    k = int(rng.integers(ROWS))
    w = words[k]
    replies = (
        f"line {k + 1} says {w}.",
        f"the word there is {w}, i think.",
        f"it reads {w} on that line.",
        f"{w} is written on line {k + 1}.",
    )
    return lines, f"what word is on line {k + 1}?", replies[0], tuple((r, 1.0) for r in replies)


def _infovqa(rng):
    items = list(rng.choice(ITEMS, size=ROWS - 1, replace=False))
    counts = [int(c) for c in rng.integers(2, 100, size=len(items))]
    lines = ["inventory"] + [f"{it} {c}" for it, c in zip(items, counts, strict=True)]
    k = int(rng.integers(len(items)))
    it, c = items[k], counts[k]
    templates = (
        f"there are {c} {it} in the list.",
        f"i count {c} {it} in the list.",
        f"the list has {c} {it} in it.",
    )
    return lines, f"how many {it}?", templates[0], tuple((t, 1.0) for t in templates)


def _docvqa(rng):
    values = [_alnum(rng, 7) for _ in FIELDS]
    lines = [f"{f} {v}" for f, v in zip(FIELDS, values, strict=True)]
    k = int(rng.integers(len(FIELDS)))
    f, v = FIELDS[k], values[k]
    main = f"the {f} field reads {v}, as printed."
    rare = f"the {f} field shows {v}, as printed."
    return lines, f"what is the {f}?", main, ((main, 0.9), (rare, 0.1))


def _chartqa(rng):
    values = [f"{int(x):02d}" for x in rng.integers(10, 100, size=8)]
    lines = ["chart values", " ".join(values[:4]), " ".join(values[4:])]
    answer = "the values are " + ",".join(values) + "."
    return lines, "list the chart values.", answer, ()


def _transcribe(rng):
    """Training-only reading drill: copy the whole page, line by line."""
    lines, _, _, _ = _MAKERS[TASKS[int(rng.integers(len(TASKS)))]](rng)
    lines = [line for line in lines if line]
    return lines, "read the page.", "/".join(lines) + ".", ()


_MAKERS = {
    "caption": _caption,
    "textvqa": _textvqa,
    "infovqa": _infovqa,
    "docvqa": _docvqa,
    "chartqa": _chartqa,
}
#: an auxiliary task the target trains on (dense reading signal), never evaluated
AUX_TASK = "transcribe"
_MAKERS[AUX_TASK] = _transcribe


def make_example(task: str, rng: np.random.Generator) -> Example:
    """Draw one example of ``task`` from ``rng``."""
    if task not in _MAKERS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS} or {AUX_TASK!r}")
    lines, prompt, answer, variants = _MAKERS[task](rng)
    if len(lines) > ROWS:
        raise AssertionError(f"{task}: {len(lines)} lines do not fit a page of {ROWS}")
    lines = tuple(lines) + ("",) * (ROWS - len(lines))
    for text in (*lines, prompt, answer):
        bad = set(text) - set(ALPHABET)
        if bad or any(len(line) > COLS for line in lines):
            raise AssertionError(f"{task}: text outside the page or alphabet: {text!r}")
    return Example(task, lines, prompt, answer, variants)


@functools.cache
def glyph(ch: str) -> np.ndarray:
    """One character drawn in a ``CELL`` x ``CELL`` cell: uint8 grey, white = 255."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=FONT_SIZE)
    cell = Image.new("L", (CELL, CELL), 255)
    if ch != " ":
        ImageDraw.Draw(cell).text((0, -2), ch, font=font, fill=0)
    return np.asarray(cell)


def render(lines):
    """The page as an RGB ``PIL.Image`` of ``ROWS*CELL`` x ``COLS*CELL`` pixels.

    Each character is drawn inside its own cell, so a cell (one vision patch)
    depends on its character alone.
    """
    from PIL import Image

    page = np.full((ROWS * CELL, COLS * CELL), 255, dtype=np.uint8)
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            page[r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL] = glyph(ch)
    return Image.fromarray(page).convert("RGB")


def write_task(task: str, n: int, data_dir, seed: int) -> Path:
    """Write ``n`` examples of ``task``: ``<data_dir>/<task>.jsonl`` and
    ``<data_dir>/<task>/NNNN.png``. Records hold ``image`` (relative to
    ``data_dir``), ``prompt`` and ``answer``, plus ``lines``, the page's text."""
    data_dir = Path(data_dir)
    (data_dir / task).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, TASKS.index(task)])
    records = []
    for i in range(n):
        ex = make_example(task, rng)
        rel = f"{task}/{i + 1:04d}.png"
        tmp = data_dir / f"{rel}.tmp"
        render(ex.lines).save(tmp, format="PNG")
        os.replace(tmp, data_dir / rel)
        records.append(
            {"image": rel, "prompt": ex.prompt, "answer": ex.answer, "lines": list(ex.lines)}
        )
    out = data_dir / f"{task}.jsonl"
    atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in records))
    return out


def read_task(path) -> list[dict]:
    """Parse a task JSONL file; a bad line raises ``ValueError`` naming file and line."""
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON ({err})") from err
            missing = {"image", "prompt"} - set(record)
            if missing:
                raise ValueError(f"{path}:{number}: missing field(s) {sorted(missing)}")
            records.append(record)
    return records
