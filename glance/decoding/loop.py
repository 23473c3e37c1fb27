"""The decoding loops: the greedy oracle, the head as a chain, and the budget tree.

All three share one interface and return the same :class:`Stats`. Batch size
is 1: a batch larger than 1 is refused.

One round of :func:`generate`, with ``L`` tokens in the target's cache and the
last committed token (the *root*) at sequence index ``L``:

1. one head pass over ``[root, MASK x depth]`` with the new context features;
2. each offset's top-``branch_k`` log-probs become a budget tree (``glance.core.tree``);
3. one target pass over ``[root, nodes]`` with the ancestor-only mask and
   positions ``L + depth``;
4. the walk commits the longest path the target itself takes, plus the target's
   next token after it (the bonus);
5. the target cache keeps past + root + accepted nodes; rejected nodes go;
6. the verify pass's hidden states at root + accepted nodes are the next
   round's context features.

The round is made of parts, each usable alone: a :class:`~glance.drafters.protocol.Drafter`
proposes (step 1); a planner turns the proposal into a tree with
``glance.core.tree.search_tree`` and ``first_nodes`` (step 2, fixed or ``"auto"``
budget, plus the optional extension spliced in by the drafter); :func:`verify`
runs the target pass on :func:`verify_inputs` (step 3); :func:`walk` picks the
path (step 4) and :func:`commit` keeps it in the :class:`~glance.decoding.cache.KVCache`
and hands its hidden states to the drafter (steps 5 and 6). :func:`speculate`
runs them for any drafter; :func:`generate` and :func:`chain_generate` wrap a
DFlash head in :class:`~glance.drafters.block.BlockDrafter`.

Timing (``timing=``): ``"decode_only"`` opens the clock after the prefill and
after the first round's draft pass; ``"legacy"`` opens it before the prefill.
Both synchronise the device before each read; a run without stats reads no
clock at all (except ``budget="auto"``, which weighs the draft pass's time).
``ms_per_token`` divides the window by every new token, the prefill's
included, as dflash does.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from glance.core.budget import AUTO_SIZES, AcceptanceScale, VerifyCost, VerifyCosts, choose_budget
from glance.core.tree import CandidateTree, accept_path, first_nodes, search_tree, tree_mask
from glance.decoding.cache import KVCache
from glance.decoding.sampling import Sampling, Uniforms, draw
from glance.drafters.block import BlockDrafter
from glance.drafters.protocol import Drafter, refuse_auto
from glance.heads.block import check_head_extends
from glance.targets.vl import StreamPositions, VisionPositions, text_config

__all__ = [
    "MAX_BUDGET",
    "Cursor",
    "Options",
    "Round",
    "Stats",
    "chain_generate",
    "commit",
    "generate",
    "greedy_generate",
    "measure_verify_cost",
    "speculate",
    "verify",
    "verify_inputs",
    "walk",
]

TIMINGS = ("decode_only", "legacy")
GREEDY = Sampling()
#: the ``input_ids`` dtypes a request accepts
INPUT_DTYPES = (torch.int64, torch.int32)
#: the largest ``budget`` and ``extend_budget`` a request accepts: a verify pass
#: over ``N`` nodes allocates an ``(N+1) x (past+N+1)`` mask, and past this a
#: pass is never worth its cost (the stages cap their configs at the same value)
MAX_BUDGET = 4095


#: why a round's accepted run ended (:attr:`Round.stop`); all but a rejection
#: are censored observations of the run's length
STOPS = ("rejection", "depth", "end", "leaf")


def _stop(tree, path, cap: int, committed: int) -> str:
    """:attr:`Round.stop` of a drafting round: its ``path`` through ``tree``,
    its depth limit ``cap`` and the tokens it ``committed``."""
    accepted = len(path)
    if committed <= accepted:  # the output ended at or before the last accepted token
        return "end"
    if accepted >= cap:
        return "depth"
    last = int(path[-1]) if accepted else -1
    return "rejection" if bool((tree.parents == last).any()) else "leaf"


@dataclass(frozen=True)
class Round:
    """One decoding round.

    ``accepted``: drafted tokens the target accepted (no bonus); ``committed``:
    tokens the round added to the output (accepted + bonus, cut at a stop token
    or ``max_new_tokens``); ``entropy``: the target's next-token entropy at the
    root, in nats; ``tree_size``: nodes verified besides the root; ``draft_ms``,
    ``verify_ms``: the two forward passes; ``host_ms``: everything else, of
    which ``tree_ms`` builds the tree, its mask and the verify inputs (the rest
    is the walk, cache compaction and bookkeeping). ``cap``: the round's
    effective cap, the most drafted tokens it could have accepted: the tree's
    depth limit (the block, plus an extension), or fewer when the output ends
    (stop token or ``max_new_tokens``) sooner. ``stop``: why the round's
    accepted run ended (:data:`STOPS`): ``"rejection"`` (the target took
    another token than every drafted child), ``"depth"`` (it accepted down to
    the depth limit), ``"end"`` (the output ended within the run) or
    ``"leaf"`` (it accepted down to a leaf shallower than the cap: the tree
    ran out of candidates). Only a rejection is a failure; the other three
    rounds are censored (``accepted >= cap`` for depth and end, not for a leaf).
    """

    accepted: int
    committed: int
    entropy: float
    tree_size: int
    draft_ms: float
    verify_ms: float
    host_ms: float
    tree_ms: float = 0.0
    cap: int = 0
    stop: str = ""


@dataclass(frozen=True)
class Stats:
    """A run's figures. ``tau`` pools rounds: committed tokens over rounds."""

    new_tokens: int
    tau: float
    ms_per_token: float
    prefill_ms: float
    timing: str
    rounds: tuple[Round, ...]

    def to_dict(self) -> dict:
        return asdict(self)


