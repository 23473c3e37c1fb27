"""The pipeline's typed config: built from ``conf/``, checked before any stage does work.

The schema is :class:`Config`, whose blocks are the library's own dataclasses
where the library has one (the toy world's :class:`~glance.toy.config.TargetSize`,
:class:`~glance.toy.config.TrainConfig` and :class:`~glance.toy.config.EagleWindows`,
and head training's :class:`CorpusConfig` and :class:`TrainRun`). :func:`build` merges the composed
config into it (OmegaConf structured configs: ``conf/`` and ``params.yaml`` stay
plain YAML that DVC composes without importing us), checks the ranges types
cannot say (:func:`check_ranges`), and returns the built :class:`Config`
object, which is what every stage receives. ``conf/`` holds the one set of
defaults: a key it leaves out is an error here, never a fallback to a
dataclass default. A bad value exits naming the key, the value and what is
allowed, in milliseconds, before any model loads.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from glance.toy.config import FAMILIES, EagleWindows, TargetSize, TrainConfig

#: the largest verify budget a stage accepts: the tree search is best-first over
#: ``budget`` nodes, and past this the verify pass is never worth its cost
MAX_BUDGET = 4095
TIMINGS = ("decode_only", "legacy")
TARGET_SOURCES = ("toy", "pretrained")
HEAD_SOURCES = ("train", "checkpoint")
#: the fewest measured prompts a row may have: its speedup and tau intervals
#: come from a paired bootstrap over prompts, which needs two
MIN_PROMPTS = 2
#: the most threads a stage accepts (a thread per core on the largest hosts)
MAX_THREADS = 256
#: seeds are numpy's and torch's: unsigned 32-bit
MAX_SEED = 2**32 - 1
#: the dtypes a target loads in (:func:`glance.targets.vl.load_target`): the
#: floating ones transformers computes in; an integer or float8 dtype fails
#: only after the weights are read
DTYPES = ("float32", "bfloat16", "float16", "float64")
#: a block head's block sizes, as the head loader accepts them
#: (:data:`glance.heads.block.BLOCK_SIZES`, which a test keeps in step)
BLOCK_SIZES = (2, 64)
#: the largest learning rate a run accepts: AdamW's step is about ``lr`` per
#: weight, so past 1 each step moves weights by more than their scale and the
#: loss goes to infinity or NaN
MAX_LR = 1.0
#: the most toy examples per task: their images are named ``0001.png`` to ``9999.png``
MAX_TOY_EXAMPLES = 9999


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

    Toy only: ``long_share`` of the prompts are longform and ``context_share``
    carry up to ``context`` filler tokens. Datasets only: the question is the column's
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
    context_share: float = 0.0
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
    rows: int = 16
    blocks_per_row: int = 4
    warmup: int = 50


@dataclass(frozen=True)
class ScorerRun:
    """The consistency scorer's shape and training run (``scorer``;
    :class:`glance.training.scorer.ScorerTrain` takes the same fields but the
    last two). Every ``save_every`` steps the run checkpoints; ``eval_every``
    steps add a point to the held-out loss curve."""

    rank: int
    top_k: int
    steps: int
    rows: int
    blocks_per_row: int
    lr: float
    warmup: int
    weight_decay: float
    seed: int
    save_every: int
    eval_every: int


#: head training's feature modes (:mod:`glance.training.features`) and mask spans
FEATURE_MODES = ("online", "offline")
MASK_SPANS = ("fixed", "variable")


@dataclass
class AutoCost:
    """``budget="auto"``'s fixed cost table (see :func:`auto_cost`)."""

    sizes: list[int] = MISSING
    verify_ms: list[float] = MISSING
    draft_ms: float = MISSING


@dataclass
class Target:
    name: str = MISSING
    source: str = MISSING  # toy or pretrained
    path: str | None = None
    revision: str | None = None
    dtype: str = "bfloat16"
    sha256: str | None = None
    retrain: bool = False
    size: TargetSize | None = None  # the toy target's, for a retraining
    train: TrainConfig | None = None
    heldout: int = 10
    auto_cost: AutoCost | None = None


