"""Training the EAGLE-style head with EAGLE-3's training-time test (see
:mod:`glance.heads.eagle`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from glance.heads.block import embeddings, lm_head
from glance.heads.eagle import build_eagle_head
from glance.training.loop import PROBE_SEED, deterministic, fit

__all__ = ["EagleTrainConfig", "eagle_loss", "train_eagle_head", "ttt_steps"]


@dataclass(frozen=True)
class EagleTrainConfig:
    """Training settings. ``rows`` sequences per step, each contributing a
    window of up to ``window`` consecutive anchors (cut at the sequence's end;
    a window at least as long as the response trains every anchor of it, as
    EAGLE-3 does), unrolled ``ttt`` draft steps with loss weight ``decay ** j``
    at step ``j``. The held-out loss is measured on fixed windows of
    ``heldout_window`` anchors, whatever ``window`` is, so that runs with
    different windows compare."""

    steps: int = 1500
    rows: int = 16
    window: int = 16
    ttt: int = 7
    decay: float = 0.8
    lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.01
    seed: int = 0
    layer_ids: tuple[int, ...] | None = None
    heldout_window: int = 16


def _row_batch(head, rows, window: int, ttt: int):
    """End-padded tensors for rows ``(features (L, F), ids (L,), start)``:
    ``(features, ids, valid ids, anchors, live anchors)``. A row's anchors are
    ``start ..`` up to ``window`` of them, cut where no label is left (anchor
    ``a`` predicts ``a + 2``); shorter rows repeat their last anchor, not live."""
    param = next(head.parameters())
    ends = [max(start + 1, min(start + window, ids.shape[0] - 2)) for _, ids, start in rows]
    P = max(ends)
    W = max(end - start for end, (_, _, start) in zip(ends, rows, strict=True))
    R, width = len(rows), P + ttt + 2
    feats = torch.zeros(R, P, rows[0][0].shape[1], dtype=param.dtype)
    ids_all = torch.zeros(R, width, dtype=torch.long)
    valid = torch.zeros(R, width, dtype=torch.bool)
    anchors = torch.zeros(R, W, dtype=torch.long)
    live = torch.zeros(R, W, dtype=torch.bool)
    for r, ((f, ids, start), end) in enumerate(zip(rows, ends, strict=True)):
        n, m = min(P, f.shape[0]), min(width, ids.shape[0])
        feats[r, :n] = f[:n].to(param.dtype)
        ids_all[r, :m], valid[r, :m] = ids[:m], True
        anchors[r] = torch.arange(start, start + W).clamp(max=end - 1)
        live[r, : end - start] = True
    return tuple(t.to(param.device) for t in (feats, ids_all, valid, anchors, live))


def ttt_steps(head, target, rows, window: int, ttt: int):
    """The training-time test over ``rows`` (``(features, ids, start)`` per
    row; anchors ``start ..``, up to ``window`` of them and none past the
    last with a label): yields ``(j, logits,
    labels, ok)`` for draft steps ``j = 0 .. ttt - 1``, each ``(R, W, ...)``.

    Step 0 runs the head causally over positions ``0 .. max end`` (the
    target's features, each with the token after it) and predicts the token
    two ahead at each anchor. Step ``j`` feeds each anchor's step ``j - 1``
    output with the true token ``anchor + j + 1`` at position ``anchor + j``,
    attending to step 0 at positions ``<= anchor`` and to its own anchor's
    earlier steps, as :class:`EagleDrafter` attends at depth ``j + 1``, and
    predicts ``anchor + j + 2``. ``ok`` is False past a sequence's end.
    """
    feats, ids, valid, anchors, live = _row_batch(head, rows, window, ttt)
    embed, output = embeddings(target), lm_head(target)
    R, P = feats.shape[:2]
    W = anchors.shape[1]
    device = feats.device
    pos0 = torch.arange(P, device=device)[None].expand(R, P)
    # Rows are padded at the end, so a causal pass never lets a real position
    # see padding, and SDPA can take its fused causal path.
    out0, k0, v0 = head.step(head.fuse(feats), embed(ids[:, 1 : P + 1]), pos0, None, "causal")
    hidden = out0.gather(1, anchors[..., None].expand(R, W, out0.shape[-1]))
    sees0 = pos0[:, None, :] <= anchors[..., None]  # (R, W, P)
    eye = torch.eye(W, dtype=torch.bool, device=device)[None].expand(R, W, W)
    keys, values = [k0], [v0]
    for j in range(ttt):
        if j > 0:
            past = (torch.cat(keys, dim=2), torch.cat(values, dim=2))
            visible = torch.cat([sees0] + [eye] * j, dim=2)
            tok = embed(ids.gather(1, anchors + j + 1))
            hidden, k, v = head.step(hidden, tok, anchors + j, past, visible)
            keys.append(k)
            values.append(v)
        label_at = anchors + j + 2
        ok = valid.gather(1, label_at) & live
        if not bool(ok.any()):
            return
        yield j, head.logits(hidden, output).float(), ids.gather(1, label_at), ok


#: rows per pass in :func:`eagle_loss`: a batch runs as passes over rows of
#: similar length, so that short windows are not padded to the longest one's
GROUP_ROWS = 8


def eagle_loss(head, target, rows, window: int, ttt: int, decay: float) -> torch.Tensor:
    """The training loss: each step's mean cross-entropy over valid labels
    (:func:`ttt_steps`), weighted ``decay ** j`` and normalised by the weights.

    The rows run in passes of :data:`GROUP_ROWS`, sorted by how far their
    windows reach; each step's mean is taken over the whole batch, so the loss
    is one padded pass's."""
    order = sorted(
        range(len(rows)), key=lambda i: (min(rows[i][2] + window, rows[i][1].shape[0]), i)
    )
    sums, counts = {}, {}
    for at in range(0, len(order), GROUP_ROWS):
        group = [rows[i] for i in order[at : at + GROUP_ROWS]]
        for j, logits, labels, ok in ttt_steps(head, target, group, window, ttt):
            nll = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
            )
            okf = ok.reshape(-1).float()
            sums[j] = sums.get(j, 0.0) + (nll * okf).sum()
            counts[j] = counts.get(j, 0.0) + okf.sum()
    total, weight = 0.0, 0.0
    for j in sorted(sums):
        total = total + decay**j * sums[j] / counts[j]
        weight += decay**j
    return total / weight