class Clock:
    """Seconds since an arbitrary origin, read after synchronising the device
    (CUDA runs asynchronously). Off, it reads 0 without touching the device,
    so a run without stats pays nothing for timing."""

    def __init__(self, device: torch.device, on: bool = True):
        self.on, self.device = on, device
        self.sync = on and device.type == "cuda"

    def __call__(self) -> float:
        if not self.on:
            return 0.0
        if self.sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


class _Laps:
    """One round's clock marks, and the :class:`Round` they time."""

    def __init__(self, clock: Clock):
        self.clock, self.at = clock, {}

    def mark(self, name: str) -> float:
        self.at[name] = t = self.clock()
        return t

    def ms(self, a: str, b: str) -> float:
        return (self.at[b] - self.at[a]) * 1e3 if a in self.at and b in self.at else 0.0

    def round(self, accepted: int, committed: int, tree_size: int) -> Round:
        extend = self.ms("planned", "extended")
        between = self.ms("draft", "tree")
        return Round(
            accepted=accepted,
            committed=committed,
            entropy=float("nan"),
            tree_size=tree_size,
            draft_ms=self.ms("start", "draft") + extend,
            verify_ms=self.ms("tree", "verify"),
            host_ms=between + self.ms("verify", "end") - extend,
            tree_ms=between - extend,
        )


class _Entropies:
    """The rounds' root entropies, for :class:`Stats` only. Rows are kept and
    reduced 64 at a time, so a round pays for a row copy rather than a softmax;
    the last batch is reduced after the timed window closes."""

    BATCH = 64

    def __init__(self, on: bool, copy: bool = False):
        self.on, self.copy, self.rows, self.values = on, copy, [], []

    def add(self, row: torch.Tensor) -> None:
        if self.on:
            self.rows.append(row.clone() if self.copy else row)
            if len(self.rows) == self.BATCH:
                self.flush()

    def flush(self) -> None:
        if self.rows:
            logp = torch.log_softmax(torch.stack(self.rows).float(), dim=-1)
            self.values += (-(logp.exp() * logp).sum(-1)).tolist()
            self.rows = []

    def fill(self, rounds: list) -> list:
        """``rounds`` with their entropies (NaN when stats are off)."""
        if not self.on:
            return rounds
        self.flush()
        return [replace(r, entropy=e) for r, e in zip(rounds, self.values, strict=True)]