@dataclass
class Head:
    name: str = MISSING
    source: str = MISSING  # train or checkpoint
    path: str | None = None
    train: TrainRun | None = None  # a trained head's run


@dataclass
class Task:
    name: str = MISSING
    file: str = MISSING
    max_new_tokens: int = MISSING


@dataclass
class Decode:
    bootstrap: int = MISSING
    top_p: float = MISSING
    top_k: int = MISSING
    sampled: list[float] = MISSING
    extend_row: int = MISSING
    auto_row: bool = MISSING
    scored_row: bool = MISSING


@dataclass
class Paths:
    data: str = MISSING
    target: str = MISSING
    corpus: str = MISSING
    head: str = MISSING
    scorer: str = MISSING
    checkpoints: str = MISSING
    results: str = MISSING
    figures: str = MISSING


@dataclass
class Prepare:
    source: str = MISSING
    n: int = MISSING
    seed: int = MISSING
    dataset: str | None = MISSING
    split: str | None = MISSING
    limit: int | None = MISSING
    revision: str | None = MISSING


@dataclass
class Audit:
    n: int = MISSING


@dataclass
class Sweep:
    task: str = MISSING
    budgets: list[Any] = MISSING
    n: int = MISSING


@dataclass
class ContextSweep:
    task: str = MISSING
    lengths: list[int] = MISSING
    n: int = MISSING


@dataclass
class SeedCheck:
    seeds: list[int] = MISSING
    n: int = MISSING


@dataclass
class Bench:
    tasks: list[str] = MISSING
    n: int = MISSING
    lookup_tokens: int = MISSING
    lengths: list[int] = MISSING
    length_task: str = MISSING
    length_n: int = MISSING
    cost_task: str = MISSING
    cost_n: int = MISSING


@dataclass
class Assistant:
    path: str = MISSING
    depth: int = MISSING
    size: TargetSize = MISSING
    train: TrainConfig = MISSING


@dataclass
class Arms:
    path: str = MISSING
    tasks: list[str] = MISSING
    n: int = MISSING
    budget: int = MISSING
    width: int = MISSING
    depth: int = MISSING
    rules: list[str] = MISSING
    budgets: list[int] = MISSING
    train: EagleWindows = MISSING
    assistant: Assistant = field(default_factory=Assistant)


@dataclass
class Numerics:
    """:class:`glance.core.numerics.Numerics` without its ``threads`` (the top-level key)."""

    pin: bool = MISSING
    aten_cpu_capability: str = MISSING
    mkl_cbwr: str = MISSING
    onednn_max_cpu_isa: str = MISSING
    openblas_coretype: str = MISSING
    npy_disable_cpu_features: str = MISSING


@dataclass
class Config:
    target: Target = field(default_factory=Target)
    corpus: CorpusConfig | None = None
    head: Head = field(default_factory=Head)
    scorer: ScorerRun | None = None
    task: Task | None = None
    seed: int = MISSING
    device: str = MISSING
    dtype: str = MISSING
    threads: int = MISSING
    dist_timeout: int = MISSING
    numerics: Numerics = field(default_factory=Numerics)
    decode: Decode = field(default_factory=Decode)
    budget: Any = MISSING
    branch_k: int = MISSING
    timing: str = MISSING
    n: int = MISSING
    max_new_tokens: int | None = MISSING
    chain: bool = MISSING
    context: int = MISSING
    temperature: float = MISSING
    extend_budget: int = MISSING
    paths: Paths = field(default_factory=Paths)
    out_dir: str | None = MISSING
    tasks: list[str] = MISSING
    prepare: Prepare = field(default_factory=Prepare)
    audit: Audit = field(default_factory=Audit)
    sweep: Sweep = field(default_factory=Sweep)
    context_sweep: ContextSweep = field(default_factory=ContextSweep)
    seed_check: SeedCheck = field(default_factory=SeedCheck)
    bench: Bench = field(default_factory=Bench)
    arms: Arms = field(default_factory=Arms)


def _fail(key: str, value, allowed: str):
    raise SystemExit(f"{key}: expected {allowed}; got {value!r}")


def integer(key: str, value, low: int, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in range, else exit naming ``key``."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        _fail(
            key, value, f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
        )
    return int(value)


