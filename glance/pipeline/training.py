"""The corpus and head stages' work: the config's corpus recipe answered by the
target, and a block head trained on it, on one process or under ``torchrun``.

Training is the library's (:mod:`glance.training`); this module only turns the
built config into its calls. It is the one place that picks the toy world's
prompts, so the trainer never imports the world.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

from glance.training.checkpoints import finish, locked, run_folder

log = logging.getLogger("glance")

__all__ = [
    "corpus_recipe",
    "init_distributed",
    "make_corpus",
    "mask_token_id",
    "target_dir",
    "train_block_head",
]


#: seconds a rank waits in a collective for the others (``dist_timeout`` in conf/config.yaml)
DIST_TIMEOUT = 600


def init_distributed(device: str, timeout: float = DIST_TIMEOUT) -> tuple[int, int, str]:
    """Join the ``torchrun`` group when there is one: gloo on CPU, NCCL on GPU,
    one GPU a rank. A collective that waits ``timeout`` seconds for a rank
    that never comes (stopped, hung) fails, rather than blocking for torch's
    default 30 minutes. Returns ``(rank, size, device)``."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return 0, 1, device
    import torch
    import torch.distributed as dist

    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device.startswith("cuda") else "gloo",
            timeout=datetime.timedelta(seconds=float(timeout)),
        )
    return dist.get_rank(), size, device


def target_dir(info: dict) -> Path:
    """The folder of the target ``target.json`` records: a local checkpoint, or
    the hub name's snapshot in the local cache."""
    if info.get("local"):
        return Path(info["path"])
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(info["path"], revision=info.get("revision"), local_files_only=True)
    )


def corpus_recipe(cfg, target_dir) -> dict:
    """What decides the corpus's answers: the recipe and which target answers."""
    from glance.training.corpus import target_identity

    recipe = asdict(cfg.corpus)
    recipe.pop("shard_size")  # how the answers are grouped, not what they are
    return {"corpus": recipe, "target": target_identity(target_dir), "dtype": cfg.dtype}


def _parts(cfg) -> list:
    c = cfg.corpus
    if c.source == "toy":
        from glance.toy.world import toy_parts

        return toy_parts(**asdict(c))
    from glance.data.benchmarks import corpus_conversations
    from glance.training.corpus import Part

    rows = corpus_conversations(c)
    parts, at = [], 0
    for name, n, temperature, seed in (
        ("train", c.greedy, 0.0, c.seed),
        ("train", c.sampled, 1.0, c.seed + 1),
        ("heldout", c.heldout, 0.0, c.seed + 2),
    ):
        if n:
            span = range(at, at + n)
            parts.append(Part(name, c.source, rows.select(span), span, temperature, seed))
            at += n
    return parts


def make_corpus(cfg, target, processor, target_dir) -> dict:
    """Answer the corpus recipe with ``target`` into ``paths.corpus``, resuming."""
    from glance.training.block import answerer
    from glance.training.corpus import build_corpus

    stop = None
    if cfg.corpus.source == "toy":
        stop = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    answer = answerer(target, processor, cfg.corpus.max_new_tokens, stop)
    recipe = corpus_recipe(cfg, target_dir)
    return build_corpus(
        cfg.paths.corpus,
        _parts(cfg),
        answer,
        recipe,
        shard_size=cfg.corpus.shard_size,
        progress=True,
    )


def mask_token_id(processor, target) -> int:
    """The id a block head fills its masked offsets with: the tokenizer's
    ``<|mask|>`` if it has one; else the first embedding row past the
    tokenizer (Qwen pads its embedding, as z-lab's heads use); else padding."""
    from glance.targets.vl import text_config

    tok = processor.tokenizer
    mask = tok.convert_tokens_to_ids("<|mask|>")
    if isinstance(mask, int) and mask != tok.unk_token_id and mask is not None:
        return mask
    if len(tok) < text_config(target).vocab_size:
        return len(tok)
    return int(tok.pad_token_id)


def _own(work: Path):
    """Rank 0 holds ``work``'s lock (:func:`glance.training.checkpoints.locked`)
    for the run; the other ranks write no checkpoint."""
    from glance.training.loop import world

    return locked(work) if world()[0] == 0 else nullcontext(work)


def features_dir(cfg) -> Path:
    """Where offline context features are kept: one folder the head and the
    scorer share (each file is keyed by corpus, target and layers), left in
    place after training so the next run over the same corpus reads it."""
    return Path(cfg.paths.checkpoints) / "features"


