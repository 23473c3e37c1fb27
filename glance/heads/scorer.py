"""A causal consistency scorer for the block head's candidate tree.

The block head gives each offset ``k`` of a block a marginal over tokens, all
from one pass. Ranking paths by the product of those marginals assumes the
offsets independent given the context: true of copied spans, false of free
text, where the token at ``k`` depends on the ones the path chose before it.
The scorer re-ranks the head's top-``K`` candidates at each offset by a tiny
recurrent state that runs along the path (a causal correction; DFlash 2's
candidate selector scores neighbouring pairs only)::

    s_k = tanh(A s_{k-1} + embed[y_{k-1}])            s_0 = 0, y_0 the root
    q_k = s_k * (1 + W h_k)                            h_k the head's hidden state
    pair(c) = < q_k , successor[c] >

Within the offset's candidates the pair term re-weights the head's
probabilities and keeps their total mass, so a path's step score

    s(c | path) = log P(c) + pair(c) - log sum_{c' in K} P(c') exp(pair(c')) + log P(K)

is at most 0 (a path's score never rises as it deepens, so the best nodes are
prefix-closed) and equals ``log P(c)`` when the pair term is 0. The successor
table starts at zero, so an untrained scorer ranks paths exactly as the
product of marginals does.

Cost per round: one ``(D, H) x (H, r)`` projection and a ``K x r`` lookup per
offset, next to the head's pass; then, for each node the tree search expands,
one ``r x r`` step of the state and ``K`` rank-``r`` dot products. None of it
grows with the vocabulary or the head's width.
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig, PreTrainedModel

__all__ = [
    "CausalScorer",
    "ScorerConfig",
    "build_scorer",
    "check_scorer_fits",
    "head_digest",
    "load_scorer",
    "step_scores",
]


class ScorerConfig(PretrainedConfig):
    """Shape of a :class:`CausalScorer`: the head's ``hidden_size``, the
    target's ``vocab_size``, the state's ``rank`` and ``top_k``, the
    candidates per offset it was trained to re-rank; ``head_digest`` and
    ``head_dtype`` name the block head it was trained behind
    (:func:`head_digest`), so that it is never used behind another."""

    model_type = "glance_causal_scorer"

    def __init__(
        self,
        *,
        hidden_size: int = 128,
        vocab_size: int = 128,
        rank: int = 32,
        top_k: int = 8,
        initializer_range: float = 0.02,
        head_digest: str | None = None,
        head_dtype: str | None = None,
        **kwargs,
    ):
        self.head_digest = head_digest
        self.head_dtype = head_dtype
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.rank = rank
        self.top_k = top_k
        self.initializer_range = initializer_range
        super().__init__(**kwargs)


class CausalScorer(PreTrainedModel):
    """The state's tables: ``embed`` (``V x r``), ``recurrence`` (``r -> r``),
    ``hidden_projection`` (``H -> r``) and ``successor`` (``V x r``)."""

    config_class = ScorerConfig
    base_model_prefix = "scorer"

    def __init__(self, config: ScorerConfig):
        super().__init__(config)
        r = config.rank
        self.embed = torch.nn.Embedding(config.vocab_size, r)
        self.recurrence = torch.nn.Linear(r, r, bias=False)
        self.hidden_projection = torch.nn.Linear(config.hidden_size, r, bias=False)
        self.successor = torch.nn.Embedding(config.vocab_size, r)
        self.post_init()

    def _init_weights(self, module):
        if module is getattr(self, "successor", None):
            module.weight.data.zero_()  # untrained: the product of marginals exactly
        elif module is getattr(self, "embed", None):
            module.weight.data.normal_(0.0, 1.0)
        elif isinstance(module, torch.nn.Linear):
            module.weight.data.normal_(0.0, self.config.initializer_range)

    def states(self, previous: torch.Tensor) -> torch.Tensor:
        """``s_1 .. s_D`` of shape ``(..., D, r)`` from the path's tokens
        ``previous`` ``(..., D)``: the root, then the tokens at offsets 1..D-1."""
        emb = self.embed(previous)
        state = torch.zeros_like(emb[..., 0, :])
        out = []
        for k in range(previous.shape[-1]):
            state = torch.tanh(self.recurrence(state) + emb[..., k, :])
            out.append(state)
        return torch.stack(out, dim=-2)

    def pair(self, hidden: torch.Tensor, previous: torch.Tensor, candidates: torch.Tensor):
        """``pair(c)`` of shape ``(..., D, K)`` for the head's ``hidden``
        ``(..., D, H)``, the path ``previous`` ``(..., D)`` (as :meth:`states`
        takes it) and the ``candidates`` ``(..., D, K)``."""
        query = self.states(previous) * (1.0 + self.hidden_projection(hidden))
        return torch.einsum("...r,...kr->...k", query, self.successor(candidates))


def step_scores(logprobs: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
    """``s(c | path)`` (module docstring), ``(..., K)``, from the candidates'
    full log-probabilities ``logprobs`` and the pair term ``pair``, both ``(..., K)``."""
    mass = torch.logsumexp(logprobs, dim=-1, keepdim=True)
    shifted = logprobs + pair
    return (shifted - torch.logsumexp(shifted, dim=-1, keepdim=True) + mass).clamp_max(0.0)


def _sizes(head, target) -> tuple[int, int]:
    from glance.targets.vl import text_config

    return int(head.config.hidden_size), int(text_config(target).vocab_size)


def head_digest(head) -> str:
    """SHA-256 over ``head``'s weights (names and bytes, in name order), as
    they are in the head's own dtype."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(head.state_dict().items()):
        h.update(
            name.encode() + tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
        )
    return h.hexdigest()


