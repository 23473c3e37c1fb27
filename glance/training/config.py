"""Head training's configs: the corpus recipe and the training run.

Plain dataclasses (no torch), so the pipeline's typed config
(:mod:`glance.pipeline.config`) is built from them and checked before any model
loads. The pipeline's values live in ``conf/corpus/`` and ``conf/head/``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FEATURE_MODES", "MASK_SPANS", "CorpusConfig", "TrainRun"]

FEATURE_MODES = ("online", "offline")
MASK_SPANS = ("fixed", "variable")


@dataclass(frozen=True)
class CorpusConfig:
    """What the target answers to make the training corpus (``conf/corpus/``).

    ``source``: ``toy`` (the built-in world's prompts), or a ``datasets``
    source as ``prepare.source`` takes it (``hf``, ``hf:<name>``, or a local
    parquet, arrow or ``save_to_disk`` path) read through the mapping's
    ``hub``, ``config``, ``split`` and ``columns`` (``image``, ``question``).
    ``greedy`` conversations are answered greedily and ``sampled`` more at
    temperature 1; ``heldout`` further ones, greedily, make the held-out loss.
    Each answer stops at ``max_new_tokens``. ``shard_size`` conversations make
    a shard, the unit a killed run resumes from.

    Toy only: ``long_share`` of the prompts are longform and as many carry up
    to ``context`` filler tokens. Datasets only: the question is the column's
    text, or a conversation's first user turn, put in ``prompt`` as
    ``{question}``.
    """

    name: str
    source: str
    greedy: int
    sampled: int
    heldout: int
    max_new_tokens: int
    seed: int
    shard_size: int
    long_share: float = 0.0
    context: int = 0
    hub: str | None = None
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    image: str | None = None
    question: str | None = None
    prompt: str = "{question}"


@dataclass(frozen=True)
class TrainRun:
    """A block head's shape and training run (``head.train``).

    ``features``: ``online`` (the frozen target runs inside each step; memory
    bounded by the batch) or ``offline`` (features written once to disk and
    streamed). Every ``save_every`` steps the run checkpoints; a killed run
    started again resumes from its last checkpoint. ``log_every`` steps go to
    dvclive; ``eval_every`` steps add a point to the held-out loss curve.
    """

    block_size: int
    layers: int
    steps: int
    mask_span: str
    lr: float
    seed: int
    features: str
    save_every: int
    log_every: int
    eval_every: int
