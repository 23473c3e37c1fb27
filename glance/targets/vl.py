"""Loading targets, and the position ids every target pass needs.

A decoding run asks its ``positions`` object for two things: the keyword
arguments of the prefill pass (:meth:`prefill`), and the ``position_ids`` of a
later pass over tokens at given sequence indices (:meth:`rows`).

* :class:`StreamPositions` (the default) serves text targets: position = index.
* :class:`VisionPositions` serves Qwen2-VL, Qwen2.5-VL and Qwen3-VL. The prefill
  gets the image inputs and the M-RoPE ids from the model's own
  ``get_rope_index``; every later pass gets three explicit rows, each
  ``index + rope_delta``. (transformers 5.x would broadcast 2-D ids to all rows
  without the delta, so the rows are always passed.)
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

__all__ = [
    "FILLER",
    "STOP_TOKENS",
    "StreamPositions",
    "VisionPositions",
    "chat_inputs",
    "control_tokens",
    "filler",
    "positions_from",
    "stop_ids",
    "user_turn",
    "load_processor",
    "load_target",
    "register_processor",
    "text_config",
]


def text_config(target):
    """The language-model config of ``target`` (itself for a text model)."""
    return target.config.get_text_config()


class StreamPositions:
    """Plain 1-D positions for text targets: a token's position is its index."""

    def prefill(self, target, input_ids: torch.Tensor) -> tuple[dict, int]:
        """Extra prefill kwargs and the rope delta (always 0 here)."""
        n = input_ids.shape[1]
        return {"position_ids": torch.arange(n, device=input_ids.device)[None]}, 0

    def rows(self, index: torch.Tensor, delta: int) -> torch.Tensor:
        """``position_ids`` of shape ``(1, n)`` for tokens at sequence ``index`` ``(n,)``."""
        return index[None]


class VisionPositions:
    """M-RoPE positions and the image inputs of one Qwen-VL prompt.

    Args:
        pixel_values, image_grid_thw: as the model's processor returns them.
        mm_token_type_ids: 0 text, 1 image, 2 video per prompt token; computed
            from the config's image and video token ids when omitted.
        **extra: any other prefill-only inputs (e.g. ``second_per_grid_ts``).
    """

    def __init__(self, pixel_values, image_grid_thw, mm_token_type_ids=None, **extra):
        self.pixel_values = pixel_values
        self.image_grid_thw = image_grid_thw
        self.mm_token_type_ids = mm_token_type_ids
        self.extra = extra

    def token_types(self, target, input_ids: torch.Tensor) -> torch.Tensor:
        """0 text, 1 image, 2 video for each prompt token (given, or read off the ids)."""
        if self.mm_token_type_ids is not None:
            types = self.mm_token_type_ids.to(input_ids.device)
            if types.shape != input_ids.shape:
                raise ValueError(
                    f"mm_token_type_ids has shape {tuple(types.shape)}; "
                    f"expected the prompt's {tuple(input_ids.shape)}"
                )
            return types
        config = target.config
        types = torch.zeros_like(input_ids, dtype=torch.int32)
        types[input_ids == config.image_token_id] = 1
        video = getattr(config, "video_token_id", None)
        if video is not None:
            types[input_ids == video] = 2
        return types

    def prefill(self, target, input_ids: torch.Tensor) -> tuple[dict, int]:
        """Prefill kwargs (images, token types, 3-row M-RoPE ids) and the rope delta."""
        device = input_ids.device
        types = self.token_types(target, input_ids)
        grid = self.image_grid_thw.to(device)
        extra = {k: v.to(device) if torch.is_tensor(v) else v for k, v in self.extra.items()}
        position_ids, deltas = target.model.get_rope_index(
            input_ids, mm_token_type_ids=types, image_grid_thw=grid, **extra
        )
        kwargs = {
            "pixel_values": self.pixel_values.to(device, target.dtype),
            "image_grid_thw": grid,
            "mm_token_type_ids": types,
            "position_ids": position_ids,
            **extra,
        }
        return kwargs, int(deltas.reshape(-1)[0])

    def rows(self, index: torch.Tensor, delta: int) -> torch.Tensor:
        """``position_ids`` of shape ``(3, 1, n)``: ``index + delta`` on every row."""
        return (index + delta).view(1, 1, -1).expand(3, 1, -1)


def user_turn(text: str, image=None) -> list[dict]:
    """One user message for a chat template: the question, then the image
    (when given), as every GLANCE prompt is laid out."""
    content = [{"type": "text", "text": text}]
    if image is not None:
        content.append({"type": "image", "image": image})
    return [{"role": "user", "content": content}]