def _windows(data, count: int, window: int, rng: np.random.Generator):
    """``count`` rows: a sequence drawn at random and a window start inside
    its response (anchor ``a`` needs the token at ``a + 2``)."""
    rows = []
    for i in rng.integers(len(data), size=count):
        f, ids, prompt_len = data[int(i)]
        low, high = prompt_len - 1, ids.shape[0] - 3
        start = int(rng.integers(low, max(low, high - window + 2) + 1))
        rows.append((f, ids, start))
    return rows


def train_eagle_head(
    target, sequences, cfg: EagleTrainConfig, *, heldout=(), eval_every=250, progress: bool = True
):
    """Train an :class:`EagleHead` on ``sequences`` (``glance.training.block.Sequence``,
    the target's own answers, the same corpus the block head trains on).

    Returns ``(head, log)`` with the head in eval mode; deterministic for a
    seed on one machine. With ``heldout`` sequences, ``log["heldout_curve"]``
    holds ``[step, loss]`` pairs on fixed windows never trained on. Trains in
    one process: under ``torch.distributed`` it refuses to start.
    """
    from tqdm import tqdm

    from glance.training.features import sequence_features
    from glance.training.loop import world

    if world()[1] > 1:
        raise RuntimeError("train_eagle_head trains in one process; run it without torchrun")
    with deterministic():
        target.requires_grad_(False)
        head = build_eagle_head(target, cfg.layer_ids, cfg.seed)
        ids = head.target_layer_ids
        start = time.perf_counter()

        def table(seqs):
            rows = [
                (sequence_features(target, s, ids).cpu(), s.input_ids, s.prompt_len) for s in seqs
            ]
            return [r for r in rows if r[1].shape[0] - r[2] >= 2]

        data = table(tqdm(sequences, desc="eagle features", disable=not progress))
        if not data:
            raise ValueError("train_eagle_head: no sequence has two response tokens")
        probe_rng = np.random.default_rng([PROBE_SEED, 7])
        probe = [_windows([r], 1, cfg.heldout_window, probe_rng)[0] for r in table(heldout)]

        def loss(rows, window) -> torch.Tensor:
            return eagle_loss(head, target, rows, window, cfg.ttt, cfg.decay)

        log = fit(
            head,
            cfg,
            lambda rng: loss(_windows(data, cfg.rows, cfg.window, rng), cfg.window),
            lambda row: loss([row], cfg.heldout_window),
            probe,
            desc="train eagle head",
            eval_every=eval_every,
            progress=progress,
            feature_seconds=time.perf_counter() - start,
        )
    return head, {**log, "target_layer_ids": head.target_layer_ids}
