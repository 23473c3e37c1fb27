"""The built-in toy world: a character tokenizer, a Qwen-VL processor and a tiny
``Qwen3VLForConditionalGeneration`` trained here on the five toy tasks.

Everything is built from configs and saved with ``save_pretrained``, and loads
back through :func:`glance.targets.vl.load_target` like a real checkpoint. Choices that
make a 1M-parameter VLM learn to read in minutes on two CPU cores: one glyph per
vision patch (patch = cell, spatial merge 1), white mapped to 0 (mean 1, std
0.5), ``rope_theta`` 100, the question before the image.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from glance.toy.config import EagleWindows, HeadTrain
from glance.toy.processor import (
    IMAGE_MEAN,
    IMAGE_STD,
    TEMPORAL,
    build_tokenizer,
)
from glance.toy.tasks import (
    ALPHABET,
    COLS,
    LONG_TASK,
    ROWS,
    TASKS,
    glyph,
    make_example,
    render,
)


def glyph_table() -> torch.Tensor:
    """``(len(ALPHABET), 3 * TEMPORAL * PATCH**2)`` float32: each character's patch
    vector exactly as the image processor lays it out (channels, frames, rows,
    columns), so a page's ``pixel_values`` are rows of this table."""
    cells = np.stack([glyph(ch) for ch in ALPHABET]).astype(np.float32)
    values = (cells / 255.0 - IMAGE_MEAN) / IMAGE_STD
    flat = values.reshape(len(ALPHABET), -1)
    return torch.from_numpy(np.tile(flat, (1, 3 * TEMPORAL)))


def page_pixels(lines, table: torch.Tensor) -> torch.Tensor:
    """``(ROWS * COLS, patch_dim)`` pixel values of a page, row-major by cell."""
    index = [ALPHABET.index(ch) for line in lines for ch in line.ljust(COLS)]
    return table[index]


def prompt_text(prompt: str) -> str:
    """The chat-formatted user turn with the image expanded, as the processor makes it."""
    image = "<|vision_start|>" + "<|image_pad|>" * (ROWS * COLS) + "<|vision_end|>"
    return f"<|im_start|>user\n{prompt}{image}<|im_end|>\n<|im_start|>assistant\n"


class Encoder:
    """Turns examples into token ids with the toy tokenizer's vocabulary."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        self.image = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self._prompts: dict[str, list[int]] = {}

    def prompt(self, prompt: str, context: int = 0) -> list[int]:
        """The chat-formatted prompt's ids, with ``context`` tokens of
        :func:`glance.targets.vl.filler` before the question (as the context runs put it)."""
        key = (prompt, context)
        if key not in self._prompts:
            from glance.targets.vl import filler

            text = prompt_text(filler(context, self.tokenizer) + prompt)
            self._prompts[key] = self.tokenizer(text).input_ids
        return self._prompts[key]

    def answer(self, text: str) -> list[int]:
        return self.tokenizer.convert_tokens_to_ids(list(text)) + [self.end]


def make_batch(encoder: Encoder, items, table: torch.Tensor, contexts=None) -> dict:
    """Right-padded training batch from ``(Example, answer_text)`` pairs, each
    prompt with ``contexts[i]`` filler tokens before the question (default none).

    ``loss_mask[b, t]`` marks positions whose *next* token is an answer token
    (the closing ``<|im_end|>`` included).
    """
    seqs, starts = [], []
    for i, (example, answer) in enumerate(items):
        prompt = encoder.prompt(example.prompt, contexts[i] if contexts else 0)
        seqs.append(prompt + encoder.answer(answer))
        starts.append(len(prompt))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), encoder.pad, dtype=torch.long)
    attention = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids, dtype=torch.bool)
    for b, (seq, start) in enumerate(zip(seqs, starts, strict=True)):
        ids[b, : len(seq)] = torch.tensor(seq)
        attention[b, : len(seq)] = 1
        loss_mask[b, start - 1 : len(seq) - 1] = True
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "pixel_values": torch.cat([page_pixels(ex.lines, table) for ex, _ in items]),
        "image_grid_thw": torch.tensor([[1, ROWS, COLS]] * len(items)),
        "mm_token_type_ids": (ids == encoder.image).to(torch.int32),
        "loss_mask": loss_mask,
    }


def answer_loss(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over answer tokens, and the per-position entropies there."""
    inputs = {k: v for k, v in batch.items() if k != "loss_mask"}
    logits = model(**inputs).logits[:, :-1].float()
    mask = batch["loss_mask"][:, :-1]
    targets = batch["input_ids"][:, 1:]
    logp = torch.log_softmax(logits[mask], dim=-1)
    loss = -logp.gather(-1, targets[mask][:, None]).mean()
    entropy = -(logp.exp() * logp).sum(-1)
    return loss, entropy


def make_example_from_record(task: str, record: dict):
    """An :class:`~glance.toy.tasks.Example` back from a JSONL record."""
    from glance.toy.tasks import Example

    return Example(task, tuple(record["lines"]), record["prompt"], record["answer"])


def save_json(path, data) -> None:
    from glance._io import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def conversations(records, data_dir) -> list:
    """Chat messages (question, then image) for JSONL records."""
    from PIL import Image

    return [
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": r["prompt"]},
                    {
                        "type": "image",
                        "image": Image.open(Path(data_dir) / r["image"]).convert("RGB"),
                    },
                ],
            }
        ]
        for r in records
    ]