def budget(key: str, value) -> int | str:
    """A verify budget: an int in ``1..MAX_BUDGET`` or ``"auto"``."""
    if value == "auto":
        return "auto"
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_BUDGET
    if not ok:
        _fail(key, value, f'an integer in 1..{MAX_BUDGET} or "auto"')
    return int(value)


def number(key: str, value, low: float, high: float = float("inf"), open_low=False) -> float:
    """A finite real ``value`` in ``[low, high]`` (``(low, high]`` when ``open_low``);
    the message names ``high`` when it is finite."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = (
        ok
        and value < float("inf")
        and (value > low if open_low else value >= low)
        and value <= high
    )
    if not ok:
        if high < float("inf"):
            span = f"in ({low}, {high}]" if open_low else f"in [{low}, {high}]"
        else:
            span = f"> {low}" if open_low else f">= {low}"
        _fail(key, value, f"a finite number {span}")
    return float(value)


def check_types(cfg: DictConfig) -> DictConfig:
    """Merge ``cfg`` into the schema and return the typed result: a wrong type,
    an unknown key or a missing one exits naming the key, the value and the
    type the schema wants."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), plain)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        message = str(err).splitlines()[0]
        kind = re.search(r"converted to (\w+)|not a valid (\w+)", message)
        if kind and hasattr(err, "value"):
            wanted = (kind.group(1) or kind.group(2)).lower()
            raise SystemExit(
                f"{key}: expected {_ARTICLE.get(wanted, wanted)}; got {err.value!r}"
            ) from None
        raise SystemExit(f"{key}: {message}") from None
    # the defaults live in conf/ alone: the schema has none to fall back on
    missing = sorted(OmegaConf.missing_keys(merged))
    if missing:
        raise SystemExit(f"{missing[0]}: expected a value (conf/config.yaml sets every key)")
    for key, kind in _LIBRARY_BLOCKS:
        given = OmegaConf.select(OmegaConf.create(plain), key)
        if given is None:
            continue
        absent = [f.name for f in fields(kind) if f.name not in given]
        if absent:
            raise SystemExit(
                f"{key}.{absent[0]}: expected a value (conf/ sets every key of {kind.__name__})"
            )
    return merged


#: blocks typed by library dataclasses that carry defaults of their own:
#: conf/ must still give every key, so that it holds the one set of values
_LIBRARY_BLOCKS = (
    ("target.size", TargetSize),
    ("target.train", TrainConfig),
    ("corpus", CorpusConfig),
    ("head.train", TrainRun),
    ("arms.assistant.size", TargetSize),
    ("arms.assistant.train", TrainConfig),
)


#: keys conf/ leaves as ``???``, and what the command line must give
_MISSING_WHY = {"head.path": "the folder of a trained head (head=checkpoint head.path=...)"}

#: the lists a stage iterates as a set of runs or rows: each entry once
RUN_LISTS = (
    "tasks",
    "decode.sampled",
    "sweep.budgets",
    "context_sweep.lengths",
    "seed_check.seeds",
    "bench.tasks",
    "bench.lengths",
    "arms.tasks",
    "arms.rules",
    "arms.budgets",
)
#: of those, the ones where empty means "none of these rows"
MAY_BE_EMPTY = ("decode.sampled", "arms.rules")


def distinct(key: str, values, empty: bool = False) -> list:
    """``values`` as a list if it is one with no entry twice (and not empty,
    unless ``empty``), else exit naming ``key``: a repeated entry would run and
    write the same row twice, an empty list a stage with nothing in it."""
    values = list(values) if isinstance(values, list | tuple | ListConfig) else values
    if not isinstance(values, list) or (not values and not empty):
        _fail(key, values, "a list of distinct entries" + ("" if empty else ", at least one"))
    seen = set()
    for i, v in enumerate(values):
        if repr(v) in seen:
            _fail(f"{key}[{i}]", v, "each entry once (it is already in the list)")
        seen.add(repr(v))
    return values


_ARTICLE = {
    "integer": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
}


