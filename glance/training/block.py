"""DFlash block-head training for any target, following SpecForge's DFlash recipe.

1. **Data.** Prompts are answered by the target itself (:func:`regenerate`),
   greedily and, optionally, by sampling, so the head learns what the target
   actually says.
2. **Context features.** One no-grad target pass over each whole sequence gives
   the hidden states at the head's ``target_layer_ids`` (:func:`sequence_features`).
3. **Blocks.** Random anchors ``a`` are drawn where the next token is a response
   token. A block is ``[token at a, MASK x (B-1)]`` at positions ``a..a+B-1``;
   several blocks are packed into one row (:func:`pack_blocks`). With
   ``mask_span="variable"``, a step may instead reveal the ``r`` true tokens
   after the anchor, ``[token at a, tokens a+1..a+r, MASK x (B-1)]``, with
   ``r`` drawn per step (0 half the time, else uniform in ``1..B-1``): what
   ``generate(extend_budget=...)`` asks of the head when it reveals its own
   spine and prices the offsets past the block.
4. **Attention.** A block's queries see context positions strictly before their
   anchor, and their own block in both directions, nothing else
   (:func:`block_mask`). Seeing position ``a`` itself would leak the answer.
5. **Loss.** The label at offset ``k`` is the token at ``a + k``: same position,
   no shift. Offset 0 and revealed offsets have weight 0, and the ``j``-th
   masked offset weight ``exp(-(j-1)/gamma)``; the loss is normalised by the
   weights.
6. **Frozen parts.** The target (embeddings and LM head included) never changes.

The result saves with ``save_pretrained`` and loads with both
``dflash.DFlashDraftModel.from_pretrained`` and :func:`glance.load_block_head`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from glance.heads.block import default_layer_ids, lm_head, noise_embedding
from glance.targets.vl import StreamPositions, text_config
from glance.training.features import sequence_features
from glance.training.loop import deterministic, fit

__all__ = [
    "HeadConfig",
    "Sequence",
    "block_mask",
    "build_head",
    "block_logits",
    "head_loss",
    "Rows",
    "total_weight",
    "pack_blocks",
    "sequence_features",
    "train_head",
]


MASK_SPANS = ("fixed", "variable")


@dataclass(frozen=True)
class HeadConfig:
    """Shape and training settings of a block head.

    ``target_layer_ids`` defaults to an even spread over the target's layers
    (dflash's own default collapses on tiny targets). ``gamma`` defaults to
    ``7 * block_size / 16`` (7 for B=16, as published). ``mask_span``:
    ``"fixed"`` (every block all masks after its anchor) or ``"variable"`` (some
    steps reveal a prefix of the block; needed by ``extend_budget``).
    """

    block_size: int = 16
    layers: int = 2
    heads: int = 4
    intermediate: int | None = None
    target_layer_ids: tuple[int, ...] | None = None
    gamma: float | None = None
    steps: int = 1500
    rows: int = 16
    blocks_per_row: int = 4
    lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.01
    seed: int = 0
    mask_span: str = "fixed"
    #: anchors per held-out sequence in the held-out loss, fixed whatever the
    #: batch's ``blocks_per_row``, so that runs with different batches compare.
    #: 32: over six draws on the toy's 64 held-out answers, one head's loss has
    #: a standard deviation of 0.9% at 32 anchors a sequence, 2.2% at 4
    heldout_blocks: int = 32

    def __post_init__(self):
        if self.mask_span not in MASK_SPANS:
            raise ValueError(f"mask_span must be one of {MASK_SPANS}; got {self.mask_span!r}")

    @classmethod
    def from_run(cls, run) -> HeadConfig:
        """The head a training run's settings describe (a pipeline ``TrainRun``
        or the toy's ``HeadTrain``: any object with these attributes, the
        batch and warm-up optional); the rest keep their defaults."""
        keys = ("block_size", "layers", "steps", "seed", "lr", "mask_span")
        optional = ("rows", "blocks_per_row", "warmup")
        given = {k: getattr(run, k) for k in optional if getattr(run, k, None) is not None}
        return cls(**{k: getattr(run, k) for k in keys}, **given)


@dataclass(frozen=True)
class Sequence:
    """A training sequence: prompt + the target's own response.

    ``input_ids`` is ``(L,)`` int64; ``prompt_len`` the number of prompt tokens;
    ``positions`` what the target's prefill over the whole sequence needs
    (:class:`~glance.targets.vl.VisionPositions` for an image prompt).
    """

    input_ids: torch.Tensor
    prompt_len: int
    positions: object = field(default_factory=StreamPositions)


def build_head(target, mask_token_id: int, cfg: HeadConfig = HeadConfig()):
    """A fresh ``dflash.DFlashDraftModel`` shaped to draft for ``target``."""
    from dflash import DFlashDraftModel
    from transformers import Qwen3Config

    text = text_config(target)
    layer_ids = list(cfg.target_layer_ids or default_layer_ids(text.num_hidden_layers))
    torch.manual_seed(cfg.seed)
    config = Qwen3Config(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=cfg.intermediate or 2 * text.hidden_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        head_dim=text.hidden_size // cfg.heads,
        max_position_embeddings=text.max_position_embeddings,
        rope_theta=_rope_theta(text),
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
    )
    config.num_target_layers = text.num_hidden_layers
    config.dflash_config = {
        "target_layer_ids": layer_ids,
        "mask_token_id": int(mask_token_id),
        "block_size": int(cfg.block_size),
        "mask_span": cfg.mask_span,
    }
    return DFlashDraftModel(config).to(target.dtype)


def _rope_theta(text) -> float:
    params = getattr(text, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(text, "rope_theta", 10000.0)))


def sample_anchors(
    prompt_len: int, length: int, n: int, rng: np.random.Generator, reveal: int = 0
) -> list[int]:
    """Up to ``n`` distinct anchors ``a`` in ``[prompt_len - 1, length - 2 - reveal]``:
    the next token after each is a response token, and so is the first masked
    one after ``reveal`` revealed tokens. Sorted."""
    low, high = prompt_len - 1, length - 2 - reveal
    if high < low:
        return []
    count = min(n, high - low + 1)
    return sorted(int(a) for a in rng.choice(np.arange(low, high + 1), size=count, replace=False))


def pack_blocks(
    input_ids: torch.Tensor,
    anchors,
    block_size: int,
    mask_token_id: int,
    gamma: float,
    reveal: int = 0,
):
    """One row's blocks: ``(block_ids, positions, labels, weights)``, each
    ``(n * (B + reveal),)``.

    Block ``j`` is ``[input_ids[a_j .. a_j+reveal], MASK x (B-1)]`` at positions
    ``a_j..a_j+reveal+B-1``. The label at offset ``k`` is ``input_ids[a_j + k]``
    (no shift). Offsets ``0..reveal`` and offsets past the sequence end have
    weight 0; masked offset ``k`` has ``exp(-(k - reveal - 1) / gamma)``.
    """
    length = input_ids.shape[0]
    span = block_size + reveal
    offsets = torch.arange(span)
    starts = torch.tensor(anchors, dtype=torch.long)
    pos = (starts[:, None] + offsets[None]).reshape(-1)
    block_ids = torch.full((len(anchors), span), mask_token_id, dtype=torch.long)
    shown = starts[:, None] + torch.arange(reveal + 1)[None]
    if int(shown.max()) >= length:
        raise ValueError(f"an anchor plus reveal={reveal} runs past the sequence of {length}")
    block_ids[:, : reveal + 1] = input_ids[shown]
    inside = pos < length
    labels = torch.where(inside, input_ids[pos.clamp(max=length - 1)], torch.zeros_like(pos))
    decay = torch.exp(-(offsets.double() - reveal - 1) / gamma)
    decay[: reveal + 1] = 0.0
    weights = decay.repeat(len(anchors)) * inside
    return block_ids.reshape(-1), pos, labels, weights


def block_mask(
    anchors, block_size: int, ctx_len: int, valid_ctx: int | None = None
) -> torch.Tensor:
    """``(n*B, ctx_len + n*B)`` bool, True where a query may look.

    Query rows are the packed blocks; key columns are the context positions
    ``0..ctx_len-1`` then the blocks. Block ``j`` sees context ``< a_j`` (and
    ``< valid_ctx``, for padded rows) and the whole of block ``j``.
    """
    starts = torch.tensor(anchors, dtype=torch.long)
    n = len(anchors)
    q_block = torch.arange(n).repeat_interleave(block_size)
    ctx_pos = torch.arange(ctx_len)
    sees_ctx = ctx_pos[None] < starts[q_block][:, None]
    if valid_ctx is not None:
        sees_ctx &= ctx_pos[None] < valid_ctx
    sees_block = q_block[:, None] == q_block[None]
    return torch.cat([sees_ctx, sees_block], dim=1)


def block_logits(head, target, rows, gamma: float, reveal: int = 0):
    """The head's logits over a batch of packed rows, with labels and weights.

    ``rows`` are ``(features (L, F), input_ids (L,), anchors)`` with the same
    number of anchors each; every block reveals ``reveal`` tokens after its
    anchor. Returns ``(logits (R, n*S, V), labels (R, n*S), weights (R, n*S))``
    with ``S = B + reveal``.
    """
    hidden, labels, weights = block_hidden(head, target, rows, gamma, reveal)
    return head.compute_logits(hidden, lm_head(target)).float(), labels, weights


def block_hidden(head, target, rows, gamma: float, reveal: int = 0):
    """:func:`block_logits` before the LM head: ``(hidden (R, n*S, H), labels,
    weights)``, the head's last hidden states at every packed offset.

    A block sees the context before its anchor only, so each row's features are
    cut at its last anchor (:func:`context_need`) and padded to the batch's
    longest such need: the same attention as over the whole row, at the cost of
    the context the blocks read."""
    block = int(head.block_size)
    mask_id = int(head.mask_token_id)
    needs = [context_need(f, anchors) for f, _, anchors in rows]
    ctx_len = max(needs)
    dtype = next(head.parameters()).dtype
    device = next(head.parameters()).device
    feats, noise, positions, masks, labels, weights = [], [], [], [], [], []
    for (f, ids, anchors), need in zip(rows, needs, strict=True):
        ids = ids.to(device)
        b_ids, b_pos, b_lab, b_w = pack_blocks(ids.cpu(), anchors, block, mask_id, gamma, reveal)
        feats.append(torch.nn.functional.pad(f[:need].to(device, dtype), (0, 0, 0, ctx_len - need)))
        noise.append(noise_embedding(head, target, b_ids.to(device)[None])[0])
        positions.append(torch.cat([torch.arange(ctx_len), b_pos]))
        masks.append(block_mask(anchors, block + reveal, ctx_len, valid_ctx=need))
        labels.append(b_lab)
        weights.append(b_w)
    visible = torch.stack(masks)[:, None].to(device)
    additive = torch.zeros(visible.shape, dtype=dtype, device=device)
    additive.masked_fill_(~visible, torch.finfo(dtype).min)
    hidden = head(
        target_hidden=torch.stack(feats),
        noise_embedding=torch.stack(noise),
        position_ids=torch.stack(positions).to(device),
        attention_mask=additive,
    )
    return hidden, torch.stack(labels).to(device), torch.stack(weights).to(device, torch.float32)


def context_need(features, anchors) -> int:
    """How many context positions a row's blocks read: those before its last
    anchor (at least one, and no more than the row has)."""
    return max(1, min(int(features.shape[0]), max(int(a) for a in anchors)))


#: rows per head pass in :func:`head_loss`: a batch runs as passes over rows of
#: similar context need, so that short rows are not padded to the longest one's
GROUP_ROWS = 4


def head_loss(head, target, rows, gamma: float, reveal: int = 0, total=None) -> torch.Tensor:
    """Weighted cross-entropy of :func:`block_logits`, normalised by the total
    weight: the weights' sum over ``rows``, or ``total`` (a data-parallel
    rank's share of a batch is normalised by the whole batch's weight).

    The rows run in passes of :data:`GROUP_ROWS`, sorted by context need: the
    loss of one padded pass, at the cost of the context each row reads."""
    order = sorted(range(len(rows)), key=lambda i: (context_need(rows[i][0], rows[i][2]), i))
    summed, weight = None, None
    for at in range(0, len(order), GROUP_ROWS):
        group = [rows[i] for i in order[at : at + GROUP_ROWS]]
        logits, labels, weights = block_logits(head, target, group, gamma, reveal)
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        part = (nll * weights.reshape(-1)).sum()
        summed = part if summed is None else summed + part
        weight = weights.sum() if weight is None else weight + weights.sum()
    norm = weight if total is None else total
    return summed / norm.clamp_min(1e-12)


def total_weight(rows, block_size: int, mask_token_id: int, gamma: float, reveal: int):
    """The weight sum :func:`head_loss` normalises ``rows`` (``(ids, anchors)``) by."""
    weights = [pack_blocks(ids, a, block_size, mask_token_id, gamma, reveal)[3] for ids, a in rows]
    return torch.stack(weights).to(torch.float32).sum()


def reveal_at(cfg: HeadConfig, longest: int, rng: np.random.Generator) -> int:
    """Tokens revealed after the anchor in this step's blocks: always 0 for a
    fixed mask span; for a variable one, 0 half the time, else uniform in
    ``1..B-1``, capped so that some response still has a masked label."""
    if cfg.mask_span == "fixed" or rng.random() < 0.5:
        return 0
    return int(min(rng.integers(1, cfg.block_size), max(0, longest - 1)))


class Rows:
    """Training rows held in memory: a list of :class:`Sequence` with the
    interface of :class:`~glance.training.corpus.Corpus` (``len``,
    ``sequence(i)``, ``lengths``, ``prompt_lens``). Sequences without an answer
    token are dropped."""

    def __init__(self, sequences):
        self._rows = [s for s in sequences if s.input_ids.shape[0] - s.prompt_len >= 1]
        self.lengths = np.array([s.input_ids.shape[0] for s in self._rows], dtype=np.int64)
        self.prompt_lens = np.array([s.prompt_len for s in self._rows], dtype=np.int64)

    def __len__(self) -> int:
        return len(self._rows)

    def sequence(self, i: int) -> Sequence:
        return self._rows[int(i)]

    def input_ids(self, i: int) -> torch.Tensor:
        return self._rows[int(i)].input_ids

    @property
    def recipe(self) -> str:
        """A digest of the rows' token ids: what their features are keyed by."""
        import hashlib

        h = hashlib.sha256()
        for s in self._rows:
            h.update(s.input_ids.numpy().tobytes() + b"|")
        return h.hexdigest()


