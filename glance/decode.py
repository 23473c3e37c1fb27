"""The decoding loops: the greedy oracle, the head as a chain, and the budget tree.

All three share one interface and return the same :class:`Stats`. Batch size
is 1: a batch larger than 1 is refused.

One round of :func:`generate`, with ``L`` tokens in the target's cache and the
last committed token (the *root*) at sequence index ``L``:

1. one head pass over ``[root, MASK x depth]`` with the new context features;
2. each offset's top-``branch_k`` log-probs become a budget tree (``glance.tree``);
3. one target pass over ``[root, nodes]`` with the ancestor-only mask and
   positions ``L + depth``;
4. the walk commits the longest path the target itself takes, plus the target's
   next token after it (the bonus);
5. the target cache keeps past + root + accepted nodes; rejected nodes go;
6. the verify pass's hidden states at root + accepted nodes are the next
   round's context features.

Timing (``timing=``): ``"decode_only"`` opens the clock after the prefill and
after the first round's draft pass; ``"legacy"`` opens it before the prefill.
Both synchronise the device before each read. ``ms_per_token`` divides the
window by every new token, the prefill's included, as dflash does.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from glance.budget import AUTO_SIZES, AcceptanceScale, VerifyCost, choose_budget
from glance.head import (
    check_head_extends,
    check_head_fits,
    context_features,
    lm_head,
    noise_embedding,
)
from glance.sampling import Sampling, Uniforms, draw
from glance.tree import (
    CandidateTree,
    _search,
    accept_path,
    tree_mask,
)
from glance.vl import StreamPositions, VisionPositions, text_config

__all__ = ["Round", "Stats", "chain_generate", "generate", "greedy_generate", "verify_cost"]

TIMINGS = ("decode_only", "legacy")
GREEDY = Sampling()


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
    (stop token or ``max_new_tokens``) sooner. A round with ``accepted >= cap``
    is censored: it was stopped by the cap, not by a rejection.
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


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


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
    if (
        input_ids.dtype.is_floating_point
        or input_ids.dtype.is_complex
        or input_ids.dtype == torch.bool
    ):
        raise TypeError(f"input_ids must hold integer token ids; got dtype {input_ids.dtype}")
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


def _finish(input_ids, new, rounds, prefill_ms, window, timing, return_stats):
    out = torch.cat([input_ids[0].cpu(), torch.tensor(new, dtype=input_ids.dtype)])[None]
    if not return_stats:
        return out
    committed = sum(r.committed for r in rounds)
    stats = Stats(
        new_tokens=len(new),
        tau=committed / len(rounds) if rounds else float("nan"),
        ms_per_token=window * 1e3 / len(new),
        prefill_ms=prefill_ms,
        timing=timing,
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


def _walk(tree: CandidateTree, logits: torch.Tensor, sampling: Sampling, uniforms):
    """The accepted node indices and the bonus token, from the verify pass's
    ``(1 + N, V)`` logits (row 0: the root).

    Each row's choice is the target's own: its argmax, or a draw with the
    uniform of the row's depth (the walk reaches a node at depth ``d`` as its
    ``d``-th step). The walk follows the choices from the root while a child
    carries them; see ``glance.sampling`` for why that is exact.
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