def check_ranges(cfg: DictConfig) -> None:
    """The ranges the types cannot say (see the pipeline page's parameter notes)."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:  # a ``???`` in conf/ that the command line left unset
        key = missing[0]
        _fail(key, "???", _MISSING_WHY.get(key, "a value (conf/ leaves it to the command line)"))
    d = cfg.decode
    for key in ("target.dtype", "dtype"):
        if OmegaConf.select(cfg, key) not in DTYPES:
            _fail(key, OmegaConf.select(cfg, key), f"a dtype the target loads in, one of {DTYPES}")
    for key, sources in (("target.source", TARGET_SOURCES), ("head.source", HEAD_SOURCES)):
        if OmegaConf.select(cfg, key) not in sources:
            _fail(key, OmegaConf.select(cfg, key), " or ".join(sources))
    if cfg.target.source == "pretrained" and not cfg.target.path:
        _fail("target.path", cfg.target.path, "a hub name or a local checkpoint folder")
    budget("budget", cfg.budget)
    for key, low in (("branch_k", 1), ("n", MIN_PROMPTS), ("context", 0)):
        integer(key, cfg[key], low)
    integer("seed", cfg.seed, 0, MAX_SEED)
    integer("prepare.seed", cfg.prepare.seed, 0, MAX_SEED)
    for i, seed in enumerate(cfg.seed_check.seeds):
        integer(f"seed_check.seeds[{i}]", seed, 0, MAX_SEED)
    if not cfg.tasks:
        _fail("tasks", list(cfg.tasks), "at least one task")
    for key in RUN_LISTS:
        distinct(key, OmegaConf.select(cfg, key), empty=key in MAY_BE_EMPTY)
    for key in ("tasks", "bench.tasks", "arms.tasks"):
        for i, name in enumerate(OmegaConf.select(cfg, key) or ()):
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                _fail(f"{key}[{i}]", name, "a task name (letters, digits, _ or -)")
    integer("extend_budget", cfg.extend_budget, 0, MAX_BUDGET)
    if cfg.max_new_tokens is not None:
        integer("max_new_tokens", cfg.max_new_tokens, 1)
    if cfg.timing not in TIMINGS:
        _fail("timing", cfg.timing, f"one of {TIMINGS}")
    number("temperature", cfg.temperature, 0)
    for i, t in enumerate(d.sampled):
        number(f"decode.sampled[{i}]", t, 0, open_low=True)
    number("decode.top_p", d.top_p, 0, 1, open_low=True)
    integer("decode.top_k", d.top_k, 0)
    integer("decode.bootstrap", d.bootstrap, 1)
    integer("decode.extend_row", d.extend_row, 0, MAX_BUDGET)
    integer("threads", cfg.threads, 0, MAX_THREADS)
    integer("dist_timeout", cfg.dist_timeout, 1, 24 * 3600)
    numerics(cfg)
    integer("prepare.n", cfg.prepare.n, 1, MAX_TOY_EXAMPLES)
    dataset = cfg.prepare.dataset
    if dataset is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", str(dataset)):
        _fail(
            "prepare.dataset", dataset, "a mapping name in conf/dataset/ (letters, digits, _ or -)"
        )
    if cfg.prepare.limit is not None:
        integer("prepare.limit", cfg.prepare.limit, 1)
    integer("audit.n", cfg.audit.n, 1)
    for i, b in enumerate(cfg.sweep.budgets):
        budget(f"sweep.budgets[{i}]", b)
    integer("sweep.n", cfg.sweep.n, MIN_PROMPTS)
    for i, n in enumerate(cfg.context_sweep.lengths):
        integer(f"context_sweep.lengths[{i}]", n, 0)
    integer("context_sweep.n", cfg.context_sweep.n, MIN_PROMPTS)
    integer("seed_check.n", cfg.seed_check.n, MIN_PROMPTS)
    integer("bench.n", cfg.bench.n, MIN_PROMPTS)
    for key in ("length_n", "cost_n", "lookup_tokens"):
        integer(f"bench.{key}", cfg.bench[key], 1)
    for i, n in enumerate(cfg.bench.lengths):
        integer(f"bench.lengths[{i}]", n, 1)
    integer("arms.n", cfg.arms.n, MIN_PROMPTS)
    for key in ("width", "depth"):
        integer(f"arms.{key}", cfg.arms[key], 1)
    integer("arms.assistant.depth", cfg.arms.assistant.depth, 1)
    integer("arms.budget", cfg.arms.budget, 1, MAX_BUDGET)
    for i, b in enumerate(cfg.arms.budgets):
        integer(f"arms.budgets[{i}]", b, 1, MAX_BUDGET)
    for key in ("rows", "window", "ttt"):
        integer(f"arms.train.{key}", cfg.arms.train[key], 1)
    if cfg.arms.train.get("steps") is not None:
        integer("arms.train.steps", cfg.arms.train.steps, 1)
    if cfg.arms.train.get("lr") is not None:
        number("arms.train.lr", cfg.arms.train.lr, 0, MAX_LR, open_low=True)
    for where in ("target.size", "arms.assistant.size"):
        size = OmegaConf.select(cfg, where)
        for key, n in (size or {}).items():
            if key == "family":
                if n not in FAMILIES:
                    _fail(f"{where}.family", n, f"one of {', '.join(FAMILIES)}")
            else:
                integer(f"{where}.{key}", n, 1)
    if "task" in cfg and cfg.task is not None:
        integer("task.max_new_tokens", cfg.task.max_new_tokens, 1)
    auto_cost(cfg)
    for key in ("target.train", "arms.assistant.train"):
        toy_training(key, OmegaConf.select(cfg, key))
    # a backbone to start from must be there before anything trains: the
    # target's only when it retrains, the assistant's whenever its stage runs
    for key, used in (
        ("target.train", OmegaConf.select(cfg, "target.retrain")),
        ("arms.assistant.train", True),
    ):
        init = OmegaConf.select(cfg, f"{key}.init")
        if used and init is not None and not (Path(str(init)) / "model.safetensors").is_file():
            _fail(
                f"{key}.init", init, "a saved toy target folder (with model.safetensors), or null"
            )
    check_training(cfg)
    check_scorer(cfg)


def check_training(cfg) -> None:
    """The corpus recipe and the head's training run."""
    c = cfg.get("corpus")
    if c is not None:
        for key in ("greedy", "sampled", "heldout", "context"):
            integer(f"corpus.{key}", c[key], 0)
        if c.greedy + c.sampled < 1:
            _fail("corpus.greedy", c.greedy, "at least one training answer (greedy + sampled)")
        integer("corpus.max_new_tokens", c.max_new_tokens, 1)
        integer("corpus.seed", c.seed, 0, MAX_SEED - 2)
        if integer("corpus.shard_size", c.shard_size, 32) % 32:
            _fail("corpus.shard_size", c.shard_size, "a multiple of 32 (the answering batch)")
        number("corpus.long_share", c.long_share, 0, 1)
        number("corpus.context_share", c.context_share, 0, 1)
        if c.long_share + c.context_share > 1:
            _fail("corpus.context_share", c.context_share, "at most 1 - corpus.long_share")
        if c.source != "toy":
            for key in ("hub", "split", "image", "question"):
                if not c[key]:
                    _fail(f"corpus.{key}", c[key], f"a value for the datasets source {c.source!r}")
            if "{question}" not in str(c.prompt):
                _fail("corpus.prompt", c.prompt, "a template with {question}")
    h = cfg.head
    if h.source == "checkpoint" and not OmegaConf.select(cfg, "head.path", default=None):
        _fail("head.path", h.path, "the folder of a trained head (head=checkpoint)")
    if h.source != "train":
        return
    if h.get("train") is None:
        _fail("head.train", None, "the training run of a trained head (conf/head/train.yaml)")
    t = h.train
    integer("head.train.block_size", t.block_size, *BLOCK_SIZES)
    for key, low in (("layers", 1), ("steps", 1), ("log_every", 1), ("eval_every", 1),
                     ("save_every", 0), ("rows", 1), ("blocks_per_row", 1),
                     ("warmup", 0)):  # fmt: skip
        integer(f"head.train.{key}", t[key], low)
    integer("head.train.seed", t.seed, 0, MAX_SEED)
    number("head.train.lr", t.lr, 0, MAX_LR, open_low=True)
    for key, allowed in (("features", FEATURE_MODES), ("mask_span", MASK_SPANS)):
        if t[key] not in allowed:
            _fail(f"head.train.{key}", t[key], " or ".join(allowed))


