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

import torch
import torch.nn.functional as F
from transformers import PretrainedConfig, PreTrainedModel

from glance.heads.block import default_layer_ids
from glance.targets.vl import text_config

__all__ = ["EagleConfig", "EagleHead", "build_eagle_head", "check_eagle_fits", "load_eagle_head"]


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
