"""An EAGLE-3-style feature head: the autoregressive production drafter, for comparison.

Per EAGLE-3's published design, the head reads the target's hidden states at a
low, a middle and a high layer (``target_layer_ids``, dflash's convention:
layer ``i`` is ``hidden_states[i + 1]``), fuses them with one linear map, and
runs one decoder layer whose input is the normed token embedding concatenated
with the normed feature. It drafts autoregressively: a drafted token's input
feature is the head's own output at the step that proposed it.

At sequence index ``i`` the head's input is the feature of ``i`` and the
token at ``i + 1``, and its output predicts the token at ``i + 2``; at
decoding time the committed positions use the target's features, and a node
at tree depth ``d`` sits at position ``length - 1 + d``.

Decoding (:class:`EagleDrafter`) grows an EAGLE-2/3-style dynamic tree: the
head expands the ``width`` best nodes at each depth (by path log-probability),
one head pass per depth, then the ``budget`` best nodes of every depth are
verified. A path's score never rises as it deepens, so the best ``budget``
nodes, ties going to the shallower, are prefix-closed.

Training (:func:`train_eagle_head`) uses EAGLE-3's training-time test: each
step unrolls ``ttt`` draft steps, feeding the head its own outputs, with the
attention each step would have at decoding time (the committed context, then
the chain of its own earlier steps). The head shares the target's frozen
token embedding and LM head, as the block head does, so the two heads differ
in how they draft, not in what they may output. We write this head rather
than adapt ``speculators``' EAGLE-3 model: that model has no drafting loop,
reads a VL target as text with 1-D RoPE, and its install pulls a CUDA-only
torchvision that breaks ``import transformers``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PretrainedConfig, PreTrainedModel

from glance.head import context_features, embeddings, lm_head
from glance.tree import CandidateTree
from glance.vl import text_config

__all__ = [
    "EagleConfig",
    "EagleDrafter",
    "EagleHead",
    "EagleTrainConfig",
    "build_eagle_head",
    "check_eagle_fits",
    "eagle_loss",
    "load_eagle_head",
    "train_eagle_head",
    "ttt_steps",
]


class EagleConfig(PretrainedConfig):
    """Shape of an :class:`EagleHead`; ``hidden_size`` and ``vocab_size`` are
    the target's, ``target_layer_ids`` the three layers it reads."""

    model_type = "glance_eagle"

    def __init__(
        self,
        *,
        hidden_size: int = 128,
        num_attention_heads: int = 4,
        intermediate_size: int = 256,
        vocab_size: int = 128,
        target_layer_ids=(0, 1, 2),
        num_target_layers: int = 4,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-6,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.target_layer_ids = list(target_layer_ids)
        self.num_target_layers = num_target_layers
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.initializer_range = initializer_range
        super().__init__(**kwargs)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x`` ``(B, H, n, d)`` with ``cos``/``sin`` ``(B, 1, n, d)``."""
    d = x.shape[-1]
    return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1) * sin


class EagleHead(PreTrainedModel):
    """Fuse (``fc``), one decoder layer over ``[norm(embedding), norm(feature)]``,
    and a final norm before the target's LM head."""

    config_class = EagleConfig
    base_model_prefix = "eagle"

    def __init__(self, config: EagleConfig):
        super().__init__(config)
        h, eps = config.hidden_size, config.rms_norm_eps
        n_in = len(config.target_layer_ids) * h
        self.fc = torch.nn.Linear(n_in, h, bias=False)
        self.embed_norm = torch.nn.RMSNorm(h, eps=eps)
        self.feature_norm = torch.nn.RMSNorm(h, eps=eps)
        self.qkv_proj = torch.nn.Linear(2 * h, 3 * h, bias=False)
        self.o_proj = torch.nn.Linear(h, h, bias=False)
        self.post_norm = torch.nn.RMSNorm(h, eps=eps)
        self.gate_up = torch.nn.Linear(h, 2 * config.intermediate_size, bias=False)
        self.down = torch.nn.Linear(config.intermediate_size, h, bias=False)
        self.norm = torch.nn.RMSNorm(h, eps=eps)
        self._inv_freq = None  # RoPE frequencies, made on first use (see _frequencies)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, torch.nn.Linear):
            module.weight.data.normal_(0.0, self.config.initializer_range)
        elif isinstance(module, torch.nn.RMSNorm):
            module.weight.data.fill_(1.0)

    @property
    def target_layer_ids(self) -> list[int]:
        return list(self.config.target_layer_ids)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The target's concatenated layer states, mapped to one hidden state."""
        return self.fc(features)

    def _frequencies(self, device) -> torch.Tensor:
        """RoPE's inverse frequencies, computed from the config rather than
        kept as a buffer: ``from_pretrained`` builds the model on the meta
        device and leaves non-persistent buffers unfilled."""
        inv = self._inv_freq
        if inv is None or inv.device != device:
            d = self.config.hidden_size // self.config.num_attention_heads
            exponent = torch.arange(0, d, 2, dtype=torch.float32, device=device) / d
            inv = self._inv_freq = self.config.rope_theta**-exponent
        return inv

    def qkv(self, hidden, embedded, positions):
        """Queries, keys and values ``(B, H, n, d)`` of one pass, RoPE applied.

        ``hidden`` and ``embedded`` are ``(B, n, h)``; ``positions`` ``(B, n)``."""
        b, n, h = hidden.shape
        heads = self.config.num_attention_heads
        x = torch.cat([self.embed_norm(embedded), self.feature_norm(hidden)], dim=-1)
        q, k, v = self.qkv_proj(x).view(b, n, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
        inv = self._frequencies(positions.device)
        angles = positions[:, None, :, None].to(inv.dtype) * inv
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def attend(self, hidden, q, keys, values, visible):
        """The rest of the layer: attention of ``q`` over ``keys``/``values``
        (``visible``: a bool ``(B, n, m)``, True where a query may look, or
        ``"causal"`` for keys that are the queries' own), then the MLP."""
        b, n, h = hidden.shape
        if isinstance(visible, str):
            att = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
        else:
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible[:, None])
        out = hidden + self.o_proj(att.transpose(1, 2).reshape(b, n, h))
        gate, up = self.gate_up(self.post_norm(out)).chunk(2, dim=-1)
        return out + self.down(F.silu(gate) * up)

    def step(self, hidden, embedded, positions, past=None, visible=None):
        """One decoder-layer pass: ``(out, keys, values)``.

        ``past``: optional ``(keys, values)`` ``(B, H, m, d)`` placed before
        this pass's own; ``visible``: a bool ``(B, n, m + n)`` or ``"causal"``
        (no ``past``) as in :meth:`attend`. ``keys``/``values`` are this
        pass's own, rotated, for the caller to keep.
        """
        q, k, v = self.qkv(hidden, embedded, positions)
        keys, values = k, v
        if past is not None:
            if isinstance(visible, str):
                raise ValueError('visible="causal" takes no past')
            keys, values = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        return self.attend(hidden, q, keys, values, visible), k, v

    def logits(self, out: torch.Tensor, output_head) -> torch.Tensor:
        return output_head(self.norm(out))


def build_eagle_head(target, layer_ids=None, seed: int = 0, intermediate: int | None = None):
    """A fresh :class:`EagleHead` for ``target``, reading ``layer_ids`` (by
    default a low, middle and high layer, spread as the block head's are)."""
    from glance.train import default_layer_ids

    text = text_config(target)
    params = getattr(text, "rope_parameters", None) or {}
    ids = list(layer_ids or default_layer_ids(text.num_hidden_layers, 3))
    torch.manual_seed(seed)
    config = EagleConfig(
        hidden_size=text.hidden_size,
        num_attention_heads=max(1, text.hidden_size // 32),
        intermediate_size=intermediate or 2 * text.hidden_size,
        vocab_size=text.vocab_size,
        target_layer_ids=ids,
        num_target_layers=text.num_hidden_layers,
        rope_theta=float(params.get("rope_theta", getattr(text, "rope_theta", 10000.0))),
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
    )
    return EagleHead(config).to(target.dtype)


def check_eagle_fits(head: EagleHead, target) -> None:
    """Raise ``ValueError`` naming the field and both values if ``head`` cannot
    draft for ``target``."""
    text = text_config(target)
    for name, mine, theirs in (
        ("hidden_size", head.config.hidden_size, text.hidden_size),
        ("vocab_size", head.config.vocab_size, text.vocab_size),
        ("num_target_layers", head.config.num_target_layers, text.num_hidden_layers),
    ):
        if mine != theirs:
            raise ValueError(f"eagle head {name} is {mine} but the target's is {theirs}")
    bad = [i for i in head.target_layer_ids if not 0 <= i < text.num_hidden_layers]
    if bad:
        raise ValueError(
            f"eagle head target_layer_ids {head.target_layer_ids} hold {bad}, outside the "
            f"target's {text.num_hidden_layers} layers"
        )


def load_eagle_head(path, target=None, dtype=None, allow_pickle: bool = False) -> EagleHead:
    """Load an :class:`EagleHead` strictly (safetensors, no missing or
    unexpected weights); with ``target``, check it fits and match its dtype
    and device. A damaged checkpoint raises ``ValueError`` naming the file
    and the field or tensor: a truncated or foreign safetensors file, a
    non-floating ``dtype`` in ``config.json``, integer tensors, or NaN or
    infinite weights."""
    from glance._io import load_strict
    from glance._weights import check_checkpoint, check_finite

    dtype = dtype or (target.dtype if target is not None else torch.float32)
    check_checkpoint(path, "eagle head")
    head = load_strict(EagleHead, path, "eagle head", allow_pickle=allow_pickle, dtype=dtype)
    check_finite(head.state_dict().items(), path, "eagle head")
    if target is not None:
        check_eagle_fits(head, target)
        head = head.to(target.device)
    return head.eval().requires_grad_(False)


class EagleDrafter:
    """An :class:`EagleHead` as a tree drafter (``glance.drafter.TreeDrafter``).

    Each round: one head pass over the positions committed since the last
    round (the target's features, each with the token after it), then one
    pass per depth over the ``width`` best nodes, each attending to the
    committed positions and its own ancestors. ``depth`` passes in all,
    against one for the block head. The head's keys and values live in one
    buffer: committed positions first, this round's drafted nodes after them
    (overwritten next round).
    """

    def __init__(self, head: EagleHead, target, width: int = 8, depth: int = 8):
        check_eagle_fits(head, target)
        if width < 1 or depth < 1:
            raise ValueError(f"width and depth must be >= 1; got {width} and {depth}")
        self.head, self.target = head, target
        self.width, self.max_depth = int(width), int(depth)
        self.embed, self.output = embeddings(target), lm_head(target)
        self.keys = self.values = None  # (1, H, capacity, d) buffers
        self.committed = 0  # positions in the buffers that are committed
        self.pending = None  # features not yet in the buffers
        self.next_tokens = None  # the token after each pending feature but the last
        self._last = None  # the latest tree

    def start(self, hidden_states, input_ids: torch.Tensor) -> None:
        self.keys = self.values = None
        self.committed = 0
        self.pending = context_features(hidden_states, self.head.target_layer_ids)
        self.next_tokens = input_ids[0, 1:].to(self.pending.device)

    def advance(self, hidden_states, rows: torch.Tensor) -> None:
        path = rows[1:].cpu().numpy() - 1
        self.pending = context_features(hidden_states, self.head.target_layer_ids)[:, rows]
        self.next_tokens = torch.from_numpy(self._last.tokens[path]).to(self.pending.device)

    def _room(self, size: int) -> None:
        """Buffers that hold at least ``size`` positions (doubling)."""
        have = 0 if self.keys is None else self.keys.shape[2]
        if size <= have:
            return
        cfg, p = self.head.config, self.pending
        heads = cfg.num_attention_heads
        shape = (1, heads, max(size, 2 * have, 256), cfg.hidden_size // heads)
        keys, values = p.new_zeros(shape), p.new_zeros(shape)
        if self.keys is not None:
            keys[:, :, : self.committed] = self.keys[:, :, : self.committed]
            values[:, :, : self.committed] = self.values[:, :, : self.committed]
        self.keys, self.values = keys, values

    def _pass(self, feats, tokens, positions, start: int, visible):
        """One head pass whose keys go to buffer slots ``start ..``; attends
        to slots ``0 .. start + n``."""
        head = self.head
        q, k, v = head.qkv(feats, self.embed(tokens), positions)
        end = start + k.shape[2]
        self.keys[:, :, start:end], self.values[:, :, start:end] = k, v
        return head.attend(feats, q, self.keys[:, :, :end], self.values[:, :, :end], visible)

    def _top(self, out: torch.Tensor):
        logp = torch.log_softmax(self.head.logits(out, self.output).float(), dim=-1)
        lp, ids = logp.topk(min(self.width, logp.shape[-1]), dim=-1)
        return ids, lp.double()

    @torch.no_grad()
    def draft_tree(self, root: int, length: int, depth: int, budget: int) -> CandidateTree:
        """The round's tree: at most ``budget`` nodes, at most ``depth`` deep."""
        device, m = self.pending.device, self.pending.shape[1]
        if self.committed != length - m:
            raise RuntimeError(
                f"eagle cache holds {self.committed} positions; expected {length - m}"
            )
        width = self.width
        self._room(length + width * max(depth - 1, 0))
        # The committed positions: causal among themselves, all earlier ones visible.
        visible = torch.ones(m, length, dtype=torch.bool, device=device)
        visible[:, length - m :] = torch.ones(m, m, dtype=torch.bool, device=device).tril()
        tokens = torch.cat([self.next_tokens, torch.tensor([root], device=device)])[None]
        positions = torch.arange(length - m, length, device=device)[None]
        out = self._pass(self.head.fuse(self.pending), tokens, positions, length - m, visible[None])
        self.committed = length
        ids, lp = self._top(out[0, -1:])
        # Every scored node, level by level: token, parent (-1: root), score.
        toks, parents, scores = [ids[0]], [torch.full_like(ids[0], -1)], [lp[0]]
        frontier = torch.arange(ids.shape[1], device=device)  # node ids, expanded next
        parent_slot = torch.full_like(frontier, -1)  # their parents' buffer slots
        feats = out[:, -1:].expand(1, len(frontier), -1)  # the output each came from
        slots = width * max(depth - 1, 0)
        ancestry = torch.zeros(slots, slots, dtype=torch.bool, device=device)
        used, n_nodes = 0, len(frontier)
        all_tokens, all_scores = toks[0], scores[0]
        for d in range(1, depth):
            k = len(frontier)
            mine = torch.arange(used, used + k, device=device)
            rows = torch.zeros(k, used + k, dtype=torch.bool, device=device)
            has = parent_slot >= 0
            rows[has, :used] = ancestry[parent_slot[has], :used]
            rows[torch.arange(k, device=device), mine] = True
            ancestry[mine, : used + k] = rows
            seen = torch.cat([torch.ones(k, length, dtype=torch.bool, device=device), rows], 1)
            pos = torch.full((1, k), length - 1 + d, device=device)
            out = self._pass(feats, all_tokens[frontier][None], pos, length + used, seen[None])
            used += k
            ids, lp = self._top(out[0])  # (k, width)
            total = (all_scores[frontier][:, None] + lp).reshape(-1)
            toks.append(ids.reshape(-1))
            parents.append(frontier.repeat_interleave(ids.shape[1]))
            scores.append(total)
            best = total.topk(min(width, total.numel())).indices
            row = best // ids.shape[1]
            frontier, parent_slot = n_nodes + best, mine[row]
            feats = out[:, row]
            n_nodes += total.numel()
            all_tokens, all_scores = torch.cat(toks), torch.cat(scores)
        depths = torch.cat([torch.full_like(t, i + 1) for i, t in enumerate(toks)])
        tree = _best_nodes(
            all_tokens.cpu().numpy(),
            torch.cat(parents).cpu().numpy(),
            depths.cpu().numpy(),
            all_scores.cpu().numpy(),
            budget,
        )
        self._last = tree
        return tree


def _best_nodes(tokens, parents, depths, scores, budget: int) -> CandidateTree:
    """The ``budget`` best-scoring nodes, ties to the shallower, packed
    parents-first (by depth, then rank)."""
    scores_a, depths_a = np.asarray(scores), np.asarray(depths, dtype=np.int64)
    order = np.lexsort((depths_a, -scores_a))[:budget]
    keep = order[np.lexsort((np.arange(order.size), depths_a[order]))]
    index = {int(node): i for i, node in enumerate(keep)}
    parents_a = np.asarray(parents, dtype=np.int64)
    new_parents = np.array(
        [index[int(p)] if p >= 0 else -1 for p in parents_a[keep]], dtype=np.int64
    )
    return CandidateTree(
        np.asarray(tokens, dtype=np.int64)[keep], new_parents, depths_a[keep], scores_a[keep]
    )


@dataclass(frozen=True)
class EagleTrainConfig:
    """Training settings. ``rows`` sequences per step, each contributing a
    window of ``window`` consecutive anchors, unrolled ``ttt`` draft steps
    with loss weight ``decay ** j`` at step ``j``."""

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


def _row_batch(head, rows, window: int, ttt: int):
    """End-padded tensors for rows ``(features (L, F), ids (L,), start)``:
    ``(features, ids, valid ids, anchors)``."""
    param = next(head.parameters())
    P = max(start + window for _, _, start in rows)
    R, width = len(rows), P + ttt + 2
    feats = torch.zeros(R, P, rows[0][0].shape[1], dtype=param.dtype)
    ids_all = torch.zeros(R, width, dtype=torch.long)
    valid = torch.zeros(R, width, dtype=torch.bool)
    for r, (f, ids, _) in enumerate(rows):
        n, m = min(P, f.shape[0]), min(width, ids.shape[0])
        feats[r, :n] = f[:n].to(param.dtype)
        ids_all[r, :m], valid[r, :m] = ids[:m], True
    anchors = torch.stack([torch.arange(s, s + window) for _, _, s in rows])
    return tuple(t.to(param.device) for t in (feats, ids_all, valid, anchors))


def ttt_steps(head, target, rows, window: int, ttt: int):
    """The training-time test over ``rows`` (``(features, ids, start)`` per
    row; anchors ``start .. start + window - 1``): yields ``(j, logits,
    labels, ok)`` for draft steps ``j = 0 .. ttt - 1``, each ``(R, W, ...)``.

    Step 0 runs the head causally over positions ``0 .. max end`` (the
    target's features, each with the token after it) and predicts the token
    two ahead at each anchor. Step ``j`` feeds each anchor's step ``j - 1``
    output with the true token ``anchor + j + 1`` at position ``anchor + j``,
    attending to step 0 at positions ``<= anchor`` and to its own anchor's
    earlier steps, as :class:`EagleDrafter` attends at depth ``j + 1``, and
    predicts ``anchor + j + 2``. ``ok`` is False past a sequence's end.
    """
    feats, ids, valid, anchors = _row_batch(head, rows, window, ttt)
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
        ok = valid.gather(1, label_at)
        if not bool(ok.any()):
            return
        yield j, head.logits(hidden, output).float(), ids.gather(1, label_at), ok


def eagle_loss(head, target, rows, window: int, ttt: int, decay: float) -> torch.Tensor:
    """The training loss: each step's mean cross-entropy over valid labels
    (:func:`ttt_steps`), weighted ``decay ** j`` and normalised by the weights."""
    total, weight = 0.0, 0.0
    for j, logits, labels, ok in ttt_steps(head, target, rows, window, ttt):
        nll = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        okf = ok.reshape(-1).float()
        total = total + decay**j * (nll * okf).sum() / okf.sum()
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
    """Train an :class:`EagleHead` on ``sequences`` (``glance.train.Sequence``,
    the target's own answers, the same corpus the block head trains on).

    Returns ``(head, log)`` with the head in eval mode; deterministic for a
    seed on one machine. With ``heldout`` sequences, ``log["heldout_curve"]``
    holds ``[step, loss]`` pairs on fixed windows never trained on.
    """
    import os

    from tqdm import tqdm

    from glance.train import lr_at, optimizer_step, sequence_features

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
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
        probe_rng = np.random.default_rng([cfg.seed, 7])
        probe = [_windows([r], 1, cfg.window, probe_rng)[0] for r in table(heldout)]
        feature_seconds = time.perf_counter() - start
        rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        head.train()
        optim = torch.optim.AdamW(
            head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95)
        )
        losses, curve = [], []

        def evaluate(step):
            if probe:
                head.eval()
                with torch.no_grad():
                    values = [
                        eagle_loss(head, target, [r], cfg.window, cfg.ttt, cfg.decay).item()
                        for r in probe
                    ]
                curve.append([step, float(np.mean(values))])
                head.train()

        bar = tqdm(range(cfg.steps), desc="train eagle head", disable=not progress)
        for step in bar:
            loss = eagle_loss(
                head,
                target,
                _windows(data, cfg.rows, cfg.window, rng),
                cfg.window,
                cfg.ttt,
                cfg.decay,
            )
            losses.append(optimizer_step(optim, head, loss, lr_at(step, cfg)))
            if step % 25 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-25:]):.3f}")
            if step % eval_every == 0:
                evaluate(step)
        evaluate(cfg.steps)
    finally:
        torch.use_deterministic_algorithms(was)
    head.eval().requires_grad_(False)
    log = {
        "feature_seconds": feature_seconds,
        "train_seconds": time.perf_counter() - start - feature_seconds,
        "steps": cfg.steps,
        "final_loss": float(np.mean(losses[-25:])),
        "parameters": sum(p.numel() for p in head.parameters()),
        "target_layer_ids": head.target_layer_ids,
    }
    if curve:
        log["heldout_curve"] = curve
    return head, log