def _check_request(target, input_ids, max_new_tokens, positions, timing):
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor; got {type(input_ids).__name__}")
    # Embedding lookups take int64 or int32 only, and the output appends new ids
    # in the prompt's dtype: bool, uint8 and the other narrow types would pass
    # the range check below and fail (or wrap) mid-decode.
    if input_ids.dtype not in INPUT_DTYPES:
        raise TypeError(
            f"input_ids must hold integer token ids; got dtype {input_ids.dtype} "
            "(expected torch.int64 or torch.int32)"
        )
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (1, n); got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"batch size must be 1; got input_ids of batch {input_ids.shape[0]}")
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids must hold at least one token")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an int >= 1; got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}; got {timing!r}")
    vocab = text_config(target).vocab_size
    outside = input_ids[(input_ids < 0) | (input_ids >= vocab)]
    if outside.numel():
        raise ValueError(
            f"input_ids hold token id {int(outside[0])}, outside the target's vocabulary "
            f"[0, {vocab})"
        )
    limit = text_config(target).max_position_embeddings
    if input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(
            f"prompt of {input_ids.shape[1]} tokens + max_new_tokens {max_new_tokens} exceeds "
            f"the target's max_position_embeddings {limit}"
        )
    image_token = getattr(target.config, "image_token_id", None)
    if positions is None:
        positions = StreamPositions()
    if (
        image_token is not None
        and not isinstance(positions, VisionPositions)
        and bool((input_ids == image_token).any())
    ):
        raise ValueError(
            "the prompt holds image tokens but positions is not a VisionPositions; "
            "pass positions=VisionPositions(pixel_values, image_grid_thw)"
        )
    return input_ids.to(target.device), positions


def _stops(stop_token_ids, target) -> frozenset[int]:
    """``stop_token_ids`` (an int, or an iterable of ints) checked against the
    target's vocabulary."""
    if stop_token_ids is None:
        return frozenset()
    ids = [stop_token_ids] if isinstance(stop_token_ids, int | np.integer) else stop_token_ids
    if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
        raise TypeError(f"stop_token_ids must be an int or a list of ints; got {stop_token_ids!r}")
    ids = list(ids)
    bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int | np.integer)]
    if bad:
        raise TypeError(f"stop_token_ids must be ints; got {bad[0]!r} in {stop_token_ids!r}")
    vocab = text_config(target).vocab_size
    outside = [int(t) for t in ids if not 0 <= int(t) < vocab]
    if outside:
        raise ValueError(
            f"stop_token_ids {outside} lie outside the target's vocabulary [0, {vocab})"
        )
    return frozenset(int(t) for t in ids)