def build_scorer(head, target, rank: int = 32, top_k: int = 8, seed: int = 0) -> CausalScorer:
    """A fresh :class:`CausalScorer` for a block ``head`` drafting for
    ``target``, in the head's dtype, recording the head (:func:`head_digest`);
    it ranks paths as the product of marginals until trained."""
    torch.manual_seed(seed)
    hidden, vocab = _sizes(head, target)
    dtype = str(next(head.parameters()).dtype).removeprefix("torch.")
    config = ScorerConfig(
        hidden_size=hidden,
        vocab_size=vocab,
        rank=int(rank),
        top_k=int(top_k),
        head_digest=head_digest(head),
        head_dtype=dtype,
    )
    return CausalScorer(config).to(next(head.parameters()).dtype)


def check_scorer_fits(scorer: CausalScorer, head, target) -> None:
    """Raise ``ValueError`` naming the field and both values if ``scorer``
    cannot re-rank ``head``'s candidates for ``target``."""
    for name, mine, theirs in zip(
        ("hidden_size", "vocab_size"),
        (scorer.config.hidden_size, scorer.config.vocab_size),
        _sizes(head, target),
        strict=True,
    ):
        if mine != theirs:
            raise ValueError(f"scorer {name} is {mine} but the head's is {theirs}")
    recorded = getattr(scorer.config, "head_digest", None)
    dtype = str(next(head.parameters()).dtype).removeprefix("torch.")
    if recorded and dtype == scorer.config.head_dtype and head_digest(head) != recorded:
        raise ValueError(
            f"scorer was trained behind head {recorded[:12]}, not this head "
            f"({head_digest(head)[:12]}); retrain it behind this head (python -m stages.scorer)"
        )


def load_scorer(path, head=None, target=None, allow_pickle: bool = False) -> CausalScorer:
    """Load a :class:`CausalScorer` strictly (safetensors only, no missing or
    unexpected weights, no NaN); with ``head`` and ``target``, check that it
    fits them and match the head's dtype and device."""
    from glance._io import load_strict
    from glance._weights import check_checkpoint, check_finite

    dtype = next(head.parameters()).dtype if head is not None else torch.float32
    check_checkpoint(path, "scorer")
    scorer = load_strict(CausalScorer, path, "scorer", allow_pickle=allow_pickle, dtype=dtype)
    check_finite(scorer.state_dict().items(), path, "scorer")
    if head is not None and target is not None:
        check_scorer_fits(scorer, head, target)
        scorer = scorer.to(next(head.parameters()).device)
    return scorer.eval().requires_grad_(False)