def train_head(
    target,
    sequences,
    mask_token_id: int,
    cfg: HeadConfig = HeadConfig(),
    *,
    progress: bool = True,
    heldout=(),
    eval_every: int = 250,
    features: str = "online",
    work_dir=None,
    files=None,
    features_dir=None,
):
    """Train a head on ``sequences``: a list of :class:`Sequence` (target-generated)
    or a :class:`~glance.training.corpus.Corpus`.

    Returns ``(head, log)``; the head is in eval mode. Context features come
    from the frozen target (:mod:`glance.training.features`): ``"online"``
    computes each batch's rows in the step, ``"offline"`` writes them once
    to ``features_dir`` (default ``work_dir/features``), keyed by the rows,
    the target and the layers only, so another run over the same corpus (the
    consistency scorer's) reads them back; both give the same head.
    Deterministic for a seed on one machine. With ``heldout`` sequences, the
    log's ``heldout_curve`` holds ``[step, loss]`` pairs every ``eval_every``
    steps and at the end: the loss on fixed blocks of sequences never trained
    on (all masks after the anchor), so a reader can check that training
    converged. ``files`` (:class:`~glance.training.loop.RunFiles`) adds
    checkpoints (a rerun resumes) and dvclive metrics. Under
    ``torch.distributed``, each rank computes its share of every batch.
    """
    with deterministic():
        return _train_head(
            target,
            sequences,
            mask_token_id,
            cfg,
            progress=progress,
            heldout=heldout,
            eval_every=eval_every,
            features=features,
            features_dir=features_dir or (work_dir and Path(work_dir) / "features"),
            files=files,
        )