def _uniforms(sampling: Sampling, generator, device):
    """The request's uniforms (``None`` when greedy); ``generator`` must be a
    ``torch.Generator`` or ``None``."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None; got {type(generator).__name__}"
        )
    return None if sampling.greedy else Uniforms(generator, device)


def _cut(tokens: list[int], room: int, stops: frozenset[int]) -> tuple[list[int], bool]:
    """Tokens that fit in ``room``, ending at the first stop token; and whether to stop."""
    for i, token in enumerate(tokens[:room]):
        if token in stops:
            return tokens[: i + 1], True
    return tokens[:room], len(tokens) >= room


@dataclass
class _Request:
    """A checked request and what its run has produced so far."""

    input_ids: torch.Tensor
    positions: object
    options: Options
    stops: frozenset
    uniforms: Uniforms | None
    clock: Clock
    new: list = field(default_factory=list)
    rounds: list = field(default_factory=list)

    @property
    def room(self) -> int:
        """New tokens still allowed."""
        return self.options.max_new_tokens - len(self.new)

    def finish(self, prefill_ms: float, window_s: float):
        ids = self.input_ids
        out = torch.cat([ids[0].cpu(), torch.tensor(self.new, dtype=ids.dtype)])[None]
        if not self.options.return_stats:
            return out
        rounds = self.rounds
        stats = Stats(
            new_tokens=len(self.new),
            tau=sum(r.committed for r in rounds) / len(rounds) if rounds else float("nan"),
            ms_per_token=window_s * 1e3 / len(self.new),
            prefill_ms=prefill_ms,
            timing=self.options.timing,
            rounds=tuple(rounds),
        )
        return out, stats


def _next(logits: torch.Tensor, sampling: Sampling, uniforms) -> int:
    """One token from one row of logits: argmax, or a draw with the next uniform."""
    if uniforms is None:
        return int(logits.argmax())
    token = int(draw(sampling.probs(logits[None]), uniforms.peek(1))[0])
    uniforms.advance(1)
    return token


def walk(tree: CandidateTree, logits: torch.Tensor, sampling: Sampling, uniforms):
    """The accepted node indices and the bonus token, from the verify pass's
    ``(1 + N, V)`` logits (row 0: the root).

    Each row's choice is the target's own: its argmax, or a draw with the
    uniform of the row's depth (the walk reaches a node at depth ``d`` as its
    ``d``-th step). The walk follows the choices from the root while a child
    carries them; see ``glance.decoding.sampling`` for why that is exact.
    """
    if uniforms is None:
        choice = logits.argmax(dim=-1).cpu().numpy()
    else:
        u = uniforms.peek(int(tree.depths.max(initial=0)) + 1)
        rows = torch.from_numpy(np.concatenate(([0], tree.depths))).to(u.device)
        choice = draw(sampling.probs(logits), u[rows]).cpu().numpy()
    path = accept_path(tree, choice)
    if uniforms is not None:
        uniforms.advance(len(path) + 1)
    return path, int(choice[path[-1] + 1 if len(path) else 0])


def _count(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int, checked to be an integer in ``[low, high]``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an int {bounds}; got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Options:
    """How one request decodes (checked on creation).

    ``max_new_tokens``: exact cap on new tokens, ``>= 1``. ``budget``: tree
    nodes verified per round besides the root, ``1..MAX_BUDGET`` (4095), or
    ``"auto"``.
    ``stop_token_ids``: the output ends right after the first of these.
    ``timing``: ``"decode_only"`` or ``"legacy"``. ``sampling``: greedy, or
    temperature with top-k and top-p. ``extend_budget``: 0 (off) or up to this
    many nodes past the block per round, at most ``MAX_BUDGET``.
    ``return_stats``: also return :class:`Stats`. ``accept``: ``"exact"`` (the
    lossless walk, the default) or, by name only, one of the LOSSY rules of
    ``glance.decoding.relaxed.RULES`` (greedy only), whose output is not the target's.
    """

    max_new_tokens: int
    budget: int | str = "auto"
    stop_token_ids: object = None
    timing: str = "decode_only"
    sampling: Sampling = GREEDY
    extend_budget: int = 0
    return_stats: bool = False
    accept: str = "exact"

    def __post_init__(self):
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ValueError(f"max_new_tokens must be an int >= 1; got {self.max_new_tokens!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")
        # Both caps are checked here, before any tree or mask is allocated.
        if self.budget != "auto":
            try:
                _count("budget", self.budget, 1, MAX_BUDGET)
            except ValueError:
                raise ValueError(
                    f'budget must be an int in [1, {MAX_BUDGET}] (MAX_BUDGET) or "auto"; '
                    f"got {self.budget!r}"
                ) from None
        _count("extend_budget", self.extend_budget, 0, MAX_BUDGET)
        if self.timing not in TIMINGS:
            raise ValueError(f"timing must be one of {TIMINGS}; got {self.timing!r}")
        if self.accept != "exact":
            from glance.decoding.relaxed import RULES

            if self.accept not in RULES:
                raise ValueError(
                    f'accept must be "exact" or a lossy rule of {RULES}; got {self.accept!r}'
                )
            if not self.sampling.greedy:
                raise ValueError(f"accept={self.accept!r} is a greedy rule; temperature must be 0")


@dataclass
class Cursor:
    """Where a request stands: ``root``, the last committed token, not yet in
    the target's cache, sits at sequence index ``length``; ``positions`` and
    ``delta`` turn sequence indices into the target's position ids."""

    root: int
    length: int
    positions: object
    delta: int


def _request(target, input_ids, options: Options, positions, generator) -> _Request:
    input_ids, positions = _check_request(
        target, input_ids, options.max_new_tokens, positions, options.timing
    )
    on = options.return_stats or options.budget == "auto"  # auto weighs the draft's time
    return _Request(
        input_ids,
        positions,
        options,
        _stops(options.stop_token_ids, target),
        _uniforms(options.sampling, generator, target.device),
        Clock(target.device, on),
    )