@torch.inference_mode()
def greedy_generate(
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    positions=None,
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
    (``glance.sampling``), with uniforms from ``generator``.

    Returns ``(1, n + new)`` token ids (prompt included) on the CPU, and with
    ``return_stats`` also :class:`Stats` with one round per token.
    """
    from transformers import DynamicCache

    sampling = Sampling(temperature, top_p, top_k)
    input_ids, positions = _check_request(target, input_ids, max_new_tokens, positions, timing)
    uniforms = _uniforms(sampling, generator, target.device)
    stops = _stops(stop_token_ids, target)
    device = target.device
    cache = DynamicCache(config=target.config)

    start = _clock(device)
    kwargs, delta = positions.prefill(target, input_ids)
    out = target(
        input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1, **kwargs
    )
    token = _next(out.logits[0, -1], sampling, uniforms)
    prefill_end = _clock(device)
    window_start = start if timing == "legacy" else prefill_end
    new, rounds = [token], []
    entropies, nan = _Entropies(return_stats), float("nan")
    index = input_ids.shape[1]
    while token not in stops and len(new) < max_new_tokens:
        t0 = _clock(device)
        out = target(
            input_ids=torch.tensor([[token]], device=device),
            position_ids=positions.rows(torch.tensor([index], device=device), delta),
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[0, -1]
        token = _next(logits, sampling, uniforms)
        t1 = _clock(device)
        entropies.add(logits)  # a view of this step's own (1, 1, vocab) logits
        new.append(token)
        index += 1
        rounds.append(Round(0, 1, nan, 0, 0.0, (t1 - t0) * 1e3, (_clock(device) - t1) * 1e3))
    window = _clock(device) - window_start
    rounds = entropies.fill(rounds)
    return _finish(
        input_ids, new, rounds, (prefill_end - start) * 1e3, window, timing, return_stats
    )


def _compact(cache, start: int, keep: np.ndarray) -> None:
    """Keep cache positions ``[0, start)`` then ``start + keep``; drop the rest.

    ``keep`` is ascending (a root-to-leaf path, parents-first), so entries that
    already sit in place (``keep[i] == i``, the usual case along the best path)
    are not moved; only the rest are gathered down.
    """
    m = keep.shape[0]
    moved = np.flatnonzero(keep != np.arange(m))
    if moved.size:
        first = int(moved[0])
        src = torch.from_numpy(keep[first:] + start).to(cache.layers[0].keys.device)
        for layer in cache.layers:
            layer.keys[..., start + first : start + m, :] = layer.keys[..., src, :]
            layer.values[..., start + first : start + m, :] = layer.values[..., src, :]
    for layer in cache.layers:
        layer.keys = layer.keys[..., : start + m, :]
        layer.values = layer.values[..., : start + m, :]


def _crop_to(cache, length: int) -> None:
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def _verify_inputs(target, tree, root: int, length: int, positions, delta: int) -> dict:
    """Inputs of the target pass over ``[root, nodes]``: the ancestor-only mask
    and positions ``length + depth``."""
    device = target.device
    np_dtype = _NUMPY_DTYPES.get(target.dtype)
    if np_dtype is not None:  # the whole additive mask in one numpy pass, no copy
        mask = torch.from_numpy(tree_mask(tree, past_len=length, dtype=np_dtype))
    else:  # e.g. bfloat16, which numpy lacks
        visible = torch.from_numpy(tree_mask(tree) == 0)
        mask = torch.zeros((visible.shape[0], length + visible.shape[0]), dtype=target.dtype)
        mask[:, length:].masked_fill_(~visible, torch.finfo(target.dtype).min)
    index = torch.from_numpy(np.concatenate(([length], tree.depths + length)))
    tokens = torch.from_numpy(np.concatenate(([root], tree.tokens)))
    if device.type != "cpu":
        index, tokens, mask = index.to(device), tokens.to(device), mask.to(device)
    return {
        "input_ids": tokens[None],
        "position_ids": positions.rows(index, delta),
        "attention_mask": mask[None, None],
        "use_cache": True,
        "output_hidden_states": True,
    }


def _first(tree: CandidateTree, n: int) -> CandidateTree:
    """The first ``n`` nodes: for a best-first tree, exactly the budget-``n`` tree."""
    return CandidateTree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.logprobs[:n])


def _extend(head, target, tree, root, top_ids, no_context, length, past_block, extend, draft_cache):
    """``tree`` with a subtree of up to ``extend`` nodes hung off its spine leaf.

    The spine is the head's argmax at every offset of the block. When the tree
    holds the whole spine, one more head pass over ``[root, spine, MASK x
    past_block]`` (the spine revealed, not masked) prices the ``past_block``
    offsets after the block; their top-k become a best-first subtree below the
    spine leaf, packed after the existing nodes. A tree without its spine leaf
    comes back unchanged, with no extra pass.
    """
    depth, k = top_ids.shape
    spine = np.ascontiguousarray(top_ids[:, 0])
    # The spine's nodes in the tree: the path the walk takes if every row's
    # choice is the spine's next token (no choice past the leaf).
    choice = np.append(spine, -1)[np.concatenate(([0], tree.depths))]
    spine_path = accept_path(tree, choice)
    if len(spine_path) < depth:
        return tree
    leaf = int(spine_path[-1])
    device = target.device
    block_ids = torch.full((1, 1 + depth + past_block), int(head.mask_token_id), device=device)
    block_ids[0, 0] = root
    block_ids[0, 1 : depth + 1] = torch.from_numpy(spine).to(device)
    hidden = head(
        target_hidden=no_context,
        noise_embedding=noise_embedding(head, target, block_ids),
        position_ids=torch.arange(length, length + block_ids.shape[1], device=device)[None],
        past_key_values=draft_cache,
        use_cache=True,
    )
    _crop_to(draft_cache, length)
    logits = head.compute_logits(hidden[0, depth + 1 :], lm_head(target))
    logp = torch.log_softmax(logits.float(), dim=-1)
    lp, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
    sub = _search(ids.cpu().numpy(), lp.cpu().numpy(), extend, k)
    n = len(tree)
    return CandidateTree(
        np.concatenate([tree.tokens, sub.tokens]),
        np.concatenate([tree.parents, np.where(sub.parents < 0, leaf, sub.parents + n)]),
        np.concatenate([tree.depths, sub.depths + tree.depths[leaf]]),
        np.concatenate([tree.logprobs, sub.logprobs + tree.logprobs[leaf]]),
    )


#: measured verify costs per target, per (device, dtype): budget="auto" times once
_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def verify_cost(
    target, cache, root: int, length: int, positions, delta: int, repeats: int = 3
) -> VerifyCost:
    """The target's verify-pass milliseconds at each size in ``AUTO_SIZES``.

    Timed once per target, device and dtype (then cached), on the live cache of
    the first request, which is cropped back after every pass, so the request's
    output is untouched. Each size takes the fastest of ``repeats`` passes over
    a flat tree of copies of the root (the mask's shape, not its content, sets
    the cost). ``budget="auto"`` calls it; call it to inspect the curve.
    """
    key = (str(target.device), str(target.dtype))
    known = _COSTS.setdefault(target, {})
    if key in known:
        return known[key]
    times = []
    with torch.no_grad():
        for size in AUTO_SIZES:
            tree = CandidateTree(
                np.full(size, root, dtype=np.int64),
                np.full(size, -1, dtype=np.int64),
                np.ones(size, dtype=np.int64),
                np.zeros(size),
            )
            inputs = _verify_inputs(target, tree, root, length, positions, delta)
            best = float("inf")
            for _ in range(repeats):
                t0 = _clock(target.device)
                target(**inputs, past_key_values=cache)
                best = min(best, _clock(target.device) - t0)
                _crop_to(cache, length)
            times.append(best * 1e3)
    known[key] = VerifyCost(AUTO_SIZES, tuple(times))
    return known[key]


@torch.inference_mode()
def _speculate(
    head,
    target,
    input_ids,
    max_new_tokens,
    budget,
    branch_k,
    positions,
    stop_token_ids,
    timing,
    return_stats,
    sampling: Sampling = GREEDY,
    generator=None,
    extend: int = 0,
):
    from transformers import DynamicCache

    input_ids, positions = _check_request(target, input_ids, max_new_tokens, positions, timing)
    check_head_fits(head, target)
    if extend:
        check_head_extends(head)
    uniforms = _uniforms(sampling, generator, target.device)
    stops = _stops(stop_token_ids, target)
    device = target.device
    block = int(head.block_size)
    layer_ids = list(head.target_layer_ids)
    output = lm_head(target)
    target_cache = DynamicCache(config=target.config)
    draft_cache = DynamicCache(config=head.config)

    start = _clock(device)
    kwargs, delta = positions.prefill(target, input_ids)
    out = target(
        input_ids=input_ids,
        past_key_values=target_cache,
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=True,
        **kwargs,
    )
    root = _next(out.logits[0, -1], sampling, uniforms)
    context = context_features(out.hidden_states, layer_ids)
    prefill_end = _clock(device)
    window_start = start if timing == "legacy" else None
    cost = scale = None
    if budget == "auto":
        cost = verify_cost(target, target_cache, root, input_ids.shape[1], positions, delta)
        scale = AcceptanceScale()
    new, rounds = [root], []
    # Copies: a view would keep each round's whole (N+1, vocab) logits alive.
    entropies, nan = _Entropies(return_stats, copy=True), float("nan")
    done = root in stops or max_new_tokens == 1
    length = input_ids.shape[1]  # target cache length = the root's sequence index

    starts, caps = [], []  # output length at each round's root, and its depth limit
    while not done:
        t0 = _clock(device)
        depth = min(block - 1, max_new_tokens - len(new))
        starts.append(len(new))
        block_ids = torch.full((1, depth + 1), int(head.mask_token_id), device=device)
        block_ids[0, 0] = root
        hidden = head(
            target_hidden=context,
            noise_embedding=noise_embedding(head, target, block_ids),
            position_ids=torch.arange(length - context.shape[1], length + depth + 1, device=device)[
                None
            ],
            past_key_values=draft_cache,
            use_cache=True,
        )
        _crop_to(draft_cache, length)
        logp = torch.log_softmax(head.compute_logits(hidden[0, 1:], output).float(), dim=-1)
        top_lp, top_ids = logp.topk(min(branch_k, logp.shape[-1]), dim=-1)
        top_lp, top_ids = top_lp.cpu().numpy(), top_ids.cpu().numpy()
        t1 = _clock(device)
        if window_start is None:
            window_start = t1

        if cost is None:
            tree = _search(top_ids, top_lp, budget, top_ids.shape[1])
        else:
            full = _search(top_ids, top_lp, cost.sizes[-1], top_ids.shape[1])
            size, predicted = choose_budget(full.logprobs, cost, (t1 - t0) * 1e3, scale.alpha)
            tree = _first(full, size)
        extend_ms, drafted = 0.0, len(tree)
        past_block = min(block - 1, max_new_tokens - len(new) - depth)
        caps.append(depth + (past_block if extend and past_block >= 1 else 0))
        if extend and past_block >= 1:
            te = _clock(device)
            tree = _extend(
                head,
                target,
                tree,
                root,
                top_ids,
                context[:, :0],
                length,
                past_block,
                extend,
                draft_cache,
            )
            extend_ms = (_clock(device) - te) * 1e3
        inputs = _verify_inputs(target, tree, root, length, positions, delta)
        t2 = _clock(device)
        out = target(**inputs, past_key_values=target_cache)
        logits = out.logits[0]
        path, bonus = _walk(tree, logits, sampling, uniforms)
        t3 = _clock(device)

        if cost is not None:  # alpha scales the prediction, which knew only the first tree
            scale.update(int((path < drafted).sum()), predicted)
        committed, done = _cut(
            tree.tokens[path].tolist() + [bonus], max_new_tokens - len(new), stops
        )
        new.extend(committed)
        if not done:
            _compact(target_cache, length + 1, path)
            rows = torch.from_numpy(np.concatenate([[0], path + 1])).to(device)
            context = context_features(out.hidden_states, layer_ids)[:, rows]
            length += 1 + len(path)
            root = bonus
        entropies.add(logits[0])
        t4 = _clock(device)
        rounds.append(
            Round(
                accepted=len(path),
                committed=len(committed),
                entropy=nan,
                tree_size=len(tree),
                draft_ms=(t1 - t0) * 1e3 + extend_ms,
                verify_ms=(t3 - t2) * 1e3,
                host_ms=((t2 - t1) + (t4 - t3)) * 1e3 - extend_ms,
                tree_ms=(t2 - t1) * 1e3 - extend_ms,
            )
        )
    window = _clock(device) - (window_start if window_start is not None else prefill_end)
    rounds = [
        replace(r, cap=min(c, len(new) - s)) for r, c, s in zip(rounds, caps, starts, strict=True)
    ]
    rounds = entropies.fill(rounds)
    return _finish(
        input_ids, new, rounds, (prefill_end - start) * 1e3, window, timing, return_stats
    )


def generate(
    head,
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    budget: int | str = 63,
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
):
    """Decode with a budget tree per round; at temperature 0, exactly greedy,
    and otherwise an exact sample of the target (see ``glance.sampling``).

    Args:
        head: a ``dflash.DFlashDraftModel`` that fits ``target``.
        target: the frozen target model.
        input_ids: ``(1, n)`` prompt ids.
        max_new_tokens: exact cap on new tokens, ``>= 1``.
        budget: tree nodes verified per round (besides the root), ``>= 1``; or
            ``"auto"``: each round picks its size from the target's measured
            verify cost and the draft's expected gain (``glance.budget``).
        branch_k: candidates per block offset, ``>= 1``.
        positions: :class:`~glance.vl.VisionPositions` for a VL prompt with an
            image; ``None`` means :class:`~glance.vl.StreamPositions`.
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
        extend_budget: ``0`` (off) or up to this many extra nodes per round,
            drafted past the block by a second head pass with the head's own
            argmax spine revealed, and hung off the spine's leaf. Needs a head
            trained with a variable mask span (``HeadConfig.mask_span``).

    Returns:
        ``(1, n + new)`` token ids on the CPU, prompt included; with
        ``return_stats``, ``(ids, stats)``.
    """
    if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ValueError(f'budget must be an int >= 1 or "auto"; got {budget!r}')
    if isinstance(branch_k, bool) or not isinstance(branch_k, int) or branch_k < 1:
        raise ValueError(f"branch_k must be an int >= 1; got {branch_k!r}")
    if isinstance(extend_budget, bool) or not isinstance(extend_budget, int) or extend_budget < 0:
        raise ValueError(f"extend_budget must be an int >= 0 (0: off); got {extend_budget!r}")
    return _speculate(
        head,
        target,
        input_ids,
        max_new_tokens,
        budget,
        branch_k,
        positions,
        stop_token_ids,
        timing,
        return_stats,
        Sampling(temperature, top_p, top_k),
        generator,
        extend_budget,
    )


def chain_generate(
    head,
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
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
    return _speculate(
        head,
        target,
        input_ids,
        max_new_tokens,
        int(head.block_size) - 1,
        1,
        positions,
        stop_token_ids,
        timing,
        return_stats,
        Sampling(temperature, top_p, top_k),
        generator,
    )
