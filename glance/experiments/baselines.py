"""The decoders GLANCE is measured against, on the same prompts and targets.

* :func:`hf_generate`: ``transformers``' own ``generate`` (greedy, or with
  ``prompt_lookup_num_tokens`` its prompt-lookup speculation), fed the same
  image inputs the GLANCE decoders get.
* :func:`dflash_generate`: the ``dflash`` package's own block-drafting loop,
  run through :class:`WithImage` so a vision-language prompt reaches it.

Each returns the new token ids (cut after the first stop token) and, for the
drafting ones, ``(committed, rounds)`` to pool tau as GLANCE's rows do.
"""

from __future__ import annotations

import torch

from glance.targets.vl import VisionPositions

__all__ = ["WithImage", "dflash_generate", "hf_generate"]


def _cut(new: list[int], stops) -> list[int]:
    """``new`` up to and including its first stop token (``generate`` pads after it)."""
    hits = [new.index(t) for t in stops or () if t in new]
    return new[: min(hits) + 1] if hits else new


def hf_generate(target, input_ids, positions: VisionPositions, max_new_tokens: int, stops, **extra):
    """``target.generate`` (greedy) on one prompt; ``extra`` passes on, for
    example ``prompt_lookup_num_tokens``. Returns the new token ids."""
    device = target.device
    inputs = dict(
        input_ids=input_ids.to(device),
        attention_mask=torch.ones_like(input_ids).to(device),
        pixel_values=positions.pixel_values.to(device, target.dtype),
        image_grid_thw=positions.image_grid_thw.to(device),
        mm_token_type_ids=positions.token_types(target, input_ids).to(device),
    )
    out = target.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=list(stops) or None,
        pad_token_id=stops[0] if stops else None,
        **extra,
    )
    return _cut(out[0, input_ids.shape[1] :].tolist(), stops)


class WithImage:
    """A target whose first call (the prefill) gets the image inputs and M-RoPE
    ids, and whose later calls get 3-row positions with the rope delta: what
    ``dflash``'s loop, written for text targets, needs to run a VL prompt. It
    also counts its calls, so the loop's rounds can be counted without its
    timing code."""

    def __init__(self, target, positions: VisionPositions):
        self._target, self._positions, self._delta = target, positions, None
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._target, name)

    def __call__(self, input_ids, position_ids=None, **kwargs):
        self.calls += 1
        if self._delta is None:
            extra, self._delta = self._positions.prefill(self._target, input_ids)
            return self._target(input_ids, **extra, **kwargs)
        rows = self._positions.rows(position_ids[0], self._delta)
        return self._target(input_ids, position_ids=rows, **kwargs)


def dflash_generate(
    head, target, input_ids, positions: VisionPositions, max_new_tokens: int, stops
):
    """``dflash``'s own greedy loop with ``head`` on one VL prompt. Returns the
    new token ids and ``(committed, rounds)``: every target call after the
    prefill is one round, and every token after the prefill's was committed by
    one. (``dflash``'s own statistics are not asked for: its clock needs CUDA.)"""
    from dflash.model import dflash_generate as loop

    wrapped = WithImage(target, positions)
    out = loop(head, wrapped, input_ids.to(target.device), max_new_tokens, list(stops) or None)
    new = _cut(out[0, input_ids.shape[1] :].tolist(), stops)
    return new, (len(new) - 1, wrapped.calls - 1)
