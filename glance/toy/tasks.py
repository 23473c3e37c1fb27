"""Five synthetic grounded tasks, graded from free-running to near-copy.

Every image is a small page of monospace text: ``ROWS`` lines of ``COLS``
cells, each cell ``CELL`` x ``CELL`` pixels holding one character, so one
vision patch is one glyph. The question comes before the image in the prompt.

An answer walks the page item by item (a line, a field, a value). Each item
is a **grounded** part, copied off the page, followed by **free** words: short
words whose letters the writer chooses, each uniformly among ``m`` letters
that a fixed second-order table allows after the two characters before it
(:data:`SUCCESSORS`). The free letters are where the target is uncertain, and
where its greedy choice is a near-tie that a drafter has to guess; the copied
parts are read off the page and are near-deterministic. The tasks differ in
how much of an answer is free and in ``m``:

=========  ====================================  =====  ===  ==========  =========
task       one item                              free   m    free share  nats/char
=========  ====================================  =====  ===  ==========  =========
caption    a word on line i, then 4 free words   4 x 3  4    0.53        0.73
textvqa    a word on line i, then 3 free words   3 x 3  3    0.43        0.47
infovqa    item and count, then 3 free words     3 x 3  2    0.42        0.29
docvqa     field and value, then 3 free words    3 x 3  2    0.35        0.24
chartqa    two chart values, then 1 free word    1 x 3  2    0.28        0.19
=========  ====================================  =====  ===  ==========  =========

(free: words x letters per item; the share counts free letters over all
characters, and nats/char is the writer's entropy per character.) Answers
run 100 to 130 characters, far past a 16-token block. ``longform`` (the
caption at length, about 570 characters) serves the bench's length curve, and
``transcribe`` (copy the page) is a training-only drill.

:func:`make_example` draws one example; ``answer`` is one draw of the writer,
and :meth:`Example.sample_answer` draws another phrasing of the same page (the
grounded parts fixed, the free letters redrawn), as training text.
:func:`write_task` writes ``<task>.jsonl`` plus PNG images, deterministically
from a seed. Needs numpy and Pillow.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glance._io import atomic_write_text

TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa")
ROWS, COLS, CELL = 5, 16, 8
FONT_SIZE = 8
#: every character a page, prompt or answer may use
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:;!?'-=/"
LETTERS = "abcdefghijklmnopqrstuvwxyz"

WORDS = (
    "maple cedar river stone amber frost ember coral lotus pearl cloud delta "
    "ivory mango olive prism quartz raven sable tiger umber violet willow zephyr "
    "basil cocoa dune fern grove hazel iris jade kiwi lemon moss nova opal plum"
).split()
ITEMS = ("figs", "pears", "limes", "plums", "dates", "kiwis", "yams", "beets")
FIELDS = ("name", "city", "code", "date", "team")  # equal length: values line up

#: The free letters' second-order table: after characters ``a, b`` the writer
#: may use ``SUCCESSORS[ALPHABET.index(a), ALPHABET.index(b), :m]``. A fixed
#: constant of the world (not of a task draw): the target learns it once.
SUCCESSORS = np.stack(
    [np.random.default_rng([12, i]).permutation(len(LETTERS)) for i in range(len(ALPHABET) ** 2)]
).reshape(len(ALPHABET), len(ALPHABET), len(LETTERS))


@dataclass(frozen=True)
class Style:
    """How a task writes one item: ``words`` free words of ``letters`` letters
    after the grounded part, each letter one of ``m`` allowed ones."""

    words: int
    letters: int
    m: int


#: The calibration knobs, chosen so that the share of free letters and their
#: entropy fall from caption to chartqa (see the module docstring).
STYLES = {
    "caption": Style(4, 3, 4),
    "textvqa": Style(3, 3, 3),
    "infovqa": Style(3, 3, 2),
    "docvqa": Style(3, 3, 2),
    "chartqa": Style(1, 3, 2),
}
STYLES["longform"] = STYLES["caption"]


@dataclass(frozen=True)
class Example:
    """One task example: the page's lines, the prompt, and the answer.

    ``parts`` is the answer's skeleton: strings are written as they are
    (grounded or fixed text), and ``None`` marks one free word of ``style``.
    ``answer`` is one draw of the free words; :meth:`sample_answer` draws more.
    """

    task: str
    lines: tuple[str, ...]
    prompt: str
    answer: str
    parts: tuple = ()
    style: Style | None = None

    def sample_answer(self, rng: np.random.Generator) -> str:
        return write(self.parts, self.style, rng) if self.parts else self.answer


def free_word(before: str, style: Style, rng: np.random.Generator) -> str:
    """One free word: ``style.letters`` letters, each drawn uniformly from the
    ``style.m`` letters the table allows after the two characters before it."""
    text = before[-2:].rjust(2)
    for _ in range(style.letters):
        a, b = ALPHABET.index(text[-2]), ALPHABET.index(text[-1])
        text += LETTERS[int(SUCCESSORS[a, b, int(rng.integers(style.m))])]
    return text[2:]


def write(parts, style: Style | None, rng: np.random.Generator) -> str:
    """The answer text of a skeleton: fixed parts as they are, free words drawn."""
    text = ""
    for part in parts:
        text += free_word(text, style, rng) if part is None else part
    return text


def _word(rng, exclude=()):
    choices = [w for w in WORDS if w not in exclude]
    return choices[int(rng.integers(len(choices)))]


def _alnum(rng, n):
    pool = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(pool[int(i)] for i in rng.integers(len(pool), size=n))


def _free(style: Style, sep: str = " ") -> list:
    out = []
    for _ in range(style.words):
        out += [sep, None]
    return out


def _word_lines(rng):
    return [f"{_word(rng)} {_word(rng)}"[:COLS] for _ in range(ROWS)]


def _weave(task: str, copies, sep: str, lead=()) -> list:
    """An answer's parts: each copied span, then the task's free letters and
    ``sep``; a full stop replaces the last ``sep``."""
    parts = list(lead)
    for copy in copies:
        parts += [copy, *_free(STYLES[task]), sep]
    parts[-1] = "."
    return parts


def _caption(rng, repeats: int = 1, prompt: str = "describe the page."):
    lines = _word_lines(rng)
    words = [line.split()[(r + i) % 2] for r in range(repeats) for i, line in enumerate(lines)]
    return lines, prompt, _weave("caption", words, ", ")


def _longform(rng):
    return _caption(rng, repeats=5, prompt="describe the page at length.")


def _textvqa(rng):
    lines = _word_lines(rng)
    words = [line.split()[i % 2] for i, line in enumerate(lines)]
    return lines, "read a word from each line.", _weave("textvqa", words, "; ", ["the words: "])


def _infovqa(rng):
    items = list(rng.choice(ITEMS, size=ROWS, replace=False))
    counts = [int(c) for c in rng.integers(10, 100, size=ROWS)]
    lines = [f"{it} {c}" for it, c in zip(items, counts, strict=True)]
    return lines, "count each item.", _weave("infovqa", lines, "; ")


def _docvqa(rng):
    lines = [f"{f} {_alnum(rng, 7)}" for f in FIELDS]
    return lines, "copy every field.", _weave("docvqa", lines, "; ")


def _chartqa(rng):
    values = [f"{int(x):02d}" for x in rng.integers(10, 100, size=4 * ROWS)]
    lines = [" ".join(values[i : i + 4]) for i in range(0, len(values), 4)]
    pairs = [f"{values[i]} {values[i + 1]}" for i in range(0, len(values), 2)]
    return lines, "list the chart values.", _weave("chartqa", pairs, ", ")


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


def score_answer(parts, style: Style, text: str) -> dict:
    """How well ``text`` follows an answer skeleton: of its grounded parts, how
    many it reproduces exactly (``copied``), and of its free letters, how many
    the table allows (``allowed``), each out of the skeleton's count."""
    pos = copied = allowed = n_copy = n_free = 0
    for part in parts:
        if part is not None:
            n_copy += 1
            copied += text[pos : pos + len(part)] == part
            pos += len(part)
            continue
        for _ in range(style.letters):
            n_free += 1
            ctx = text[max(0, pos - 2) : pos].rjust(2)
            ch = text[pos : pos + 1]
            if ch in LETTERS and all(c in ALPHABET for c in ctx):
                row = SUCCESSORS[ALPHABET.index(ctx[0]), ALPHABET.index(ctx[1])]
                allowed += LETTERS.index(ch) in row[: style.m]
            pos += 1
    return {"copied": copied, "grounded": n_copy, "allowed": allowed, "free": n_free}


def make_example(task: str, rng: np.random.Generator) -> Example:
    """Draw one example of ``task`` from ``rng``."""
    if task not in _MAKERS:
        raise ValueError(f"unknown task {task!r}; expected one of {WRITABLE} or {AUX_TASK!r}")
    lines, prompt, parts = _MAKERS[task](rng)
    style = STYLES.get(task)
    answer = write(parts, style, rng)
    if len(lines) > ROWS:
        raise AssertionError(f"{task}: {len(lines)} lines do not fit a page of {ROWS}")
    lines = tuple(lines) + ("",) * (ROWS - len(lines))
    for text in (*lines, prompt, answer):
        bad = set(text) - set(ALPHABET)
        if bad or any(len(line) > COLS for line in lines):
            raise AssertionError(f"{task}: text outside the page or alphabet: {text!r}")
    return Example(task, lines, prompt, answer, tuple(parts), style)


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