def positions_from(inputs):
    """The decoder's positions for processor output: :class:`VisionPositions`
    when it carries an image, else :class:`StreamPositions`."""
    if inputs.get("pixel_values") is None:
        return StreamPositions()
    return VisionPositions(
        inputs["pixel_values"], inputs["image_grid_thw"], inputs.get("mm_token_type_ids")
    )


def chat_inputs(processor, text: str, image=None):
    """``(input_ids, positions)`` for one user turn (:func:`user_turn`) through
    the processor's chat template, with the assistant's turn opened.

    ``text`` must be a ``str`` free of the tokenizer's special tokens (see
    :func:`control_tokens`): tokenised, ``"<|im_start|>"`` in a question would
    open a turn and ``"<|image_pad|>"`` would shift the image's positions, so
    either raises ``ValueError`` naming the token. Added tokens that are not
    special (e.g. Qwen's ``<tool_call>``) are left as they are.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    found = [(text.find(t), -len(t), t) for t in control_tokens(processor) if t in text]
    if found:
        at, _, token = min(found)  # the first in the text; the longest there
        raise ValueError(
            f"text holds the special token {token!r} at character {at}; the chat template "
            "would read it as a control token, so remove it from the prompt"
        )
    inputs = processor.apply_chat_template(
        user_turn(text, image),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    return inputs["input_ids"], positions_from(inputs)


def control_tokens(processor) -> list[str]:
    """The strings that tokenise to a special token of ``processor``'s tokenizer
    (its ``all_special_tokens`` and its added tokens marked special), plus the
    processor's own image and video placeholders, sorted."""
    tok = getattr(processor, "tokenizer", processor)
    tokens = set(getattr(tok, "all_special_tokens", None) or ())
    added = getattr(tok, "added_tokens_decoder", None) or {}
    tokens |= {getattr(t, "content", str(t)) for t in added.values() if getattr(t, "special", 0)}
    for name in ("image_token", "video_token", "vision_start_token", "vision_end_token"):
        value = getattr(processor, name, None)
        if isinstance(value, str):
            tokens.add(value)
    return sorted(t for t in tokens if t)


#: end-of-turn and end-of-text markers of the Qwen chat format
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def stop_ids(processor, target) -> list[int]:
    """The ids an answer stops at: the chat format's end-of-turn and
    end-of-text tokens where the tokenizer knows them, and the target's
    ``generation_config.eos_token_id``."""
    tok = getattr(processor, "tokenizer", processor)
    ids = {tok.convert_tokens_to_ids(t) for t in STOP_TOKENS}
    eos = target.generation_config.eos_token_id
    ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    unk = getattr(tok, "unk_token_id", None)
    return sorted(i for i in ids if isinstance(i, int) and i >= 0 and i != unk)


def load_target(
    name_or_path,
    *,
    dtype=torch.bfloat16,
    device="cpu",
    attn_implementation: str = "sdpa",
    trust_remote_code: bool = False,
    revision: str | None = None,
    allow_pickle: bool = False,
):
    """Load a frozen target and its processor: ``(model, processor)``.

    Vision-language checkpoints (their config has a ``vision_config``) load
    through ``AutoModelForImageTextToText`` and ``AutoProcessor``; text
    checkpoints through ``AutoModelForCausalLM`` and ``AutoTokenizer``. Works
    for a hub name where the weights are reachable and for a local directory
    written by ``save_pretrained`` (a ``Path``, or a string with a leading
    ``/``, ``.`` or ``~``: see :func:`glance._io.checkpoint_path`; a missing one
    fails at once, with no network attempt). ``processor`` is ``None`` when the
    checkpoint ships no tokenizer or processor files. The model is in eval mode
    with gradients off. ``revision`` (a branch, tag or commit hash) pins hub
    weights.

    Loading is strict: safetensors only unless ``allow_pickle``, and missing or
    unexpected weights raise ``ValueError`` naming them.
    """
    import transformers as tf

    from glance._io import checkpoint_path, load_strict

    source = checkpoint_path(name_or_path, "target")
    if isinstance(source, Path):
        from glance._weights import check_checkpoint

        # config dtype and every safetensors header, named, before transformers reads
        # them; integer tensors stay allowed (a quantized target holds them)
        check_checkpoint(source, "target", floating=False)
    hub = {"trust_remote_code": trust_remote_code, "revision": revision}
    config = tf.AutoConfig.from_pretrained(str(source), **hub)
    vision = hasattr(config, "vision_config")
    model_cls = tf.AutoModelForImageTextToText if vision else tf.AutoModelForCausalLM
    model = load_strict(
        model_cls,
        source,
        "target",
        allow_pickle=allow_pickle,
        dtype=dtype,
        attn_implementation=attn_implementation,
        **hub,
    )
    model = model.to(device).eval().requires_grad_(False)
    processor = load_processor(source, vision, **hub)
    return model, processor