def _train_head(
    target, sequences, mask_token_id, cfg, *, progress, heldout, eval_every, features,
    features_dir, files,
):  # fmt: skip
    from glance.training.features import features_for
    from glance.training.loop import RunFiles, my_share

    target.requires_grad_(False)
    head = build_head(target, mask_token_id, cfg)
    gamma = cfg.gamma if cfg.gamma is not None else 7.0 * cfg.block_size / 16
    layer_ids = list(head.target_layer_ids)
    start = time.perf_counter()
    rows = sequences if hasattr(sequences, "sequence") else Rows(sequences)
    if not len(rows):
        raise ValueError("train_head: no sequence has a response token")
    files = files or RunFiles()
    feats = features_for(
        features,
        target,
        rows,
        layer_ids,
        folder=features_dir,
        key=feature_key(target, rows),
        progress=progress,
    )
    probe_rows = heldout if hasattr(heldout, "sequence") else Rows(heldout)
    probe = _heldout_rows(target, probe_rows, layer_ids, cfg.heldout_blocks)
    response = rows.lengths - rows.prompt_lens
    block = int(cfg.block_size)

    def batch_loss(rng: np.random.Generator) -> torch.Tensor:
        reveal = reveal_at(cfg, response.max(), rng)
        eligible = np.flatnonzero(response >= reveal + 1)  # room for a masked label
        drawn = []
        for i in eligible[rng.integers(len(eligible), size=cfg.rows)]:
            i = int(i)
            anchors = sample_anchors(
                int(rows.prompt_lens[i]), int(rows.lengths[i]), cfg.blocks_per_row, rng, reveal
            )
            while len(anchors) < cfg.blocks_per_row:  # short responses: repeat anchors
                anchors = sorted(anchors + anchors[: cfg.blocks_per_row - len(anchors)])
            drawn.append((i, anchors))
        share = my_share(len(drawn))
        total = None
        if len(share) < len(drawn):  # a rank's share: normalise by the whole batch
            pairs = [(rows.input_ids(i), a) for i, a in drawn]
            total = total_weight(pairs, block, mask_token_id, gamma, reveal)
        batch = [(feats(i), rows.input_ids(i), a) for i, a in (drawn[j] for j in share)]
        return head_loss(head, target, batch, gamma, reveal, total)

    log = fit(
        head,
        cfg,
        batch_loss,
        lambda row: head_loss(head, target, [row], gamma),
        probe,
        desc="train head",
        eval_every=eval_every,
        progress=progress,
        feature_seconds=time.perf_counter() - start,
        files=files,
        tokens_per_step=cfg.rows * cfg.blocks_per_row * block,
    )
    return head, log