def toy_prompts(
    n: int, seed: int, long_share: float = 0.0, context: int = 0, context_share: float = 0.0
) -> list:
    """``n`` fresh training conversations, a uniform mix of the tasks (never the
    held-out files, which are drawn from other seeds). A ``long_share`` of them
    are ``longform`` prompts and a ``context_share`` carry up to ``context``
    filler tokens before the question, so a head sees the long outputs and long
    prompts the bench and panel (c) decode. Ordered short, then with context,
    then longform, so batches of similar length decode together."""
    from glance.targets.vl import filler

    tokenizer = build_tokenizer()
    rng = np.random.default_rng([seed, 99])
    n_long = int(round(n * long_share))
    n_ctx = int(round(n * context_share)) if context else 0
    out = []
    for i in range(n):
        kind = "long" if i >= n - n_long else "context" if i >= n - n_long - n_ctx else "short"
        task = LONG_TASK if kind == "long" else TASKS[int(rng.integers(len(TASKS)))]
        ex = make_example(task, rng)
        preamble = filler(int(rng.integers(context + 1)), tokenizer) if kind == "context" else ""
        content = [
            {"type": "text", "text": preamble + ex.prompt},
            {"type": "image", "image": render(ex.lines)},
        ]
        out.append([{"role": "user", "content": content}])
    return out


def toy_parts(
    *,
    greedy: int,
    sampled: int,
    seed: int,
    long_share: float,
    context: int,
    heldout: int,
    context_share: float = 0.0,
    **_,
) -> list:
    """The toy corpus's conversations (:class:`~glance.training.corpus.Part`):
    ``greedy`` prompts answered greedily and ``sampled`` at temperature 1 (seeds
    ``seed`` and ``seed + 1``), both for training, and ``heldout`` more from
    ``seed + 2``, short and without filler, for the held-out loss curve."""
    from glance.training.corpus import Part

    def part(name, n, prompt_seed, temperature=0.0, share=long_share, ctx=context):
        convs = toy_prompts(n, prompt_seed, share, ctx, context_share)
        return Part(name, "toy", convs, range(n), temperature, prompt_seed)

    parts = [part("train", greedy, seed)]
    if sampled:
        parts.append(part("train", sampled, seed + 1, temperature=1.0))
    if heldout:
        parts.append(part("heldout", heldout, seed + 2, share=0.0, ctx=0))
    return parts


def toy_answerer(target, processor, max_new_tokens: int):
    """``answer(conversations, temperature, seed)`` for the toy target: its own
    answers up to ``max_new_tokens``, ending at ``<|im_end|>``."""
    from glance.training.block import answerer

    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return answerer(target, processor, max_new_tokens, end)


def toy_corpus(target, processor, *, max_new_tokens: int, **recipe):
    """The heads' training data in memory: ``(sequences, heldout_sequences, seconds)``,
    the target's answers to :func:`toy_parts` (``recipe``), each part answered
    in batches of 32 as ``stages.corpus`` does, so the answers are the same."""
    start = time.perf_counter()
    answer = toy_answerer(target, processor, max_new_tokens)
    sequences, probe = [], []
    for part in toy_parts(**recipe):
        got = []
        for b in range(0, len(part.conversations), 32):
            got += answer(part.conversations[b : b + 32], part.temperature, part.seed + b)
        (sequences if part.name == "train" else probe).extend(got)
    return sequences, probe, time.perf_counter() - start


def train_toy_head(target_dir, out_dir, train: HeadTrain) -> dict:
    """Train a DFlash head for a saved toy target on :func:`toy_corpus` and
    save it to ``out_dir`` (built aside, then renamed into place). Returns the
    training log."""
    from glance._io import replace_dir
    from glance.targets.vl import load_target
    from glance.training.block import HeadConfig, train_head

    torch.manual_seed(train.seed)
    target, processor = load_target(target_dir, dtype=torch.float32)
    sequences, probe, regen_seconds = toy_corpus(target, processor, **train.corpus())
    mask = processor.tokenizer.convert_tokens_to_ids("<|mask|>")
    cfg = HeadConfig.from_run(train)
    head, log = train_head(target, sequences, mask, cfg, heldout=probe)
    replace_dir(out_dir, head.save_pretrained, "toy head", kind="head")
    log.update(regenerate_seconds=regen_seconds, sequences=len(sequences))
    return log


def train_toy_eagle_head(target_dir, out_dir, train: HeadTrain, windows: EagleWindows) -> dict:
    """Train an EAGLE-style head (:mod:`glance.heads.eagle`) for a saved toy target on
    the same :func:`toy_corpus` as the block head (``train``), with its steps,
    learning rate and seed, in batches of ``windows``, and save it to
    ``out_dir``. Returns the training log."""
    from glance._io import replace_dir
    from glance.targets.vl import load_target
    from glance.training.eagle import EagleTrainConfig, train_eagle_head

    torch.manual_seed(train.seed)
    target, processor = load_target(target_dir, dtype=torch.float32)
    sequences, probe, regen_seconds = toy_corpus(target, processor, **train.corpus())
    config = EagleTrainConfig(**eagle_train(train, windows))
    head, log = train_eagle_head(target, sequences, config, heldout=probe)
    replace_dir(out_dir, head.save_pretrained, "toy EAGLE-style head", kind="eagle head")
    log.update(regenerate_seconds=regen_seconds, sequences=len(sequences))
    return log


def eagle_train(train: HeadTrain, windows: EagleWindows) -> dict:
    """The EAGLE-style head's training settings: ``windows``, with the block
    head's seed, and its steps and learning rate where ``windows`` leaves them
    unset."""
    own = asdict(windows)
    steps, lr = own.pop("steps"), own.pop("lr")
    return {
        **own,
        "steps": train.steps if steps is None else steps,
        "lr": train.lr if lr is None else lr,
        "seed": train.seed,
    }