@torch.inference_mode()
def greedy_generate(
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    positions=None,
    *,
    stop_token_ids=None,
    timing: str = "decode_only",
    return_stats: bool = False,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator=None,
):
    """Plain autoregression with a KV cache: the oracle. Greedy at temperature
    0; otherwise one draw per token from the processed distribution
    (``glance.decoding.sampling``), with uniforms from ``generator``.

    Returns ``(1, n + new)`` token ids (prompt included) on the CPU, and with
    ``return_stats`` also :class:`Stats` with one round per token.
    """
    sampling = Sampling(temperature, top_p, top_k)
    options = Options(
        max_new_tokens,
        1,
        stop_token_ids=stop_token_ids,
        timing=timing,
        sampling=sampling,
        return_stats=return_stats,
    )
    req = _request(target, input_ids, options, positions, generator)
    device, clock = target.device, req.clock
    cache = KVCache(target.config)

    start = clock()
    kwargs, delta = req.positions.prefill(target, req.input_ids)
    out = target(
        input_ids=req.input_ids,
        past_key_values=cache.inner,
        use_cache=True,
        logits_to_keep=1,
        **kwargs,
    )
    token = _next(out.logits[0, -1], sampling, req.uniforms)
    prefill_end = clock()
    window_start = start if timing == "legacy" else prefill_end
    req.new.append(token)
    entropies = _Entropies(return_stats)
    index = req.input_ids.shape[1]
    while token not in req.stops and req.room > 0:
        laps = _Laps(clock)
        laps.mark("start")
        laps.at["draft"] = laps.at["tree"] = laps.at["start"]
        out = target(
            input_ids=torch.tensor([[token]], device=device),
            position_ids=req.positions.rows(torch.tensor([index], device=device), delta),
            past_key_values=cache.inner,
            use_cache=True,
        )
        logits = out.logits[0, -1]
        token = _next(logits, sampling, req.uniforms)
        laps.mark("verify")
        entropies.add(logits)  # a view of this step's own (1, 1, vocab) logits
        req.new.append(token)
        index += 1
        laps.mark("end")
        req.rounds.append(laps.round(0, 1, 0))
    window = clock() - window_start
    req.rounds = entropies.fill(req.rounds)
    return req.finish((prefill_end - start) * 1e3, window)


_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def verify_inputs(target, tree: CandidateTree, at: Cursor) -> dict:
    """Inputs of the target pass over ``[root, nodes]``: the ancestor-only mask
    and positions ``length + depth``."""
    device, length = target.device, at.length
    np_dtype = _NUMPY_DTYPES.get(target.dtype)
    if np_dtype is not None:  # the whole additive mask in one numpy pass, no copy
        mask = torch.from_numpy(tree_mask(tree, past_len=length, dtype=np_dtype))
    else:  # e.g. bfloat16, which numpy lacks
        visible = torch.from_numpy(tree_mask(tree) == 0)
        mask = torch.zeros((visible.shape[0], length + visible.shape[0]), dtype=target.dtype)
        mask[:, length:].masked_fill_(~visible, torch.finfo(target.dtype).min)
    index = torch.from_numpy(np.concatenate(([length], tree.depths + length)))
    tokens = torch.from_numpy(np.concatenate(([at.root], tree.tokens)))
    if device.type != "cpu":
        index, tokens, mask = index.to(device), tokens.to(device), mask.to(device)
    return {
        "input_ids": tokens[None],
        "position_ids": at.positions.rows(index, at.delta),
        "attention_mask": mask[None, None],
        "use_cache": True,
        "output_hidden_states": True,
    }


def verify(target, cache: KVCache, inputs: dict):
    """One target pass over a planned tree (:func:`verify_inputs`); the whole
    tree enters ``cache``, and :func:`commit` keeps what was accepted."""
    return target(**inputs, past_key_values=cache.inner)


def commit(cache: KVCache, drafter: Drafter, hidden_states, path: np.ndarray, at: Cursor) -> None:
    """After the walk: keep the root and the accepted ``path`` in the target's
    cache, hand their hidden states to the drafter, and move ``at`` past them
    (its new root, the bonus token, is set by the caller)."""
    cache.keep(at.length + 1, path)
    rows = torch.from_numpy(np.concatenate([[0], path + 1])).to(hidden_states[0].device)
    drafter.advance(hidden_states, rows)
    at.length += 1 + len(path)


def measure_verify_cost(target, cache: KVCache, at: Cursor, repeats: int = 3) -> VerifyCost:
    """The target's verify-lap milliseconds (the pass and the walk's argmax)
    at each size in ``AUTO_SIZES``.

    Measured on the live cache of a request, which is cropped back after every
    pass, so the request's output is untouched. Each size takes the fastest of
    ``repeats`` passes over a flat tree of copies of the root (the mask's shape,
    not its content, sets the cost). ``budget="auto"`` calls it once per
    target, device and dtype of a :class:`~glance.core.budget.VerifyCosts` book.
    """
    clock = Clock(target.device)
    times = []
    with torch.no_grad():
        for size in AUTO_SIZES:
            tree = CandidateTree(
                np.full(size, at.root, dtype=np.int64),
                np.full(size, -1, dtype=np.int64),
                np.ones(size, dtype=np.int64),
                np.zeros(size),
            )
            inputs = verify_inputs(target, tree, at)
            best = float("inf")
            for _ in range(repeats):
                t0 = clock()
                verify(target, cache, inputs).logits[0].argmax(dim=-1).cpu()  # as the walk reads it
                best = min(best, clock() - t0)
                cache.crop(at.length)
            times.append(best * 1e3)
    return VerifyCost(AUTO_SIZES, tuple(times))


