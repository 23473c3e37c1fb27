"""Training the causal consistency scorer (:mod:`glance.heads.scorer`) behind
a trained, frozen block head, with the project's one trainer
(:func:`glance.training.loop.fit`), on the head's own corpus.

Each step draws blocks as the head's training does (random anchors in the
target's own answers, every offset masked after the anchor). The frozen head
gives each offset its top-``K`` candidates and hidden state. Where the answer's
token at offset ``k`` is among the candidates, the loss is its cross-entropy
within them under ``log P(c) + pair(c)``, the scorer's state having run along
the answer's own tokens up to ``k - 1``: what the tree search scores when its
path so far is the one the target takes. Offsets are weighted
``exp(-(k-1)/gamma)``, as the head's loss weights them. Under
``torch.distributed`` each rank takes its share of the global batch, and the
loss is normalised by the whole batch's weight.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from glance.heads.scorer import CausalScorer, build_scorer
from glance.training.block import Rows, block_hidden, sample_anchors
from glance.training.loop import RunFiles, deterministic, fit, my_share, world

__all__ = ["ScorerTrain", "scorer_loss", "train_scorer"]


@dataclass(frozen=True)
class ScorerTrain:
    """Settings of a scorer run: the state's ``rank``, the candidates per
    offset ``top_k``, and the trainer's ``steps``, ``rows`` (sequences a
    step), ``blocks_per_row``, ``lr``, ``warmup``, ``weight_decay``, ``seed``."""

    rank: int = 32
    top_k: int = 8
    steps: int = 1000
    rows: int = 16
    blocks_per_row: int = 4
    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self):
        for name in ("rank", "top_k", "steps", "rows", "blocks_per_row"):
            if int(getattr(self, name)) < 1:
                raise ValueError(
                    f"scorer.{name}: expected a positive integer; got {getattr(self, name)}"
                )
        if not self.lr > 0:
            raise ValueError(f"scorer.lr: expected a positive number; got {self.lr}")


def _candidates(head, target, rows, gamma: float, top_k: int):
    """The frozen head's view of ``rows``: per block and offset 1..B-1, the
    hidden state ``(R, n, B-1, H)``, the top-``K`` log-probabilities and ids
    ``(R, n, B-1, K)``, the path before each offset ``(R, n, B-1)``, the
    answer's token ``(R, n, B-1)`` and the offset weights ``(R, n, B-1)``."""
    from glance.heads.block import lm_head

    with torch.no_grad():
        hidden, labels, weights = block_hidden(head, target, rows, gamma)
        logp = torch.log_softmax(head.compute_logits(hidden, lm_head(target)).float(), dim=-1)
    block = int(head.block_size)
    r, n = hidden.shape[0], hidden.shape[1] // block
    labels = labels.view(r, n, block)
    lp, ids = logp.view(r, n, block, -1)[:, :, 1:].topk(top_k, dim=-1)
    return (
        hidden.view(r, n, block, -1)[:, :, 1:],
        lp,
        ids,
        labels[:, :, :-1].clamp_min(0),
        labels[:, :, 1:],
        weights.view(r, n, block)[:, :, 1:],
    )


def scorer_loss(scorer: CausalScorer, head, target, rows, gamma: float, top_k: int, *, total=None):
    """The weighted in-candidate cross-entropy (module docstring) over ``rows``
    (``(features, input_ids, anchors)``, as :func:`~glance.training.block.block_logits` takes them),
    normalised by the weight of the offsets whose answer is a candidate, or
    by ``total``."""
    hidden, lp, ids, previous, truth, weights = _candidates(head, target, rows, gamma, top_k)
    hit = ids == truth[..., None]
    present = hit.any(-1)
    pair = scorer.pair(hidden.to(scorer.dtype), previous, ids).float()
    nll = -torch.log_softmax(lp + pair, dim=-1)[hit]
    w = weights[present]
    norm = w.sum().clamp_min(1e-12) if total is None else total
    return (nll * w).sum() / norm


def _weight(head, target, rows, gamma: float, top_k: int) -> torch.Tensor:
    """The loss's normalising weight over ``rows`` (no gradient)."""
    _, _, ids, _, truth, weights = _candidates(head, target, rows, gamma, top_k)
    return weights[(ids == truth[..., None]).any(-1)].sum()