def feature_key(target, rows) -> str:
    """What a row's context features depend on besides the layers read: the
    rows (a corpus's recipe, or a digest of their ids) and the target."""
    rows_id = [rows.recipe, getattr(rows, "part", None)]
    return json.dumps([rows_id, str(target.dtype), target.config.to_json_string()], sort_keys=True)


def _heldout_rows(target, rows, layer_ids, blocks: int) -> list:
    """Fixed evaluation rows: each held-out sequence with up to ``blocks``
    anchors drawn from :data:`~glance.training.loop.PROBE_SEED`, the same
    whatever the training seed, so that runs with different seeds are scored
    on one probe."""
    from glance.training.loop import PROBE_SEED

    rng = np.random.default_rng([PROBE_SEED, 7])
    out = []
    for i in range(len(rows)):
        s = rows.sequence(i)
        anchors = sample_anchors(s.prompt_len, s.input_ids.shape[0], blocks, rng)
        if anchors:
            out.append((sequence_features(target, s, layer_ids).cpu(), s.input_ids, anchors))
    return out


def answerer(target, processor, max_new_tokens: int, stop_token_id: int | None = None):
    """``answer(conversations, temperature, seed)``, as
    :func:`glance.training.corpus.build_corpus` calls it: :func:`regenerate`
    with these settings and no progress bar."""

    def answer(conversations, temperature, seed):
        return regenerate(
            target,
            processor,
            conversations,
            max_new_tokens,
            temperature=temperature,
            stop_token_id=stop_token_id,
            seed=seed,
            progress=False,
        )

    return answer


