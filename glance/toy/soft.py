"""The fourth world's target training: soft labels where the writer's
distribution is known.

Not used by any stage yet (issue 43, ``notes/issue43/README.md``). At a free
letter the writer (:mod:`glance.toy.writer`) knows the whole distribution the
letter was drawn from, so the target is trained on that distribution (the
cross-entropy against it, whose minimum is the writer's own entropy) rather
than on the one letter drawn. Everywhere else (copied text, fixed text, the
closing token) the loss is the usual cross-entropy on the next token. The
gradient then carries the whole row at every free position, which is what
lets the target's entropy follow the writer's after a few hundred steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from glance.toy.config import TargetSize, TrainConfig
from glance.toy.tasks import ALPHABET, AUX_TASK, LONG_TASK, TASKS, Example, make_example
from glance.toy.writer import (
    SYMBOLS,
    Rows,
    Voice,
    respace,
    sharpen,
    space_table,
    successor_rows,
    write_marked,
)

__all__ = [
    "Knobs",
    "SoftWorld",
    "entropy_agreement",
    "soft_batch",
    "soft_loss",
    "train_soft_target",
]


def _default_voices() -> dict:  # try 11's (notes/issue43/tries/11-full.json)
    return {
        "caption": Voice(4, 3, 0.4),
        "textvqa": Voice(3, 3, 0.6),
        "infovqa": Voice(4, 3, 0.6),
        "docvqa": Voice(3, 3, 1.0),
        "chartqa": Voice(1, 3, 1.0),
    }


@dataclass(frozen=True)
class Knobs:
    """The writer's knobs: base rows ``Dirichlet(alpha)`` over ``k`` letters
    (drawn with ``row_seed``), and each task's :class:`~glance.toy.writer.Voice`
    (``longform`` writes as ``caption``). The defaults are the best try so
    far (``notes/issue43/tries/11-full.json``), not a calibrated world."""

    alpha: float = 0.3
    k: int = 8
    row_seed: int = 0
    voices: dict = field(default_factory=_default_voices)
    #: each run of free words is sharpened by ``beta * exp(spread * z)``, ``z``
    #: a fixed standard normal draw per last character of the grounded part
    #: before the run: sharpness varies from item to item, persists through
    #: the run, and is readable from the context
    spread: float = 0.6
    #: above 0, a free item is one run of characters whose word breaks are
    #: free too (mean probability of a break; :func:`~glance.toy.writer.space_table`)
    space: float = 0.25
    #: each run's rows tilted by ``tilt * bias[c]`` in log space, ``bias`` a
    #: fixed standard normal draw per character ``c`` (the last of the grounded
    #: part before the run) and rank: where a row is flat the tilt decides
    #: its favourite, so the greedy choice there depends on the item, far back
    #: in the context; where a row is peaked it does not
    tilt: float = 0.0


class SoftWorld:
    """The tasks of :mod:`glance.toy.tasks` (pages, prompts, grounded parts)
    with free words written from :class:`Knobs`' rows."""

    def __init__(self, knobs: Knobs | None = None):
        self.knobs = knobs = knobs or Knobs()
        base = successor_rows(knobs.alpha, knobs.k, knobs.row_seed)
        self.base = base
        self.z = np.random.default_rng([14, knobs.row_seed]).standard_normal(len(ALPHABET))
        self.bias = np.random.default_rng([16, knobs.row_seed]).standard_normal(
            (len(ALPHABET), knobs.k)
        )
        self._rows: dict = {}
        self.spaces = space_table(knobs.space, knobs.row_seed) if knobs.space else None

    def rows(self, task: str):
        """``task``'s rows: a :class:`Rows` with no spread, else a function
        of the grounded part before a run (:func:`~glance.toy.writer.write_marked`)."""
        beta = self.voice(task).beta
        if not self.knobs.spread and not self.knobs.tilt:
            return self._sharp(beta)

        def run(grounded: str) -> Rows:
            key = ALPHABET.index(grounded.rstrip()[-1]) if grounded.strip() else None
            z = 0.0 if key is None else self.z[key]
            return self._sharp(round(beta * float(np.exp(self.knobs.spread * z)), 6), key)

        return run

    def _sharp(self, beta: float, key: int | None = None) -> Rows:
        tilt = self.knobs.tilt if key is not None else 0.0
        if (beta, key, tilt) not in self._rows:
            rows = self.base
            if tilt:
                logp = np.log(rows.probs) + tilt * self.bias[key]
                probs = np.exp(logp - logp.max(-1, keepdims=True))
                rows = Rows(rows.ids, probs / probs.sum(-1, keepdims=True), rows.alpha)
            self._rows[beta, key, tilt] = sharpen(rows, beta)
        return self._rows[beta, key, tilt]

    def voice(self, task: str) -> Voice:
        return self.knobs.voices["caption" if task == LONG_TASK else task]

    def draw(self, task: str, rng: np.random.Generator) -> tuple[Example, list]:
        """One example of ``task``: the page and prompt of
        :func:`~glance.toy.tasks.make_example`, an answer skeleton with the
        task's free words, and the answer drawn from it. Returns
        ``(example, marks)`` (marks as :func:`~glance.toy.writer.write_marked`)."""
        ex = make_example(task, rng)
        if task == AUX_TASK:
            return ex, []
        voice = self.voice(task)
        parts = tuple(respace(ex.parts, 1 if self.spaces is not None else voice.words))
        text, marks = write_marked(parts, voice, self.rows(task), rng, self.spaces)
        return Example(task, ex.lines, ex.prompt, text, parts, ex.style), marks

    def redraw(self, example: Example, rng: np.random.Generator) -> tuple[str, list]:
        """Another answer to ``example``'s page: its free letters drawn afresh."""
        if example.task == AUX_TASK:
            return example.answer, []
        voice = self.voice(example.task)
        return write_marked(example.parts, voice, self.rows(example.task), rng, self.spaces)


