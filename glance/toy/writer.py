"""The toy world's writer: free text from distributions that vary by context.

Every context ``(a, b)`` of two characters has its own distribution over
``K`` allowed letters, drawn once from a symmetric Dirichlet with
concentration ``alpha``, and each task raises it to its own power ``beta``
(:class:`Voice`): a large ``beta`` gives peaked rows (low entropy, a clear
favourite), a small one flat rows. Within a task the rows' entropies, and the
margins between their first and second letters, spread continuously. Word
breaks inside a run of free text are drawn too (:func:`space_table`), and a
letter's context skips them (:func:`letter_context`).

The rows are constants of the world (seeded), so a target can learn them
exactly; the writer returns, with each character, the row it was drawn from,
so a target can be trained on the distribution itself
(:mod:`glance.toy.soft`) and a position's entropy is known. :class:`World`
writes the tasks' answers with the :class:`Knobs`; :func:`default_world` is
the one every task uses. Needs numpy only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from glance.toy.alphabet import ALPHABET, LETTERS, SUCCESSORS

__all__ = [
    "Knobs",
    "Rows",
    "Voice",
    "World",
    "default_world",
    "using",
    "free_letters",
    "letter_context",
    "respace",
    "row_entropy",
    "sharpen",
    "successor_rows",
    "write_marked",
    "SYMBOLS",
    "space_table",
]


@dataclass(frozen=True)
class Rows:
    """Every context's distribution: ``ids[a, b]`` the ``K`` letters (indices
    into :data:`~glance.toy.alphabet.LETTERS`) allowed after characters ``a, b``
    (indices into :data:`~glance.toy.alphabet.ALPHABET`), ``probs[a, b]`` their
    probabilities, each row summing to 1."""

    ids: np.ndarray  # (A, A, K) int
    probs: np.ndarray  # (A, A, K) float64
    alpha: float


def successor_rows(alpha: float, k: int = 8, seed: int = 0) -> Rows:
    """The rows of a task with concentration ``alpha`` over ``k`` letters: the
    first ``k`` of :data:`~glance.toy.alphabet.SUCCESSORS` for each context, with
    probabilities drawn from ``Dirichlet(alpha)`` by a generator seeded with
    ``[13, seed]``. Raises ``ValueError`` for ``alpha <= 0`` or ``k`` outside
    ``2..len(LETTERS)``."""
    if not alpha > 0 or not np.isfinite(alpha):
        raise ValueError(f"alpha: expected a finite number > 0; got {alpha!r}")
    if not 2 <= k <= len(LETTERS):
        raise ValueError(f"k: expected an integer in 2..{len(LETTERS)}; got {k!r}")
    n = len(ALPHABET)
    rng = np.random.default_rng([13, seed])
    probs = rng.dirichlet(np.full(k, float(alpha)), size=n * n).reshape(n, n, k)
    # a Dirichlet with a small alpha can give exact zeros: keep every allowed letter possible
    probs = np.maximum(probs, 1e-12)
    probs /= probs.sum(-1, keepdims=True)
    return Rows(SUCCESSORS[:, :, :k].copy(), probs, float(alpha))


def row_entropy(probs: np.ndarray) -> np.ndarray:
    """Entropy in nats of each distribution along the last axis of ``probs``."""
    p = np.asarray(probs, dtype=np.float64)
    return -(p * np.log(np.clip(p, 1e-300, 1.0))).sum(-1)


def free_letters(before: str, count: int, rows: Rows, rng: np.random.Generator):
    """``count`` free letters after the text ``before``, each drawn from its
    context's row. Returns ``(letters, dists)``: the letters as a string, and
    for each letter ``(ids, probs)``, the characters it could have been
    (strings) and their probabilities."""
    text = before[-2:].rjust(2)
    dists = []
    for _ in range(count):
        a, b = ALPHABET.index(text[-2]), ALPHABET.index(text[-1])
        ids, probs = rows.ids[a, b], rows.probs[a, b]
        pick = int(rng.choice(len(ids), p=probs))
        dists.append(([LETTERS[i] for i in ids], probs.copy()))
        text += LETTERS[int(ids[pick])]
    return text[2:], dists


def sharpen(rows: Rows, beta: float) -> Rows:
    """``rows`` raised to the power ``beta`` and renormalised: the same letters
    in the same order, sharper for ``beta > 1`` (lower entropy, wider margins)
    and flatter below 1. One base table sharpened per task keeps every task's
    favourite letter the same, so a target learns one table and a task's
    temperature, not five tables. Raises ``ValueError`` for ``beta <= 0``."""
    if not beta > 0 or not np.isfinite(beta):
        raise ValueError(f"beta: expected a finite number > 0; got {beta!r}")
    logp = beta * np.log(rows.probs)
    probs = np.exp(logp - logp.max(-1, keepdims=True))
    return Rows(rows.ids, probs / probs.sum(-1, keepdims=True), rows.alpha)


@dataclass(frozen=True)
class Voice:
    """How a task writes its free text: ``words`` free words of ``letters``
    letters after each grounded part, each letter drawn from the base rows
    sharpened by ``beta`` (:func:`sharpen`)."""

    words: int
    letters: int
    beta: float


def respace(parts, words: int) -> list:
    """An answer skeleton with every run of free words (``" ", None`` pairs, as
    :mod:`glance.toy.tasks` weaves them) replaced by ``words`` such pairs."""
    out, i = [], 0
    parts = list(parts)
    while i < len(parts):
        if i + 1 < len(parts) and parts[i] == " " and parts[i + 1] is None:
            while i + 1 < len(parts) and parts[i] == " " and parts[i + 1] is None:
                i += 2
            out += [" ", None] * words
            continue
        out.append(parts[i])
        i += 1
    return out


#: the characters a free letter's ``ids`` index: the letters, then the space
SYMBOLS = LETTERS + " "
SPACE = len(LETTERS)


def space_table(mean: float, seed: int = 0) -> np.ndarray:
    """``(A, A)``: for each context, the probability that a free run breaks
    the word there, drawn once from ``Beta(4 * mean, 4 * (1 - mean))`` by a
    generator seeded with ``[15, seed]``, so word lengths vary by context."""
    if not 0 < mean < 1:
        raise ValueError(f"space: expected a probability in (0, 1); got {mean!r}")
    n = len(ALPHABET)
    return np.random.default_rng([15, seed]).beta(4 * mean, 4 * (1 - mean), size=(n, n))


def letter_context(text: str, skip: bool = False) -> str:
    """The two characters a free letter's row is read at: the last two of
    ``text``, or with ``skip`` the last two that are not spaces (padded with
    spaces on the left)."""
    if not skip:
        return text[-2:].rjust(2)
    out = ""
    for ch in reversed(text):
        if ch != " ":
            out = ch + out
            if len(out) == 2:
                break
    return out.rjust(2)


def write_marked(
    parts,
    voice: Voice,
    rows,
    rng: np.random.Generator,
    spaces=None,
    *,
    min_word: int = 1,
    skip: bool = False,
):
    """The answer text of a skeleton, its free words drawn from ``rows``: a
    :class:`Rows`, or a function of the grounded part before a run of free
    words that returns the run's :class:`Rows`. Returns ``(text, marks)``:
    ``marks`` lists, for each free letter, its index in ``text``, the letters
    it could have been (indices into :data:`~glance.toy.alphabet.LETTERS`) and
    their probabilities. A letter's row is the one at :func:`letter_context`
    of the text before it (``skip``: word breaks do not count).

    With ``spaces`` (a :func:`space_table`), each ``None`` is one run of
    ``voice.words * (voice.letters + 1) - 1`` characters whose word breaks
    are free too: inside the run, where the ``min_word`` characters before are
    letters, a space (:data:`SPACE` in ``ids``) has the table's probability
    and the letters share the rest, so every position of a run is a choice."""
    text, marks, grounded, run = "", [], "", rows
    for part in parts:
        if part is not None:
            text += part
            if part.strip():
                grounded, run = part, None
            continue
        if run is None:
            run = rows(grounded) if callable(rows) else rows
        length = voice.letters if spaces is None else voice.words * (voice.letters + 1) - 1
        for i in range(length):
            context = letter_context(text, skip)
            a, b = ALPHABET.index(context[-2]), ALPHABET.index(context[-1])
            ids, probs = run.ids[a, b], run.probs[a, b]
            if spaces is not None and 0 < i < length - 1 and " " not in text[-min_word:]:
                space = spaces[a, b]
                ids = np.append(ids, SPACE)
                probs = np.append(probs * (1 - space), space)
            marks.append((len(text), ids, probs))
            text += SYMBOLS[int(ids[int(rng.choice(len(ids), p=probs))])]
    return text, marks


def _default_voices() -> dict:  # run v4e-3 (notes/issue43, session 15)
    return {
        "caption": Voice(5, 3, 0.36),
        "textvqa": Voice(4, 3, 0.47),
        "infovqa": Voice(2, 3, 0.7),
        "docvqa": Voice(2, 3, 0.6),
        "chartqa": Voice(1, 3, 1.35),
    }


@dataclass(frozen=True)
class Knobs:
    """The writer's knobs: base rows ``Dirichlet(alpha)`` over ``k`` letters
    (drawn with ``row_seed``), and each task's :class:`Voice` (``longform``
    writes as ``caption``). Why each value: ``docs/world.md``; the tries that
    chose them: ``notes/issue43/tries``."""

    alpha: float = 0.3
    k: int = 8
    row_seed: int = 0
    voices: dict = field(default_factory=_default_voices)
    #: each run of free words is sharpened by ``beta * exp(spread * z)``, ``z``
    #: a fixed standard normal draw per last character of the grounded part
    #: before the run: sharpness varies from item to item, persists through
    #: the run, and is readable from the context. Off: a target trained for
    #: minutes does not learn it (try 12)
    spread: float = 0.0
    #: above 0, a free item is one run of characters whose word breaks are
    #: free too (mean probability of a break; :func:`space_table`)
    space: float = 0.25
    #: a break may come only after this many letters of a word. At 1 the
    #: greedy walk fell into one-letter words ("i i i i": after "i " the
    #: favourite is "i", after " i" a break), a cycle any head drafts
    min_word: int = 2
    #: a free letter's row is read at the two letters before it not counting
    #: word breaks. Read at the raw two characters, a break left one
    #: character of context, so the greedy walks of a whole task file fell
    #: into 10 to 18 distinct runs, which a head memorises (session 12)
    skip_space: bool = True


class World:
    """The free text of the toy tasks, written from :class:`Knobs`' rows:
    given an answer skeleton (grounded parts and ``None`` for each run of
    free words, as :mod:`glance.toy.tasks` weaves them), :meth:`write` draws
    the answer and says, for each free character, what it could have been.
    Needs numpy only."""

    def __init__(self, knobs: Knobs | None = None):
        self.knobs = knobs = knobs or Knobs()
        if not (isinstance(knobs.min_word, int) and knobs.min_word >= 1):
            raise ValueError(f"min_word: expected an integer >= 1; got {knobs.min_word!r}")
        self.base = successor_rows(knobs.alpha, knobs.k, knobs.row_seed)
        self.z = np.random.default_rng([14, knobs.row_seed]).standard_normal(len(ALPHABET))
        self.spaces = space_table(knobs.space, knobs.row_seed) if knobs.space else None
        self._rows: dict = {}

    def voice(self, task: str) -> Voice:
        voices = self.knobs.voices
        return voices[task] if task in voices else voices["caption"]

    def rows(self, task: str):
        """``task``'s rows: a :class:`Rows` without spread, else a function of
        the grounded part before a run (as :func:`write_marked` takes)."""
        beta = self.voice(task).beta
        if not self.knobs.spread:
            return self.sharp(beta)

        def run(grounded: str) -> Rows:
            key = grounded.rstrip()[-1:] or None
            z = 0.0 if key is None else float(self.z[ALPHABET.index(key)])
            return self.sharp(round(beta * float(np.exp(self.knobs.spread * z)), 6))

        return run

    def sharp(self, beta: float) -> Rows:
        """The base rows sharpened by ``beta`` (cached)."""
        if beta not in self._rows:
            self._rows[beta] = sharpen(self.base, beta)
        return self._rows[beta]

    def skeleton(self, task: str, parts) -> list:
        """``parts`` with each run of free words as the voice writes it: one
        ``None`` a run when word breaks are free, else one a word."""
        return respace(parts, 1 if self.spaces is not None else self.voice(task).words)

    def write(self, task: str, parts, rng: np.random.Generator):
        """``(text, marks)`` of :func:`write_marked` for a skeleton."""
        voice, rows = self.voice(task), self.rows(task)
        knobs = self.knobs
        spaces = self.spaces
        return write_marked(
            parts, voice, rows, rng, spaces, min_word=knobs.min_word, skip=knobs.skip_space
        )

    def score(self, task: str, parts, text: str) -> dict:
        """How well ``text`` follows a skeleton: of its grounded parts, how many
        it reproduces exactly (``copied``), and of its free characters, how
        many the writer allows in their context (``allowed``), each out of the
        skeleton's count (``grounded``, ``free``)."""
        voice, pos = self.voice(task), 0
        out = dict.fromkeys(("copied", "grounded", "allowed", "free"), 0)
        length = voice.letters if self.spaces is None else voice.words * (voice.letters + 1) - 1
        for part in parts:
            if part is not None:
                out["grounded"] += 1
                out["copied"] += text[pos : pos + len(part)] == part
                pos += len(part)
                continue
            for i in range(length):
                out["free"] += 1
                ctx = letter_context(text[:pos], self.knobs.skip_space)
                ch = text[pos : pos + 1]
                if ch and ch in SYMBOLS and all(c in ALPHABET for c in ctx):
                    row = self.base.ids[ALPHABET.index(ctx[0]), ALPHABET.index(ctx[1])]
                    before = text[max(0, pos - self.knobs.min_word) : pos]
                    space_ok = self.spaces is not None and 0 < i < length - 1
                    space_ok = space_ok and " " not in before
                    out["allowed"] += (ch == " " and space_ok) or (
                        ch in LETTERS and LETTERS.index(ch) in row
                    )
                pos += 1
        return out


_worlds: list = []


def default_world() -> World:
    """The world every task is written in: :class:`Knobs`' defaults, or the
    knobs of the innermost :func:`using` block."""
    if not _worlds:
        _worlds.append(World(Knobs()))
    return _worlds[-1]


@contextlib.contextmanager
def using(knobs: Knobs):
    """Within the block, every task is written with ``knobs`` (the calibrate
    command tries knobs this way; the pipeline never sets them)."""
    default_world()
    _worlds.append(World(knobs))
    try:
        yield _worlds[-1]
    finally:
        _worlds.pop()
