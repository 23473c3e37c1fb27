"""The toy world's tokenizer and processor: one character per token, the
Qwen-VL special tokens, and Qwen3-VL's processor with one glyph cell per
vision patch. Importing this module registers the processor, so
:func:`glance.targets.vl.load_target` loads a saved toy target; it imports no
torch and nothing of the decoder or the trainers.
"""

from __future__ import annotations

import functools

from glance.targets.vl import register_processor, without_video
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
    "processor_class",
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


@functools.cache
def processor_class():
    """The toy processor class (built on first use, so importing needs no transformers)."""
    from transformers import Qwen3VLProcessor

    class GlanceToyProcessor(without_video(Qwen3VLProcessor)):
        """Qwen3-VL's processor without the video processor (which needs
        torchvision): image and text only, same chat flow and token expansion."""

    return GlanceToyProcessor


# Checkpoints saved with this processor name it in processor_config.json;
# glance.targets.vl.load_target finds it here once this module is imported.
register_processor("GlanceToyProcessor", processor_class)


def build_processor():
    """Tokenizer + Qwen-VL image processor (patch = one glyph cell, merge 1)."""
    from transformers import Qwen2VLImageProcessorPil

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
    return processor_class()(image_processor, build_tokenizer(), chat_template=CHAT_TEMPLATE)