def load_processor(
    name_or_path, vision: bool = True, trust_remote_code: bool = False, revision=None
):
    """The checkpoint's processor (``AutoProcessor``; ``AutoTokenizer`` when
    ``vision`` is false), or ``None`` for a local folder that ships no
    tokenizer or processor files. Loads no weights."""
    import transformers as tf

    local = Path(str(name_or_path))
    hub = {"trust_remote_code": trust_remote_code, "revision": revision}
    if local.is_dir() and not any((local / f).is_file() for f in _PROCESSOR_FILES):
        return None  # a bare local checkpoint, e.g. a test model
    processor_cls = tf.AutoProcessor if vision else tf.AutoTokenizer
    name = _processor_class_name(local)
    if name is not None and not hasattr(tf, name):
        if name not in PROCESSORS:
            raise ValueError(
                f"{local}: processor_class {name!r} is neither in transformers nor registered "
                "with glance.targets.vl.register_processor"
            )
        processor_cls = PROCESSORS[name]()
    try:
        return processor_cls.from_pretrained(str(name_or_path), **hub)
    except (ImportError, ValueError, AttributeError):  # video or fast image processors
        import importlib.util

        if not (vision and local.is_dir() and importlib.util.find_spec("torchvision") is None):
            raise
        return image_only_processor(local, name)


def image_only_processor(local: Path, name: str | None):
    """A checkpoint's Qwen-VL processor without torchvision: its own processor
    class minus the video processor, the PIL twin of its image processor, and
    its tokenizer and chat template. Images and text go through exactly as
    with the full processor; only video is gone. Used when torchvision is
    missing (it has no wheel for every torch build)."""
    import logging

    import transformers as tf

    name = name or json.loads((local / "preprocessor_config.json").read_text()).get(
        "processor_class"
    )
    base = getattr(tf, name or "", None)
    if base is None:
        raise ValueError(f"{local}: no processor_class to load without torchvision")
    image_config = json.loads((local / "preprocessor_config.json").read_text(encoding="utf-8"))
    image_type = image_config.get("image_processor_type", "Qwen2VLImageProcessor")
    image_cls = getattr(tf, image_type.removesuffix("Fast") + "Pil")
    tokenizer = tf.AutoTokenizer.from_pretrained(str(local))
    template = local / "chat_template.jinja"
    chat_template = template.read_text(encoding="utf-8") if template.is_file() else None

    logging.getLogger(__name__).warning(
        "%s: torchvision is missing; %s loads for images and text only (%s)",
        local, name, image_cls.__name__,
    )  # fmt: skip
    processor = without_video(base)
    return processor(image_cls.from_pretrained(str(local)), tokenizer, chat_template=chat_template)


@functools.cache
def without_video(base):
    """``base`` (a Qwen-VL processor class) taking no video processor: images
    and text go through its own chat flow and token expansion unchanged."""
    from transformers import ProcessorMixin

    class ImageOnly(base):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
            self.vision_start_token, self.vision_end_token = "<|vision_start|>", "<|vision_end|>"
            ids = tokenizer.convert_tokens_to_ids
            self.image_token_id, self.video_token_id = ids(self.image_token), ids(self.video_token)
            self.vision_start_token_id = ids(self.vision_start_token)
            self.vision_end_token_id = ids(self.vision_end_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageOnly


#: processor classes outside transformers, by the name a checkpoint's
#: ``processor_config.json`` gives; see :func:`register_processor`
PROCESSORS: dict = {}


def register_processor(name: str, factory) -> None:
    """Let :func:`load_target` load checkpoints whose ``processor_class`` is
    ``name``, a class that ``factory()`` returns (a ``ProcessorMixin``)."""
    PROCESSORS[name] = factory


def _processor_class_name(local: Path) -> str | None:
    config = local / "processor_config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text(encoding="utf-8")).get("processor_class")


# Files whose presence means a checkpoint ships its tokenizer or processor.
_PROCESSOR_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
)


FILLER = "note the page below and answer from it. "


def filler(n_tokens: int, tokenizer) -> str:
    """About ``n_tokens`` tokens of neutral preamble text (whole words of
    :data:`FILLER`, repeated), the same for every prompt; empty for ``n <= 0``.
    The text is the fewest words that tokenise to at least ``n_tokens``; the
    count grows with each word, so the word count is found by doubling, then
    bisection: about ``2 * log2(n)`` tokeniser calls, not one per word."""
    if n_tokens <= 0:
        return ""
    words = FILLER.split()

    def text(k: int) -> str:
        return "".join(words[i % len(words)] + " " for i in range(k))

    def enough(k: int) -> bool:
        return len(tokenizer(text(k))["input_ids"]) >= n_tokens

    high = 1
    while not enough(high):
        high *= 2
    low = high // 2  # not enough at low (or low == 0), enough at high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return text(high)