class _Planner:
    """The round's tree from a proposal: the budget tree, or with
    ``budget="auto"`` the first ``N`` nodes of the largest one.

    The ``"auto"`` model, per round:

    * **Gain.** Under the head's marginals a node is accepted with its path
      probability ``p_i``. Heads are miscalibrated, so each is scaled by
      ``alpha`` (accepted over predicted tokens in this call's rounds so far,
      :class:`~glance.core.budget.AcceptanceScale`) and capped at 1, since a
      node is accepted at most once. The first ``N`` nodes of the best-first
      tree are the budget-``N`` tree, so its expected accepted length is
      ``A(N) = sum_{i <= N} min(1, alpha * p_i)``.
    * **Cost.** The draft pass's time plus ``cost.at(N)``: the verify pass at
      ``N`` nodes, measured on this machine (or a fixed table, which for the
      toy also holds the round's host work at that size).
    * **Choice.** The ``N`` on the cost's grid that maximises expected tokens
      per millisecond, ``(1 + A(N)) / (draft + cost.at(N))``
      (:func:`~glance.core.budget.choose_budget`).

    The search first builds the tree at the grid's third-largest size (63 on
    ``AUTO_SIZES``) and builds the largest only when that size itself wins:
    a round then pays for a 63-node search, not a 255-node one, and the
    choice differs only where the rate rises again past a size that beat
    every smaller one.
    """

    def __init__(self, budget, cost: VerifyCost | None):
        self.budget, self.cost = budget, cost
        self._laps, self._drafted_at = None, None
        self.scale = AcceptanceScale() if cost is not None else None
        self.predicted = 0.0

    def draft(self, drafter: Drafter, at: Cursor, depth: int, laps: _Laps) -> tuple:
        """The drafter's tree and when drafting ended. A table drafter calls
        this planner back with its table; the draft's time ends there, before
        the tree search, which the round's ``tree`` lap counts."""
        self._laps, self._drafted_at = laps, None
        tree = drafter.draft(at.root, at.length, depth, self)
        if self._drafted_at is None:  # a drafter that grew its own tree
            self._drafted_at = laps.mark("draft")
        return tree, self._drafted_at

    def __call__(self, ids: np.ndarray, logprobs: np.ndarray) -> CandidateTree:
        """The round's tree from a drafter's ``(depth, width)`` table
        (:class:`~glance.drafters.protocol.Plan`)."""
        self._drafted_at = self._laps.mark("draft")
        return self.plan(ids, logprobs, self._laps.ms("start", "draft"))

    def plan(self, ids: np.ndarray, logprobs: np.ndarray, draft_ms: float) -> CandidateTree:
        if self.cost is None:
            return search_tree(ids, logprobs, self.budget)
        sizes, shift = self.cost.sizes, np.log(self.scale.alpha)
        for limit in (sizes[max(len(sizes) - 3, 0)], sizes[-1]):
            full = search_tree(ids, logprobs, limit)
            calibrated = np.minimum(full.logprobs + shift, 0.0)
            size, _ = choose_budget(calibrated, self.cost, draft_ms)
            if size < limit:  # the best is inside this tree: no need to search wider
                break
        self.predicted = float(np.exp(full.logprobs[:size]).sum())
        return first_nodes(full, size)

    def learn(self, accepted: int) -> None:
        """Scale later predictions by how this one fared (auto only)."""
        if self.scale is not None:
            self.scale.update(accepted, self.predicted)


