"""The toy world's tokenizer and processor: one character per token, the
Qwen-VL special tokens, and Qwen3-VL's processor with one glyph cell per
vision patch. :func:`save_processor` writes them as a Qwen3-VL hub checkpoint
lays out its processor files, so a saved toy target loads with plain
``transformers`` (``AutoProcessor`` where torchvision is installed, which
Qwen3-VL's video processor needs) and with
:func:`glance.targets.vl.load_target` everywhere. Imports no torch and nothing
of the decoder or the trainers.
"""

from __future__ import annotations

import json
from pathlib import Path

from glance.targets.vl import without_video
from glance.toy.tasks import ALPHABET, CELL, COLS, ROWS

__all__ = [
    "CHARS",
    "IMAGE_MEAN",
    "IMAGE_STD",
    "PATCH",
    "SPECIAL",
    "TEMPORAL",
    "build_processor",
    "build_tokenizer",
    "save_processor",
]

SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|mask|>",
)
CHARS = tuple(ALPHABET) + ("\n",)
# A Qwen-VL chat template: content parts in order, one image placeholder per image.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IMAGE_MEAN, IMAGE_STD = 1.0, 0.5  # white (1.0 after rescale) maps to 0
PATCH, TEMPORAL = CELL, 2


def build_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` with the Qwen-VL special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL, *CHARS, "<unk>"))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=list(SPECIAL[1:]),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_processor():
    """Tokenizer + Qwen-VL image processor (patch = one glyph cell, merge 1)."""
    from transformers import Qwen2VLImageProcessorPil, Qwen3VLProcessor

    image_processor = Qwen2VLImageProcessorPil(
        patch_size=PATCH,
        merge_size=1,
        temporal_patch_size=TEMPORAL,
        image_mean=[IMAGE_MEAN] * 3,
        image_std=[IMAGE_STD] * 3,
        do_resize=False,
        min_pixels=PATCH * PATCH,
        max_pixels=ROWS * COLS * CELL * CELL * 4,
    )
    processor = without_video(Qwen3VLProcessor)
    return processor(image_processor, build_tokenizer(), chat_template=CHAT_TEMPLATE)


def save_processor(
    processor,
    folder,
    processor_class: str = "Qwen3VLProcessor",
    video_class: str = "Qwen3VLVideoProcessor",
) -> None:
    """Write ``processor``'s files into ``folder`` as a Qwen-VL hub checkpoint
    has them: the tokenizer, ``preprocessor_config.json`` naming
    ``processor_class``, ``video_preprocessor_config.json`` (``video_class``,
    the same patch geometry; the toy has no video) and the chat template."""
    from glance._io import atomic_write_text

    folder = Path(folder)
    processor.tokenizer.save_pretrained(folder)
    processor.image_processor.save_pretrained(folder)
    image = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    image["processor_class"] = processor_class
    shared = ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")
    shared += ("do_rescale", "rescale_factor", "do_normalize", "do_convert_rgb", "size")
    video = {k: image[k] for k in shared} | {
        "video_processor_type": video_class,
        "processor_class": processor_class,
        "do_resize": False,
        "do_sample_frames": False,
    }
    for name, data in (
        ("preprocessor_config.json", image),
        ("video_preprocessor_config.json", video),
    ):
        atomic_write_text(folder / name, json.dumps(data, indent=2, sort_keys=True) + "\n")
    atomic_write_text(folder / "chat_template.jinja", processor.chat_template)