def train_block_head(cfg, target, processor, target_dir, out: Path | None) -> dict:
    """Train ``head.train`` on the corpus; rank 0 saves the head to ``out``.

    Checkpoints go to ``<paths.checkpoints>/head/<digest of the run>``
    (:mod:`glance.training.checkpoints`), offline features to
    :func:`features_dir`, the dvclive metrics to ``<paths.results>/train/head``.
    The corpus must have been answered by this very target (its recipe records
    the target's hash).
    """
    from glance.targets.vl import text_config
    from glance.training.block import HeadConfig, train_head
    from glance.training.corpus import Corpus, CorpusError
    from glance.training.loop import RunFiles, world

    t = cfg.head.train
    folder, vocab = Path(cfg.paths.corpus), text_config(target).vocab_size
    train = Corpus(folder, "train", processor=processor, vocab_size=vocab)
    recipe = corpus_recipe(cfg, target_dir)
    if train.recipe != recipe:
        raise CorpusError(
            f"corpus {folder}: made by another recipe or target than this config's "
            f"(its corpus.json records {json.dumps(train.recipe)[:200]}); run stages.corpus"
        )
    heldout = []
    if json.loads((folder / "corpus.json").read_text())["rows"]["heldout"]:
        heldout = Corpus(folder, "heldout", processor=processor, vocab_size=vocab)
    head_cfg = HeadConfig.from_run(t)
    key = json.dumps({"recipe": recipe, "train": asdict(t)}, sort_keys=True)
    work = run_folder(Path(cfg.paths.checkpoints) / "head", key)
    files = RunFiles(
        checkpoint=work,
        save_every=t.save_every,
        key=key,
        live=Path(cfg.paths.results) / "train" / "head",
        log_every=t.log_every,
    )
    mask = mask_token_id(processor, target)
    with _own(work):
        head, train_log = train_head(
            target,
            train,
            mask,
            head_cfg,
            heldout=heldout,
            eval_every=t.eval_every,
            features=t.features,
            features_dir=features_dir(cfg),
            files=files,
        )
        if world()[0] == 0 and out is not None:
            head.save_pretrained(out)
            finish(work)  # finished: nothing to resume
    return train_log | {"sequences": len(train), "features": t.features, "ranks": world()[1]}


def train_consistency_scorer(cfg, target, processor, head, out: Path | None) -> dict:
    """Train ``scorer`` behind the frozen block ``head`` on the head's corpus;
    rank 0 saves the scorer to ``out``.

    Checkpoints go to ``<paths.checkpoints>/scorer/<digest of the run>``, the dvclive metrics to
    ``<paths.results>/train/scorer``; a checkpoint resumes only the same run
    (same corpus, settings and head weights).
    """
    from glance.heads.scorer import head_digest
    from glance.targets.vl import text_config
    from glance.training.corpus import Corpus
    from glance.training.loop import RunFiles, world
    from glance.training.scorer import ScorerTrain, train_scorer

    s = cfg.scorer
    folder, vocab = Path(cfg.paths.corpus), text_config(target).vocab_size
    train = Corpus(folder, "train", processor=processor, vocab_size=vocab)
    heldout = []
    if json.loads((folder / "corpus.json").read_text())["rows"]["heldout"]:
        heldout = Corpus(folder, "heldout", processor=processor, vocab_size=vocab)
    run = {k: v for k, v in asdict(s).items() if k not in ("save_every", "eval_every")}
    key = json.dumps({"recipe": train.recipe, "scorer": run, "head": head_digest(head)})
    work = run_folder(Path(cfg.paths.checkpoints) / "scorer", key)
    files = RunFiles(
        checkpoint=work,
        save_every=s.save_every,
        key=key,
        live=Path(cfg.paths.results) / "train" / "scorer",
        log_every=max(1, s.eval_every // 4),
    )
    with _own(work):
        scorer, train_log = train_scorer(
            head,
            target,
            train,
            ScorerTrain(**run),
            heldout=heldout,
            eval_every=s.eval_every,
            files=files,
            # the head's own feature mode; a downloaded head has no run: online
            features=cfg.head.train.features if cfg.head.train is not None else "online",
            features_dir=features_dir(cfg),
        )
        if world()[0] == 0 and out is not None:
            scorer.save_pretrained(out)
            finish(work)  # finished: nothing to resume
    return train_log | {"sequences": len(train), "ranks": world()[1]}