@torch.inference_mode()
def speculate(
    drafter: Drafter,
    target,
    input_ids: torch.Tensor,
    options: Options,
    *,
    positions=None,
    generator=None,
    costs: VerifyCosts | None = None,
):
    """Speculative decoding with any :class:`~glance.drafters.protocol.Drafter`: per
    round, propose, plan a tree, verify it, walk, commit. Lossless: at
    temperature 0 the output is the target's greedy output, and otherwise an
    exact sample (``glance.decoding.sampling``). ``costs`` keeps ``budget="auto"``'s
    measured verify costs between calls (a fresh book measures anew).

    Returns what :func:`generate` returns.
    """
    req = _request(target, input_ids, options, positions, generator)
    clock, sampling, extend = req.clock, options.sampling, options.extend_budget
    _check_drafter(drafter, options)
    accept = walk if options.accept == "exact" else _relaxed(options.accept)
    cache = KVCache(target.config)
    start = clock()
    at = _prefill(target, drafter, req, cache)
    prefill_end = clock()
    window_start = start if options.timing == "legacy" else None
    cost = None
    if options.budget == "auto":
        cost = (costs or VerifyCosts()).get(target, lambda: measure_verify_cost(target, cache, at))
    planner = _Planner(options.budget, cost)
    entropies = _Entropies(options.return_stats, copy=True)  # a view would pin all logits
    done = at.root in req.stops or req.room <= 0
    caps = []  # output length at each round's root, and its depth limit
    while not done:
        laps = _Laps(clock)
        laps.mark("start")
        depth = min(drafter.max_depth, req.room)
        tree, drafted_at = planner.draft(drafter, at, depth, laps)
        window_start = drafted_at if window_start is None else window_start
        drafted, room = len(tree), min(drafter.max_depth, req.room - depth) if extend else 0
        caps.append((len(req.new), depth + max(room, 0)))
        if room >= 1:
            laps.mark("planned")
            tree = drafter.extend(tree, room, extend)
            laps.mark("extended")
        inputs = verify_inputs(target, tree, at)
        laps.mark("tree")
        out = verify(target, cache, inputs)
        path, bonus = accept(tree, out.logits[0], sampling, req.uniforms)
        laps.mark("verify")
        planner.learn(int((path < drafted).sum()))  # the prediction knew the first tree only
        committed, done = _cut(tree.tokens[path].tolist() + [bonus], req.room, req.stops)
        req.new.extend(committed)
        if not done:
            commit(cache, drafter, out.hidden_states, path, at)
            at.root = bonus
        entropies.add(out.logits[0, 0])
        laps.mark("end")
        stop = _stop(tree, path, caps[-1][1], len(committed))
        req.rounds.append(replace(laps.round(len(path), len(committed), len(tree)), stop=stop))
    window = clock() - (window_start if window_start is not None else prefill_end)
    req.rounds = entropies.fill(
        [
            replace(r, cap=min(c, len(req.new) - s))
            for r, (s, c) in zip(req.rounds, caps, strict=True)
        ]
    )
    return req.finish((prefill_end - start) * 1e3, window)


def _check_drafter(drafter, options: Options) -> None:
    missing = [
        a for a in ("width", "max_depth", "start", "draft", "advance") if not hasattr(drafter, a)
    ]
    if missing:
        raise TypeError(f"drafter must be a Drafter; {type(drafter).__name__} lacks {missing}")
    refuse_auto(drafter, options.budget)  # before the prefill and the cost measurement
    if options.extend_budget and not callable(getattr(drafter, "extend", None)):
        raise ValueError(
            f"{type(drafter).__name__} has no extend: extend_budget must be 0; "
            f"got extend_budget={options.extend_budget}"
        )


def _relaxed(rule: str):
    """A lossy walk with :func:`walk`'s signature (greedy only)."""
    from glance.decoding.relaxed import relaxed_walk

    return lambda tree, logits, sampling, uniforms: relaxed_walk(tree, logits, rule)


def _prefill(target, drafter: Drafter, req: _Request, cache: KVCache):
    """The prompt through the target: the first token (the root) and the
    drafter started on the prompt's hidden states."""
    kwargs, delta = req.positions.prefill(target, req.input_ids)
    out = target(
        input_ids=req.input_ids,
        past_key_values=cache.inner,
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=True,
        **kwargs,
    )
    root = _next(out.logits[0, -1], req.options.sampling, req.uniforms)
    req.new.append(root)
    drafter.start(out.hidden_states, req.input_ids)
    return Cursor(root, req.input_ids.shape[1], req.positions, delta)


