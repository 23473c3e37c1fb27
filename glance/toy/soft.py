"""The toy target's loss: soft labels where the writer's distribution is known.

At a free character the writer (:mod:`glance.toy.writer`) knows the whole
distribution the character was drawn from, so the target is trained on that
distribution (the cross-entropy against it, whose minimum is the writer's own
entropy) rather than on the one character drawn. Everywhere else (copied
text, fixed text, the closing token) the loss is the usual cross-entropy on
the next token. The gradient then carries the whole row at every free
position, which is what lets the target's entropy follow the writer's after a
few hundred steps (:func:`fit_target`; :func:`train_target` saves it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from glance.toy.config import TargetSize, TrainConfig
from glance.toy.families import PROCESSORS, build_target, model_class
from glance.toy.processor import build_processor, save_processor
from glance.toy.tasks import AUX_TASK, LONG_TASK, TASKS, make_example
from glance.toy.world import Encoder, glyph_table, make_batch
from glance.toy.writer import SYMBOLS

__all__ = ["entropy_agreement", "fit_target", "soft_batch", "soft_loss", "train_target"]


def soft_batch(encoder, items, table: torch.Tensor, contexts=None) -> dict:
    """:func:`glance.toy.world.make_batch` of ``(example, answer, marks)``
    items, plus ``soft``: ``(batch, length, vocab)`` float32, at every
    position whose next token is an answer token the distribution it is
    trained toward: the writer's row at a free letter, else the next token."""
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