@torch.no_grad()
def regenerate(
    target,
    processor,
    conversations,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    batch_size: int = 32,
    seed: int = 0,
    stop_token_id: int | None = None,
    progress: bool = True,
) -> list[Sequence]:
    """Answer each conversation with the target itself: greedy (temperature 0) or sampled.

    ``conversations`` are chat messages as ``processor.apply_chat_template``
    takes them. Prompts are left-padded in batches and decoded with the
    target's own ``generate``; each result is a :class:`Sequence` of the
    unpadded prompt plus the response up to and including the stop token.
    Vision placeholder ids (image, video, vision start and end) are suppressed
    in responses.
    """
    from tqdm import tqdm

    from glance.targets.vl import VisionPositions

    stop = stop_token_id if stop_token_id is not None else processor.tokenizer.eos_token_id
    pad = processor.tokenizer.pad_token_id
    # A response holding an image placeholder would be read as an image with no
    # pixels when its features are computed, so those ids are never generated.
    suppress = [
        i
        for name in (
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
        )
        if isinstance(i := getattr(target.config, name, None), int)
    ]
    out: list[Sequence] = []
    for start in tqdm(
        range(0, len(conversations), batch_size), desc="regenerate", disable=not progress
    ):
        batch = conversations[start : start + batch_size]
        inputs = processor.apply_chat_template(
            batch,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            padding=True,
            padding_side="left",
        ).to(target.device)
        torch.manual_seed(seed + start)
        sampling = (
            dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            if temperature > 0
            else dict(do_sample=False)
        )
        ids = target.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            eos_token_id=stop,
            pad_token_id=pad,
            suppress_tokens=suppress or None,
            **sampling,
        )
        width = inputs["input_ids"].shape[1]
        grids = inputs.get("image_grid_thw")
        patch_starts = [0]
        if grids is not None:
            patch_starts = np.cumsum([0] + [int(g.prod()) for g in grids]).tolist()
        for i in range(len(batch)):
            keep = inputs["attention_mask"][i].bool()
            prompt = inputs["input_ids"][i][keep]
            response = ids[i, width:].tolist()
            if stop in response:
                response = response[: response.index(stop) + 1]
            positions = StreamPositions()
            if grids is not None:
                pixels = inputs["pixel_values"][patch_starts[i] : patch_starts[i + 1]]
                positions = VisionPositions(pixels, grids[i : i + 1])
            full = torch.cat([prompt.cpu(), torch.tensor(response, dtype=torch.long)])
            out.append(Sequence(full, int(prompt.shape[0]), positions))
    return out
