"""The toy world's configs: the target's size, its training, the head's corpus and
training. Plain dataclasses (no torch), so the pipeline's typed config
(:mod:`glance.pipeline.config`) is built from them and checked before anything
heavy loads. The pipeline's values live in ``conf/``; the defaults here serve
callers of the library alone."""

from __future__ import annotations

from dataclasses import dataclass, field

#: the toy target's model families (:mod:`glance.toy.families`)
FAMILIES = ("qwen3_vl", "qwen2_5_vl")


@dataclass(frozen=True)
class TargetSize:
    """The toy target's shape: text width, layers and heads, vision width and
    depth, and its model family (one of :data:`FAMILIES`)."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    vision_hidden: int = 64
    vision_depth: int = 2
    family: str = "qwen3_vl"

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family: expected one of {FAMILIES}; got {self.family!r}")


@dataclass(frozen=True)
class TrainConfig:
    """Target training settings. ``task_weights`` are for ``TASKS`` then the
    auxiliary ``transcribe`` drill, whose dense copying makes reading emerge
    sooner; they lean toward the reading tasks, which take longest to learn."""

    steps: int = 2000
    batch: int = 32
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    task_weights: list[float] = field(default_factory=lambda: [0.2, 0.15, 0.15, 0.15, 0.15, 0.2])
    #: every ``long_every``-th step is a batch of ``long_batch`` long sequences:
    #: half ``longform`` answers (about 600 tokens), half prompts with up to
    #: ``context`` filler tokens, so long outputs and long prompts stay in
    #: distribution (the bench's length curve and panel c)
    long_every: int = 4
    long_batch: int = 8
    context: int = 512
    #: training runs ``phases`` times ``steps`` steps, each phase a fresh
    #: optimizer and schedule (warm-up, cosine decay) on examples seeded by
    #: ``seed + phase``, continuing from the weights before it
    phases: int = 1
    #: the held-out loss (fixed batches drawn from another seed, the long ones
    #: included) every ``eval_every`` steps and at the end of each phase: 0 for none
    eval_every: int = 250
    heldout_batches: int = 8
    #: a saved toy target to start from (its reading), or ``None`` for a fresh
    #: model; a relative path is taken from the working directory
    init: str | None = None


@dataclass(frozen=True)
class HeadTrain:
    """A toy draft head's corpus and training (``conf/head/toy.yaml``).

    The corpus is the target's own answers, regenerated: ``greedy`` prompts
    answered greedily and ``sampled`` at temperature 1, up to
    ``max_new_tokens`` each, ``long_share`` of them longform answers and
    ``context_share`` with up to ``context`` filler tokens, and ``heldout`` greedy answers
    from another seed for the held-out loss. The head has ``layers`` layers and
    drafts blocks of ``block_size``; ``mask_span`` ``variable`` reveals a prefix
    of the block in half the steps, which ``extend_budget`` needs."""

    block_size: int
    layers: int
    steps: int
    mask_span: str
    lr: float
    greedy: int
    sampled: int
    long_share: float
    context: int
    heldout: int
    max_new_tokens: int
    seed: int
    context_share: float = 0.0

    def corpus(self) -> dict:
        """:func:`glance.toy.world.toy_corpus`'s keyword arguments."""
        keys = ("greedy", "sampled", "seed", "max_new_tokens", "long_share", "context")
        keys += ("context_share", "heldout")
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class EagleWindows:
    """The EAGLE-style head's training (``arms.train``): ``rows`` sequences
    per step, each a window of up to ``window`` anchors unrolled ``ttt``
    steps, for ``steps`` steps at learning rate ``lr``; left unset, steps and
    learning rate are the block head's (:class:`HeadTrain`), as is the seed."""

    rows: int
    window: int
    ttt: int
    steps: int | None = None
    lr: float | None = None