def soft_batch(encoder, items, table: torch.Tensor, contexts=None) -> dict:
    """:func:`glance.toy.world.make_batch` of ``(example, answer, marks)``
    items, plus ``soft``: ``(batch, length, vocab)`` float32, at every
    position whose next token is an answer token the distribution it is
    trained toward: the writer's row at a free letter, else the next token."""
    from glance.toy.world import make_batch

    batch = make_batch(encoder, [(ex, text) for ex, text, _ in items], table, contexts)
    ids, mask = batch["input_ids"], batch["loss_mask"]
    vocab = len(encoder.tokenizer)
    soft = torch.zeros(*ids.shape, vocab)
    nxt = torch.roll(ids, -1, dims=1)
    b_idx, t_idx = mask.nonzero(as_tuple=True)
    soft[b_idx, t_idx, nxt[b_idx, t_idx]] = 1.0
    letter_ids = torch.tensor(encoder.tokenizer.convert_tokens_to_ids(list(SYMBOLS)))
    for b, (_, _, marks) in enumerate(items):
        start = int(mask[b].nonzero()[0])  # predicts the answer's first token
        for index, ids_, probs in marks:
            row = soft[b, start + index]
            row.zero_()
            row[letter_ids[torch.as_tensor(ids_)]] = torch.as_tensor(probs, dtype=torch.float32)
    batch["soft"] = soft
    return batch


