"""The toy target's loss: soft labels where the writer's distribution is known.

At a free character the writer (:mod:`glance.toy.writer`) knows the whole
distribution the character was drawn from, so the target is trained on that
distribution (the cross-entropy against it, whose minimum is the writer's own
entropy) rather than on the one character drawn. Everywhere else (copied
text, fixed text, the closing token) the loss is the usual cross-entropy on
the next token. The gradient then carries the whole row at every free
position, which is what lets the target's entropy follow the writer's after a
few hundred steps (:func:`glance.toy.world.fit_target`).
"""

from __future__ import annotations

import numpy as np
import torch

from glance.toy.tasks import TASKS, make_example
from glance.toy.writer import SYMBOLS

__all__ = ["entropy_agreement", "soft_batch", "soft_loss"]


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