def toy_training(key: str, t) -> None:
    """A toy model's training run (:class:`~glance.toy.config.TrainConfig`) at
    ``key``, when given."""
    if t is None:
        return
    for name, low in (("steps", 1), ("batch", 1), ("warmup", 0), ("long_every", 1),
                      ("long_batch", 1), ("context", 0), ("phases", 1), ("eval_every", 0),
                      ("heldout_batches", 1)):  # fmt: skip
        integer(f"{key}.{name}", t[name], low)
    integer(f"{key}.seed", t.seed, 0, MAX_SEED)
    number(f"{key}.lr", t.lr, 0, MAX_LR, open_low=True)
    number(f"{key}.weight_decay", t.weight_decay, 0, 1)
    for i, w in enumerate(t.task_weights):
        number(f"{key}.task_weights[{i}]", w, 0)
    if not sum(t.task_weights) > 0:
        _fail(f"{key}.task_weights", list(t.task_weights), "weights with a positive sum")


def check_scorer(cfg) -> None:
    """The consistency scorer's training run (``scorer``), when given."""
    s = cfg.get("scorer")
    if s is None:
        return
    for key, low in (("rank", 1), ("top_k", 2), ("steps", 1), ("rows", 1), ("blocks_per_row", 1),
                     ("warmup", 0), ("save_every", 0), ("eval_every", 1)):  # fmt: skip
        integer(f"scorer.{key}", s[key], low)
    integer("scorer.seed", s.seed, 0, MAX_SEED)
    number("scorer.lr", s.lr, 0, MAX_LR, open_low=True)
    # AdamW decays each weight by lr * weight_decay a step: past 1 it flips sign
    number("scorer.weight_decay", s.weight_decay, 0, 1)