def entropy_agreement(model, encoder, table, n: int = 40, seed: int = 7):
    """On ``n`` held-out pages a task (drawn from ``[seed, 3]``, a seed no
    training draws from), teacher-forced on the writer's answers: the Pearson
    correlation between the target's and the writer's entropy over all free
    characters (``r``), and per task the
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
                    ex = make_example(task, rng)
                    items.append((ex, ex.answer, ex.marks))
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


def fit_target(
    cfg: TrainConfig | None = None,
    size: TargetSize | None = None,
    progress: bool = True,
) -> tuple:
    """Train a toy target on a mix of the five tasks (and the reading drill):
    ``(model, processor, log)``.

    The loss is :func:`soft_loss`: at a free character the
    cross-entropy against the writer's own distribution, elsewhere against the
    next token. Examples are drawn afresh each step from a generator seeded by
    ``cfg.seed``, so a seed gives the same model on one machine; with
    ``cfg.phases`` above 1 the schedule restarts that many times (see
    :class:`TrainConfig`). ``cfg.init``, a saved toy target, starts from its
    weights (its reading) instead of a fresh model. The log holds the seconds,
    final loss and steps, with ``cfg.eval_every`` each phase's held-out curve
    and the last held-out loss, and ``agreement``: the target's entropy
    against the writer's on held-out pages
    (:func:`entropy_agreement`).
    """
    from tqdm import tqdm

    cfg, size = cfg or TrainConfig(), size or TargetSize()
    torch.manual_seed(cfg.seed)
    processor = build_processor()
    encoder = Encoder(processor.tokenizer)
    if cfg.init is not None:
        from glance._io import load_strict

        init = Path(cfg.init)
        try:
            kind = json.loads((init / "config.json").read_text(encoding="utf-8"))["model_type"]
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(
                f"target.train.init {cfg.init}: no readable config.json ({err})"
            ) from None
        if kind != size.family:
            raise ValueError(
                f"target.train.init {cfg.init}: a {kind} checkpoint, but target.size.family "
                f"is {size.family!r}"
            )
        model = load_strict(
            model_class(size.family), init, "target.train.init", dtype=torch.float32
        )
        text = model.config.text_config
        if (text.hidden_size, text.num_hidden_layers) != (size.hidden, size.layers):
            raise ValueError(
                f"target.train.init {cfg.init}: hidden {text.hidden_size}, "
                f"{text.num_hidden_layers} layers, but target.size asks for hidden "
                f"{size.hidden}, {size.layers} layers"
            )
    else:
        model = build_target(processor.tokenizer, size, seed=cfg.seed)
    model.train()
    table = glyph_table()
    logs = []
    for phase in range(cfg.phases):
        seed = cfg.seed + phase
        desc = f"train target ({phase + 1}/{cfg.phases})"
        bar = tqdm(range(cfg.steps), desc=desc, disable=not progress)
        logs.append(_train_phase(model, encoder, table, cfg, seed, bar))
    model.eval()
    log = {
        "seconds": sum(x["seconds"] for x in logs),
        "steps": cfg.steps * cfg.phases,
        "phases": logs,
        "final_loss": logs[-1]["final_loss"],
    }
    if "heldout_curve" in logs[-1]:
        log["heldout_loss"] = logs[-1]["heldout_curve"][-1][1]
    log["agreement"] = entropy_agreement(model, encoder, table)
    return model, processor, log


def train_target(
    out_dir,
    cfg: TrainConfig | None = None,
    size: TargetSize | None = None,
    progress: bool = True,
) -> dict:
    """:func:`fit_target`, saved: the model and its processor are written to
    ``out_dir`` (built in a temporary folder, then renamed into place), as a
    hub checkpoint lays them out. Returns the training log."""
    from glance._io import replace_dir

    model, processor, log = fit_target(cfg, size, progress)

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        save_processor(processor, tmp, *PROCESSORS[(size or TargetSize()).family])

    replace_dir(out_dir, save, "toy target", kind="target")
    return log


def _train_phase(model, encoder, table, cfg: TrainConfig, seed: int, bar) -> dict:
    """One phase of :func:`fit_target`: ``cfg.steps`` steps of a fresh AdamW
    with warm-up and cosine decay, on examples drawn from ``[seed, 1]``."""
    from glance.training.loop import PROBE_SEED, Clock, lr_at, optimizer_step

    rng, clock = np.random.default_rng([seed, 1]), Clock()
    torch.manual_seed(seed)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0}],
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )
    start, losses, curve = time.perf_counter(), [], []

    def heldout() -> float:  # the same batches in every phase and run, whatever the seed
        held, batches = np.random.default_rng([PROBE_SEED, 2]), []
        model.eval()
        with torch.no_grad():
            for i in range(cfg.heldout_batches):
                batches.append(float(_phase_loss(model, encoder, table, cfg, held, step=i)))
        model.train()
        return float(np.mean(batches))

    for step in bar:
        if cfg.eval_every and step % cfg.eval_every == 0:
            with clock("heldout"):
                curve.append([step, heldout()])
        with clock("loss"):
            loss = _phase_loss(model, encoder, table, cfg, rng, step=step)
        losses.append(optimizer_step(optim, model, loss, lr_at(step, cfg), clock=clock))
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
    if cfg.eval_every:
        with clock("heldout"):
            curve.append([cfg.steps, heldout()])
    seconds = time.perf_counter() - start
    phases = {k: round(v, 3) for k, v in sorted(clock.seconds.items())}
    return {
        "seed": seed,
        "steps": cfg.steps,
        "seconds": seconds,
        "phase_seconds": phases | {"other": round(seconds - sum(clock.seconds.values()), 3)},
        "final_loss": float(np.mean(losses[-50:])),
    } | ({"heldout_curve": curve} if curve else {})


def _phase_loss(model, encoder, table, cfg: TrainConfig, rng, *, step: int):
    """One step's batch of :func:`_train_phase`, drawn from ``rng``, and its
    soft-labelled loss. Every ``cfg.long_every``-th step is a batch of long
    sequences: filler before the question on all of them but one in two
    batches' first, a ``longform`` answer."""
    mix = (*TASKS, AUX_TASK)
    weights = np.array(cfg.task_weights) / sum(cfg.task_weights)
    items, contexts = [], None
    if cfg.long_every and step % cfg.long_every == cfg.long_every - 1:
        contexts = []
        for b in range(cfg.long_batch):
            long = b == 0 and (step // cfg.long_every) % 2 == 0
            ex = make_example(LONG_TASK if long else TASKS[int(rng.integers(len(TASKS)))], rng)
            items.append((ex, ex.answer, ex.marks))
            contexts.append(0 if long else int(rng.integers(cfg.context + 1)))
    else:
        for _ in range(cfg.batch):
            ex = make_example(mix[int(rng.choice(len(mix), p=weights))], rng)
            items.append((ex, ex.answer, ex.marks))
    loss, _ = soft_loss(model, soft_batch(encoder, items, table, contexts))
    return loss