def soft_loss(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy against ``batch["soft"]`` over answer positions, and
    the target's per-position entropy there (nats, ``(positions,)``)."""
    inputs = {k: v for k, v in batch.items() if k not in ("loss_mask", "soft")}
    logits = model(**inputs).logits.float()
    mask = batch["loss_mask"]
    logp = torch.log_softmax(logits[mask], dim=-1)
    loss = -(batch["soft"][mask] * logp).sum(-1).mean()
    entropy = -(logp.exp() * logp).sum(-1)
    return loss, entropy


def _mix_draw(world: SoftWorld, cfg: TrainConfig, rng, step: int):
    """One step's items and per-item filler lengths (``None``: no filler)."""
    mix = (*TASKS, AUX_TASK)
    weights = np.array(cfg.task_weights) / sum(cfg.task_weights)
    items, contexts = [], None
    if cfg.long_every and step % cfg.long_every == cfg.long_every - 1:
        contexts = []
        for b in range(cfg.long_batch):
            long = b % 2 == 0
            task = LONG_TASK if long else TASKS[int(rng.integers(len(TASKS)))]
            ex, marks = world.draw(task, rng)
            items.append((ex, ex.answer, marks))
            contexts.append(0 if long else int(rng.integers(cfg.context + 1)))
    else:
        for _ in range(cfg.batch):
            ex, marks = world.draw(mix[int(rng.choice(len(mix), p=weights))], rng)
            items.append((ex, ex.answer, marks))
    return items, contexts


def entropy_agreement(model, encoder, table, world: SoftWorld, n: int = 40, seed: int = 7):
    """On ``n`` held-out pages a task (drawn from ``[seed, 3]``), teacher-forced
    on the writer's answers: the Pearson correlation between the target's and
    the writer's entropy over all free letters (``r``), and per task the
    target's mean entropy at free letters, the writer's, and the share of
    copied positions where the target's argmax is the copied token
    (``copy_top1``). Returns a dict."""
    from glance.toy.writer import row_entropy

    rng = np.random.default_rng([seed, 3])
    model.eval()
    out, ours, theirs = {}, [], []
    with torch.no_grad():
        for task in TASKS:
            t_h, w_h, hits, total = [], [], 0, 0
            for b in range(0, n, 8):
                items = []
                for _ in range(min(8, n - b)):
                    ex, marks = world.draw(task, rng)
                    items.append((ex, ex.answer, marks))
                batch = soft_batch(encoder, items, table)
                inputs = {k: v for k, v in batch.items() if k not in ("loss_mask", "soft")}
                logits = model(**inputs).logits.float()
                logp = torch.log_softmax(logits, -1)
                ent = -(logp.exp() * logp).sum(-1)
                mask = batch["loss_mask"]
                for r, (_, _, marks) in enumerate(items):
                    start = int(mask[r].nonzero()[0])
                    free = {start + i for i, _, _ in marks}
                    for i, _, probs in marks:
                        t_h.append(float(ent[r, start + i]))
                        w_h.append(float(row_entropy(probs)))
                    for t in mask[r].nonzero()[:, 0].tolist():
                        if t not in free:
                            total += 1
                            hits += int(logits[r, t].argmax() == batch["input_ids"][r, t + 1])
            out[task] = {
                "target_entropy": float(np.mean(t_h)),
                "writer_entropy": float(np.mean(w_h)),
                "copy_top1": hits / max(1, total),
            }
            ours += t_h
            theirs += w_h
    model.train()
    out["r"] = float(np.corrcoef(ours, theirs)[0, 1])
    return out


def train_soft_target(
    cfg: TrainConfig,
    size: TargetSize | None = None,
    knobs: Knobs | None = None,
    *,
    progress: bool = True,
    check_every: int = 0,
    init=None,
):
    """Train a fresh toy target for ``cfg.steps`` steps on the soft-labelled
    world; returns ``(model, processor, log)``. With ``check_every``, the log
    holds :func:`entropy_agreement` every that many steps and at the end.
    ``init``, a saved toy target, starts from its weights instead."""
    from tqdm import tqdm

    from glance.toy.processor import build_processor
    from glance.toy.world import Encoder, build_target, glyph_table
    from glance.training.loop import lr_at, optimizer_step

    torch.manual_seed(cfg.seed)
    world = SoftWorld(knobs)
    processor = build_processor()
    encoder = Encoder(processor.tokenizer)
    model = build_target(processor.tokenizer, size, seed=cfg.seed)
    if init is not None:
        from transformers import Qwen3VLForConditionalGeneration

        model = Qwen3VLForConditionalGeneration.from_pretrained(init, dtype=torch.float32)
    model.train()
    table = glyph_table()
    rng = np.random.default_rng([cfg.seed, 1])
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0}],
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )
    start, losses, checks = time.perf_counter(), [], []
    check_seconds = 0.0
    bar = tqdm(range(cfg.steps), desc="soft target", disable=not progress)
    for step in bar:
        if check_every and step and step % check_every == 0:
            t = time.perf_counter()
            checks.append([step, entropy_agreement(model, encoder, table, world)])
            check_seconds += time.perf_counter() - t
        items, contexts = _mix_draw(world, cfg, rng, step)
        loss, _ = soft_loss(model, soft_batch(encoder, items, table, contexts))
        losses.append(optimizer_step(optim, model, loss, lr_at(step, cfg)))
        if step % 25 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-25:]):.3f}")
    seconds = time.perf_counter() - start - check_seconds
    model.eval()
    final = entropy_agreement(model, encoder, table, world)
    log = {
        "seconds": seconds,
        "steps": cfg.steps,
        "final_loss": float(np.mean(losses[-50:])),
        "checks": checks,
        "agreement": final,
    }
    return model, processor, log