def train_scorer(
    head,
    target,
    sequences,
    cfg: ScorerTrain = ScorerTrain(),
    *,
    heldout=(),
    eval_every: int = 100,
    progress: bool = True,
    files: RunFiles | None = None,
    features: str = "online",
    features_dir=None,
):
    """Train a :class:`CausalScorer` behind the frozen block ``head`` on
    ``sequences`` (a list of :class:`~glance.training.block.Sequence` or a
    :class:`~glance.training.corpus.Corpus`). Returns ``(scorer, log)``; the
    log's ``heldout_curve`` holds the loss on fixed blocks of ``heldout``
    every ``eval_every`` steps and ``"marginal_heldout_loss"`` the same loss
    of the untrained scorer (the product of marginals), for comparison. Rows
    where no answer token is ever among the head's candidates have no loss to
    take; they are left out, with a warning that counts them. ``features``
    and ``features_dir`` are as in :func:`~glance.training.block.train_head`:
    an offline folder the head's training wrote is read back, not recomputed."""
    from glance.training.block import _heldout_rows, feature_key
    from glance.training.features import features_for

    with deterministic():
        head.requires_grad_(False)
        target.requires_grad_(False)
        scorer = build_scorer(head, target, cfg.rank, cfg.top_k, cfg.seed)
        gamma = 7.0 * int(head.block_size) / 16
        layer_ids = list(head.target_layer_ids)
        start = time.perf_counter()
        rows = sequences if hasattr(sequences, "sequence") else Rows(sequences)
        if not len(rows):
            raise ValueError("train_scorer: no sequence has a response token")
        feats = features_for(
            features, target, rows, layer_ids, folder=features_dir,
            key=feature_key(target, rows), progress=progress,
        )  # fmt: skip
        held = heldout if hasattr(heldout, "sequence") else Rows(heldout)
        probe = _heldout_rows(target, held, layer_ids, cfg.blocks_per_row)
        with torch.no_grad():  # a row whose answer is never a candidate has nothing to score
            kept = [p for p in probe if _weight(head, target, [p], gamma, cfg.top_k) > 0]
        if len(kept) < len(probe):
            warnings.warn(
                f"train_scorer: {len(probe) - len(kept)} of {len(probe)} held-out rows have no "
                f"answer token among the head's top {cfg.top_k}; the held-out loss leaves them out",
                stacklevel=2,
            )
        probe = kept

        def row_loss(row):
            return scorer_loss(scorer, head, target, [row], gamma, cfg.top_k)

        with torch.no_grad():
            marginal = float(np.mean([row_loss(p).item() for p in probe])) if probe else None

        def batch_loss(rng: np.random.Generator) -> torch.Tensor:
            drawn = []
            for i in rng.integers(len(rows), size=cfg.rows):
                i = int(i)
                anchors = sample_anchors(
                    int(rows.prompt_lens[i]), int(rows.lengths[i]), cfg.blocks_per_row, rng
                )
                while len(anchors) < cfg.blocks_per_row:  # short responses: repeat anchors
                    anchors = sorted(anchors + anchors[: cfg.blocks_per_row - len(anchors)])
                drawn.append((i, anchors))
            batch = [(feats(i), rows.input_ids(i), drawn[j][1]) for j in my_share(len(drawn))
                     for i in (drawn[j][0],)]  # fmt: skip
            total = None
            if world()[1] > 1:  # a rank's share: normalise by the whole batch's weight
                import torch.distributed as dist

                total = _weight(head, target, batch, gamma, cfg.top_k)
                dist.all_reduce(total)
                total = total.clamp_min(1e-12)
            return scorer_loss(scorer, head, target, batch, gamma, cfg.top_k, total=total)

        log = fit(
            scorer,
            cfg,
            batch_loss,
            row_loss,
            probe,
            desc="train scorer",
            eval_every=eval_every,
            progress=progress,
            feature_seconds=time.perf_counter() - start,
            files=files or RunFiles(),
        )
        log["marginal_heldout_loss"] = marginal
        return scorer, log