def auto_cost(cfg):
    """``target.auto_cost`` checked, as ``(sizes, verify_ms, draft_ms)`` (the
    fields of a :class:`glance.core.budget.VerifyCost`), or ``None`` (measure on
    the machine), or exit naming the bad key. Plain values, so that the stages
    that only check the config do not depend on the planner's module."""
    table = cfg.target.auto_cost
    if table is None:
        return None
    key = "target.auto_cost"
    sizes = [integer(f"{key}.sizes[{i}]", n, 1, MAX_BUDGET) for i, n in enumerate(table.sizes)]
    ms = [
        number(f"{key}.verify_ms[{i}]", t, 0, open_low=True) for i, t in enumerate(table.verify_ms)
    ]
    draft = number(f"{key}.draft_ms", table.draft_ms, 0)
    if not sizes or len(ms) != len(sizes):
        _fail(f"{key}.verify_ms", list(ms), f"one time per size ({len(sizes)}), at least one")
    if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        _fail(f"{key}.sizes", sizes, "strictly ascending sizes")
    return tuple(sizes), tuple(ms), draft


def numerics(cfg):
    """The run's :class:`glance.core.numerics.Numerics`, or exit naming the bad key."""
    from glance.core.numerics import Numerics as Pinned

    block = cfg.numerics
    values = OmegaConf.to_container(block) if isinstance(block, DictConfig) else asdict(block)
    try:
        return Pinned.from_config(values, cfg.threads)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def check_config(cfg: DictConfig) -> None:
    """Types, then ranges; exits naming the first bad key."""
    build(cfg)


def build(cfg: DictConfig) -> Config:
    """The composed ``cfg`` checked (types, then ranges) and built into a
    :class:`Config`, whose blocks are the library's dataclasses."""
    merged = check_types(cfg)
    check_ranges(cfg)  # on the values as given: the merge would coerce "3" to 3
    return OmegaConf.to_object(merged)


def register(name: str = "glance_schema") -> None:
    """Store :class:`Config` in Hydra's ConfigStore under ``name``, for an
    application of one's own that composes ``conf/`` against the same schema
    (``defaults: [glance_schema, _self_]``)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=name, node=Config)
