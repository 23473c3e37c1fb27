"""Five synthetic grounded tasks, graded from free-running to near-copy.

Every image is a small page of monospace text: ``ROWS`` lines of ``COLS``
cells, each cell ``CELL`` x ``CELL`` pixels holding one character, so one
vision patch is one glyph. The question comes before the image in the prompt.

An answer walks the page item by item (a line, a field, a value). Each item
is a **grounded** part, copied off the page, followed by a run of **free**
text that the writer (:mod:`glance.toy.writer`) chooses, each character from
a distribution that depends on the two characters before it (word breaks not
counted), sharpened by the task's voice, and word breaks free too. The free characters are where the
target is uncertain, by an amount that varies continuously from context to
context; the copied parts are read off the page and are near-deterministic.
The tasks differ in the page, in how long each free run is and in how sharp
its distributions are (``docs/world.md`` has the table, and why).

Answers run 100 to 133 characters, far past a 16-token block. ``longform``
(the caption at length, about 670 characters) serves the bench's length
curve, and ``transcribe`` (copy the page) is a training-only drill.

:func:`make_example` draws one example; ``answer`` is one draw of the writer,
``marks`` what each free character could have been, and
:meth:`Example.sample_answer` draws another phrasing of the same page (the
grounded parts fixed, the free characters redrawn). :func:`write_task`
writes ``<task>.jsonl`` plus PNG images, deterministically from a seed.
Needs numpy and Pillow.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glance._io import atomic_write_text
from glance.toy.alphabet import ALPHABET
from glance.toy.writer import default_world

TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa")
ROWS, COLS, CELL = 5, 16, 8
FONT_SIZE = 8

WORDS = (
    "maple cedar river stone amber frost ember coral lotus pearl cloud delta "
    "ivory mango olive prism quartz raven sable tiger umber violet willow zephyr "
    "basil cocoa dune fern grove hazel iris jade kiwi lemon moss nova opal plum"
).split()
ITEMS = ("figs", "pears", "limes", "plums", "dates", "kiwis", "yams", "beets")
FIELDS = ("name", "city", "code", "date", "team")  # equal length: values line up


def _lexicon(n: int = 256, seed: int = 43) -> tuple:
    """``n`` distinct seven-letter nonce words, consonant-vowel alternating
    (``cvcvcvc``), drawn once from a fixed seed: docvqa's values. Unguessable
    from the field name, yet units a drafter reads as it reads words, as a
    real document's names and codes are (random characters made the head
    miss copies the target makes; ``notes/issue43``, session 14)."""
    cons, vows = "bcdfghjklmnprstvz", "aeiou"
    rng, words = np.random.default_rng([seed]), set()
    while len(words) < n:
        pick = [cons, vows] * 3 + [cons]
        words.add("".join(p[int(rng.integers(len(p)))] for p in pick))
    return tuple(sorted(words))


LEXICON = _lexicon()


@dataclass(frozen=True)
class Example:
    """One task example: the page's lines, the prompt, and the answer.

    ``parts`` is the answer's skeleton: strings are written as they are
    (grounded or fixed text), and ``None`` marks one run of free words
    (:meth:`glance.toy.writer.World.skeleton`). ``answer`` is one draw of the
    writer, ``marks`` what each of its free characters could have been
    (:func:`glance.toy.writer.write_marked`); :meth:`sample_answer` draws more.
    """

    task: str
    lines: tuple[str, ...]
    prompt: str
    answer: str
    parts: tuple = ()
    marks: tuple = field(default=(), compare=False, repr=False)

    def sample_marked(self, rng: np.random.Generator) -> tuple[str, list]:
        """Another answer to the page (the grounded parts fixed, the free
        characters redrawn) and its marks."""
        if not self.parts:
            return self.answer, []
        return default_world().write(self.task, self.parts, rng)

    def sample_answer(self, rng: np.random.Generator) -> str:
        return self.sample_marked(rng)[0]


def _word(rng, exclude=()):
    choices = [w for w in WORDS if w not in exclude]
    return choices[int(rng.integers(len(choices)))]


def _code(rng):
    return LEXICON[int(rng.integers(len(LEXICON)))]


def _word_lines(rng):
    return [f"{_word(rng)} {_word(rng)}"[:COLS] for _ in range(ROWS)]


def _weave(copies, sep: str, lead=()) -> list:
    """An answer's parts: each copied span, then a run of the task's free
    words and ``sep``; a full stop replaces the last ``sep``."""
    parts = list(lead)
    for copy in copies:
        parts += [copy, " ", None, sep]
    parts[-1] = "."
    return parts


def _caption(rng, repeats: int = 1, prompt: str = "describe the page."):
    lines = _word_lines(rng)
    words = [line.split()[(r + i) % 2] for r in range(repeats) for i, line in enumerate(lines)]
    return lines, prompt, _weave(words, ", ")


def _longform(rng):
    return _caption(rng, repeats=5, prompt="describe the page at length.")


def _textvqa(rng):
    lines = _word_lines(rng)
    words = [line.split()[i % 2] for i, line in enumerate(lines)]
    return lines, "read a word from each line.", _weave(words, "; ", ["the words: "])


def _infovqa(rng):
    items = list(rng.choice(ITEMS, size=ROWS, replace=False))
    counts = [int(c) for c in rng.integers(10, 100, size=ROWS)]
    lines = [f"{it} {c}" for it, c in zip(items, counts, strict=True)]
    return lines, "count each item.", _weave(lines, "; ", ["the counts: "])


def _docvqa(rng):
    lines = [f"{f} {_code(rng)}" for f in FIELDS]
    return lines, "copy every field.", _weave(lines, "; ")


def _chartqa(rng):
    values = [f"{int(x):02d}" for x in rng.integers(10, 100, size=4 * ROWS)]
    lines = [" ".join(values[i : i + 4]) for i in range(0, len(values), 4)]
    pairs = [f"{values[i]} {values[i + 1]}" for i in range(0, len(values), 2)]
    return lines, "list the chart values.", _weave(pairs, ", ")


def _transcribe(rng):
    """Training-only reading drill: copy the whole page, line by line."""
    task = TASKS[int(rng.integers(len(TASKS)))]
    lines, _, _ = _MAKERS[task](rng)
    lines = [line for line in lines if line]
    return lines, "read the page.", ["/".join(lines) + "."]


_MAKERS = {
    "caption": _caption,
    "textvqa": _textvqa,
    "infovqa": _infovqa,
    "docvqa": _docvqa,
    "chartqa": _chartqa,
}
#: the caption at length: the bench's length curve (never in the main table)
LONG_TASK = "longform"
_MAKERS[LONG_TASK] = _longform
#: an auxiliary task the target trains on (dense reading signal), never evaluated
AUX_TASK = "transcribe"
_MAKERS[AUX_TASK] = _transcribe
#: every task :func:`write_task` can write
WRITABLE = (*TASKS, LONG_TASK)


def make_example(task: str, rng: np.random.Generator) -> Example:
    """Draw one example of ``task`` from ``rng``."""
    if task not in _MAKERS:
        raise ValueError(f"unknown task {task!r}; expected one of {WRITABLE} or {AUX_TASK!r}")
    lines, prompt, parts = _MAKERS[task](rng)
    world = default_world()
    parts = world.skeleton(task, parts)
    answer, marks = world.write(task, parts, rng)
    if len(lines) > ROWS:
        raise AssertionError(f"{task}: {len(lines)} lines do not fit a page of {ROWS}")
    lines = tuple(lines) + ("",) * (ROWS - len(lines))
    for text in (*lines, prompt, answer):
        bad = set(text) - set(ALPHABET)
        if bad or any(len(line) > COLS for line in lines):
            raise AssertionError(f"{task}: text outside the page or alphabet: {text!r}")
    return Example(task, lines, prompt, answer, tuple(parts), tuple(marks))


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
    if task not in WRITABLE:
        raise ValueError(f"write_task: unknown task {task!r}; expected one of {WRITABLE}")
    rng = np.random.default_rng([seed, WRITABLE.index(task)])
    records = []
    for i in range(n):
        ex = make_example(task, rng)
        rel = f"{task}/{i + 1:04d}.png"
        tmp = data_dir / f"{rel}.tmp"
        render(ex.lines).save(tmp, format="PNG")
        os.replace(tmp, data_dir / rel)
        records.append(
            {
                "image": rel,
                "prompt": ex.prompt,
                "answer": ex.answer,
                "lines": list(ex.lines),
                "parts": list(ex.parts),
            }
        )
    out = data_dir / f"{task}.jsonl"
    atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in records))
    return out