def generate(
    head,
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    budget: int | str = "auto",
    branch_k: int = 8,
    positions=None,
    stop_token_ids=None,
    timing: str = "decode_only",
    return_stats: bool = False,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator=None,
    extend_budget: int = 0,
    costs: VerifyCosts | None = None,
    accept: str = "exact",
    draft_window: int | None = None,
    scorer=None,
):
    """Decode with a budget tree per round; at temperature 0, exactly greedy,
    and otherwise an exact sample of the target (see ``glance.decoding.sampling``).

    Args:
        head: a ``dflash.DFlashDraftModel`` that fits ``target``, or any
            :class:`~glance.drafters.protocol.Drafter` (then ``branch_k`` is its
            own).
        target: the frozen target model.
        input_ids: ``(1, n)`` prompt ids, ``torch.int64`` or ``torch.int32``
            (any other dtype raises ``TypeError``).
        max_new_tokens: exact cap on new tokens, ``>= 1``.
        budget: ``"auto"`` (the default): each round picks its tree size from
            the target's verify cost, measured on this machine, and the draft's
            expected gain (the model is in ``_Planner``'s docstring); a drafter
            that grows its own tree needs an int. Or an int: tree nodes
            verified per round (besides the root), ``1..MAX_BUDGET`` (4095;
            larger raises ``ValueError`` before anything is allocated).
        branch_k: candidates per block offset, ``>= 1``.
        positions: :class:`~glance.targets.vl.VisionPositions` for a VL prompt with an
            image; ``None`` means :class:`~glance.targets.vl.StreamPositions`.
        stop_token_ids: the output ends right after the first of these.
        timing: ``"decode_only"`` or ``"legacy"`` (see the module docstring).
        return_stats: also return :class:`Stats`.
        temperature: 0 for greedy; above 0, sample from the target's logits
            through temperature, ``top_k`` (0: off) and ``top_p`` (1: off),
            as ``transformers``' ``generate`` processes them.
        top_p, top_k: see ``temperature``; unused at temperature 0.
        generator: a ``torch.Generator`` for the draws (on the target's
            device); ``None`` uses torch's global one. Output token ``i`` uses
            the ``i``-th uniform of this stream in every decoder, so a seed
            gives the same text here as in :func:`greedy_generate`.
        extend_budget: ``0`` (off) or up to this many extra nodes per round
            (at most ``MAX_BUDGET``), drafted past the block by a second head
            pass with the head's own argmax spine revealed, and hung off the
            spine's leaf. Needs a head trained with a variable mask span
            (``HeadConfig.mask_span``).
        costs: a :class:`~glance.core.budget.VerifyCosts` book that keeps
            ``budget="auto"``'s measured verify costs across calls; without it
            each call measures them again.
        accept: ``"exact"`` (lossless). Any other value must name a LOSSY rule
            of ``glance.decoding.relaxed.RULES``; its output is not the target's.
        draft_window: ``None`` (the head reads the whole context) or the most
            context positions a DFlash head attends to (the latest ones), so its
            pass costs the same at any context length; the output is unchanged.
            Ignored for a drafter passed as ``head``.
        scorer: ``None``, or a :class:`~glance.heads.scorer.CausalScorer`
            that fits ``head``: the tree is then ranked by it
            (:class:`~glance.drafters.scored.ScoredBlockDrafter`, the scorer's
            ``top_k`` candidates per offset in place of ``branch_k``). It takes
            a fixed ``budget`` and no ``extend_budget``; the output is unchanged.

    Returns:
        ``(1, n + new)`` token ids on the CPU, prompt included; with
        ``return_stats``, ``(ids, stats)``.
    """
    options = Options(
        max_new_tokens,
        budget,
        stop_token_ids=stop_token_ids,
        timing=timing,
        sampling=Sampling(temperature, top_p, top_k),
        extend_budget=extend_budget,
        return_stats=return_stats,
        accept=accept,
    )
    if hasattr(head, "draft"):  # any drafter; a bare head gets the block drafter
        drafter = head
    elif scorer is not None:
        from glance.drafters.scored import ScoredBlockDrafter

        if budget == "auto" or extend_budget:
            raise ValueError(
                "scorer: the consistency scorer's tree takes a fixed budget and no "
                f"extend_budget; got budget={budget!r}, extend_budget={extend_budget}"
            )
        drafter = ScoredBlockDrafter(head, target, scorer, window=draft_window)
    else:
        drafter = BlockDrafter(head, target, _count("branch_k", branch_k, 1), draft_window)
        if extend_budget:
            check_head_extends(head)
    return speculate(
        drafter, target, input_ids, options, positions=positions, generator=generator, costs=costs
    )


def chain_generate(
    head,
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    positions=None,
    stop_token_ids=None,
    timing: str = "decode_only",
    return_stats: bool = False,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    generator=None,
):
    """Decode with the head's argmax spine only: a width-1 tree of depth
    ``block_size - 1``. Same arguments and returns as :func:`generate`."""
    options = Options(
        max_new_tokens,
        int(head.block_size) - 1,
        stop_token_ids=stop_token_ids,
        timing=timing,
        sampling=Sampling(temperature, top_p, top_k),
        return_stats=return_stats,
    )
    drafter = BlockDrafter(head, target, 1)
    return speculate(drafter, target, input_ids, options, positions=positions, generator=generator)
