"""The toy world in miniature: task files, tokenizer, processor, target checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

from glance.data.tasks import read_task
from glance.targets.vl import chat_inputs, load_target
from glance.toy import tasks as T
from glance.toy.config import TargetSize, TrainConfig
from glance.toy.processor import build_processor
from glance.toy.soft import train_target
from glance.toy.world import Encoder, glyph_table, page_pixels


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("toydata")
    for task in T.TASKS:
        T.write_task(task, 4, out, seed=3)
    return out


def test_task_files_parse_and_images_match_their_text(data):
    for task in T.TASKS:
        records = read_task(data / f"{task}.jsonl")
        assert len(records) == 4
        for r in records:
            assert set(r) >= {"image", "prompt", "answer"}
            image = np.asarray(Image.open(data / r["image"]).convert("L"))
            assert image.shape == (T.ROWS * T.CELL, T.COLS * T.CELL)
            # Every cell holds exactly the glyph of the character the record says.
            for row, line in enumerate(r["lines"]):
                for col, ch in enumerate(line.ljust(T.COLS)):
                    cell = image[
                        row * T.CELL : (row + 1) * T.CELL, col * T.CELL : (col + 1) * T.CELL
                    ]
                    assert np.array_equal(cell, T.glyph(ch)), (task, row, col, ch)


def test_tasks_are_deterministic_and_grounded(data, tmp_path):
    T.write_task("docvqa", 4, tmp_path, seed=3)
    assert (tmp_path / "docvqa.jsonl").read_text() == (data / "docvqa.jsonl").read_text()
    for r in read_task(data / "docvqa.jsonl"):
        for line in r["lines"]:  # every field and its value is copied off the page
            assert line + " " in r["answer"]
    for r in read_task(data / "chartqa.jsonl"):
        values = " ".join(r["lines"]).split()
        copied = [item.split()[:2] for item in r["answer"].rstrip(".").split(", ")]
        assert [v for pair in copied for v in pair] == values


def free_letters_follow_the_writer(example) -> int:
    """Check that an answer copies its skeleton's fixed parts and that every
    free character is one the writer allows in its context; return how many
    free characters there were."""
    from glance.toy.writer import default_world

    score = default_world().score(example.task, example.parts, example.answer)
    assert score["copied"] == score["grounded"] == sum(p is not None for p in example.parts)
    assert score["allowed"] == score["free"] > 0, (score, example.answer)
    return score["free"]


def test_docvqa_values_are_lexicon_words_unguessable_from_their_field():
    """docvqa's values are distinct cvcvcvc nonce words from the fixed
    lexicon, never a word the other tasks use, and a field's value varies
    from page to page."""
    import re

    assert len(set(T.LEXICON)) == len(T.LEXICON) == 256
    assert all(
        re.fullmatch(r"([bcdfghjklmnprstvz][aeiou]){3}[bcdfghjklmnprstvz]", w) for w in T.LEXICON
    )
    assert not set(T.LEXICON) & (set(T.WORDS) | set(T.ITEMS) | set(T.FIELDS))
    rng = np.random.default_rng(5)
    pages = [T.make_example("docvqa", rng).lines for _ in range(20)]
    for row, field in enumerate(T.FIELDS):
        values = {page[row].split()[1] for page in pages}
        assert values <= set(T.LEXICON) and len(values) > 10, field


def test_answers_are_long_and_graded_by_their_free_entropy():
    from glance.toy.writer import row_entropy

    rng = np.random.default_rng(5)
    share = {}
    for task in T.TASKS:
        examples = [T.make_example(task, rng) for _ in range(50)]
        lengths = [len(ex.answer) for ex in examples]
        assert np.mean(lengths) >= 96, (task, np.mean(lengths))  # far past a 16-token block
        free = sum(free_letters_follow_the_writer(ex) for ex in examples)
        assert free == sum(len(ex.marks) for ex in examples)
        nats = sum(float(row_entropy(p)) for ex in examples for _, _, p in ex.marks)
        share[task] = nats / sum(lengths)  # the writer's nats per character
    order = [share[t] for t in T.TASKS]
    assert order == sorted(order, reverse=True), share  # caption most free, chartqa least
    long = [len(T.make_example("longform", rng).answer) for _ in range(5)]
    assert min(long) >= 512


def test_marks_say_what_each_free_character_could_have_been():
    from glance.toy.writer import SYMBOLS

    ex = T.make_example("textvqa", np.random.default_rng(6))
    for index, ids, probs in ex.marks:
        assert ex.answer[index] in {SYMBOLS[i] for i in ids}
        assert np.isclose(probs.sum(), 1.0) and (probs > 0).all()


def test_resampled_answers_keep_the_page_and_redraw_the_free_words():
    ex = T.make_example("caption", np.random.default_rng(2))
    rng = np.random.default_rng(3)
    others = {ex.sample_answer(rng) for _ in range(20)}
    assert len(others) == 20  # the free letters are redrawn
    for text in others:
        free_letters_follow_the_writer(T.Example(ex.task, ex.lines, ex.prompt, text, ex.parts))


def test_the_score_counts_copies_and_allowed_free_characters():
    from glance.toy.writer import default_world

    world = default_world()
    ex = T.make_example("docvqa", np.random.default_rng(4))
    perfect = world.score("docvqa", ex.parts, ex.answer)
    fixed = sum(part is not None for part in ex.parts)  # fields, separators included
    assert perfect["copied"] == perfect["grounded"] == fixed
    assert perfect["allowed"] == perfect["free"] == len(ex.marks)
    wrong = "x" + ex.answer[1:]  # breaks the first field's copy, nothing else
    assert world.score("docvqa", ex.parts, wrong)["copied"] == fixed - 1
    index = ex.marks[0][0]  # a digit where a free letter goes is not allowed
    bad = ex.answer[:index] + "7" + ex.answer[index + 1 :]
    assert world.score("docvqa", ex.parts, bad)["allowed"] <= perfect["free"] - 1
    assert world.score("docvqa", ex.parts, "")["allowed"] == 0


def test_bad_task_file_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"image": "a.png", "prompt": "p"}\n{"prompt": "q"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: missing field\(s\) \['image'\]"):
        read_task(path)


def test_tokenizer_round_trips():
    tok = build_processor().tokenizer
    text = "name k7x2m9q yzv dqa; city n5n8wfb ytb cuk."
    ids = tok(text).input_ids
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    special = "<|im_start|>user\n<|image_pad|><|im_end|>"
    assert tok.decode(tok(special).input_ids) == special
    assert len(tok(special).input_ids) == 8  # three specials + "user" + newline


def test_processor_matches_the_training_encoding():
    processor = build_processor()
    ex = T.make_example("chartqa", np.random.default_rng(0))
    ids, positions = chat_inputs(processor, ex.prompt, T.render(ex.lines))
    assert ids[0].tolist() == Encoder(processor.tokenizer).prompt(ex.prompt)
    assert torch.equal(positions.pixel_values.float(), page_pixels(ex.lines, glyph_table()))
    assert positions.image_grid_thw.tolist() == [[1, T.ROWS, T.COLS]]


FAMILY_FILES = {  # model class, processor class, video processor class
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
    "qwen2_5_vl": (
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen2_5_VLProcessor",
        "Qwen2VLVideoProcessor",
    ),
}


@pytest.mark.parametrize("family", sorted(FAMILY_FILES))
def test_saved_target_loads_like_a_real_checkpoint(tmp_path, family):
    out = tmp_path / "target"
    size = TargetSize(hidden=32, layers=1, family=family)
    log = train_target(out, TrainConfig(steps=2, batch=4), size, progress=False)
    assert log["steps"] == 2
    assert 0.0 <= log["agreement"]["docvqa"]["copy_top1"] <= 1.0 and "r" in log["agreement"]
    model_name, processor_name, video_name = FAMILY_FILES[family]
    model, processor = load_target(out, dtype=torch.float32)
    assert type(model).__name__ == model_name
    assert isinstance(processor, getattr(transformers, processor_name))
    image = json.loads((out / "preprocessor_config.json").read_text())
    assert image["processor_class"] == processor_name and image["merge_size"] == 1
    video = json.loads((out / "video_preprocessor_config.json").read_text())
    assert video["video_processor_type"] == video_name
    ex = T.make_example("docvqa", np.random.default_rng(1))
    ids, pos = chat_inputs(processor, ex.prompt, T.render(ex.lines))
    assert ids[0].tolist() == Encoder(processor.tokenizer).prompt(ex.prompt)
    assert torch.equal(pos.pixel_values.float(), page_pixels(ex.lines, glyph_table()))


@pytest.mark.parametrize("family", sorted(FAMILY_FILES))
def test_a_saved_target_loads_with_plain_transformers(tmp_path, family):
    """In a fresh interpreter that never imports glance: the model through
    ``AutoModelForImageTextToText``, the tokenizer and image processor from
    their own files, and (where torchvision is installed, as Qwen3-VL's
    video processor needs) ``AutoProcessor``."""
    import subprocess
    import sys

    out = tmp_path / "target"
    size = TargetSize(hidden=32, layers=1, family=family)
    train_target(out, TrainConfig(steps=1, batch=2), size, progress=False)
    model_name, processor_name, _ = FAMILY_FILES[family]
    code = f"""
import importlib.util, sys, transformers as tf
model = tf.AutoModelForImageTextToText.from_pretrained({str(out)!r})
tok = tf.AutoTokenizer.from_pretrained({str(out)!r})
image = tf.Qwen2VLImageProcessorPil.from_pretrained({str(out)!r})
assert type(model).__name__ == {model_name!r}
assert tok("ab;").input_ids == tok.convert_tokens_to_ids(list("ab;"))
assert image.merge_size == 1 and image.patch_size == 8
if importlib.util.find_spec("torchvision") is not None:
    assert type(tf.AutoProcessor.from_pretrained({str(out)!r})).__name__ == {processor_name!r}
assert not any(m == "glance" or m.startswith("glance.") for m in sys.modules)
print("loaded")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0 and "loaded" in run.stdout, run.stderr[-2000:]


def test_the_held_out_probe_records_a_curve_and_leaves_training_alone(tmp_path):
    # The probe draws its fixed batches from a generator of its own and runs
    # without gradients: a run with it ends on the very weights of a run without.
    size = TargetSize(hidden=32, layers=1)
    kw = dict(steps=3, batch=4, long_every=2, long_batch=2, context=16, heldout_batches=2)
    probed = train_target(tmp_path / "a", TrainConfig(eval_every=2, **kw), size, progress=False)
    plain = train_target(tmp_path / "b", TrainConfig(eval_every=0, **kw), size, progress=False)
    curve = probed["phases"][0]["heldout_curve"]
    assert [s for s, _ in curve] == [0, 2, 3] and probed["heldout_loss"] == curve[-1][1]
    assert all(np.isfinite(loss) and loss > 0 for _, loss in curve)
    assert "heldout_curve" not in plain["phases"][0] and "heldout_loss" not in plain
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / x / "model.safetensors")) for x in "ab")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_toy_head_trains_on_regenerated_answers_and_decodes_losslessly(tmp_path):
    import glance
    from glance.targets.vl import VisionPositions
    from glance.toy.world import toy_prompts
    from glance.training.block import HeadConfig, regenerate, train_head

    out = tmp_path / "target"
    train_target(
        out, TrainConfig(steps=3, batch=4), TargetSize(hidden=32, layers=2), progress=False
    )
    target, processor = load_target(out, dtype=torch.float64)
    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    convs = toy_prompts(6, seed=0)
    seqs = regenerate(target, processor, convs, 12, stop_token_id=end, batch_size=4, progress=False)
    assert len(seqs) == 6
    for conv, seq in zip(convs, seqs, strict=True):
        alone = processor.apply_chat_template(
            conv, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        # Left padding is stripped: the prompt is exactly the unbatched prompt.
        assert seq.input_ids[: seq.prompt_len].tolist() == alone["input_ids"][0].tolist()
        # The response is the target's own greedy answer, unbatched, with the
        # vision placeholders suppressed as regenerate suppresses them.
        cfg = target.config
        suppress = [cfg.image_token_id, cfg.video_token_id]
        suppress += [cfg.vision_start_token_id, cfg.vision_end_token_id]
        want = target.generate(
            **alone, max_new_tokens=12, do_sample=False, eos_token_id=end, suppress_tokens=suppress
        )
        assert seq.input_ids.tolist() == want[0].tolist()
    mask = processor.tokenizer.convert_tokens_to_ids("<|mask|>")
    head, _ = train_head(
        target,
        seqs,
        mask,
        HeadConfig(block_size=4, layers=1, steps=3, rows=2, blocks_per_row=2),
        progress=False,
    )
    head.save_pretrained(tmp_path / "head")
    head = glance.load_block_head(tmp_path / "head", target=target)
    alone = processor.apply_chat_template(
        convs[0], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    pos = VisionPositions(alone["pixel_values"], alone["image_grid_thw"])
    want = glance.greedy_generate(target, alone["input_ids"], 20, positions=pos)
    got = glance.generate(
        head, target, alone["input_ids"], 20, budget=15, branch_k=3, positions=pos
    )
    assert got.tolist() == want.tolist()


def test_sampled_regeneration_never_emits_vision_placeholders(tmp_path):
    # An untrained target sampling at a high temperature spreads mass over every
    # id, the image placeholder included; a response holding one would break the
    # feature pass (an image token with no pixels).
    from glance.toy.world import toy_prompts
    from glance.training.block import regenerate, sequence_features

    out = tmp_path / "target"
    train_target(
        out, TrainConfig(steps=1, batch=2), TargetSize(hidden=32, layers=2), progress=False
    )
    target, processor = load_target(out, dtype=torch.float32)
    seqs = regenerate(
        target,
        processor,
        toy_prompts(8, seed=1),
        40,
        temperature=50.0,
        batch_size=8,
        seed=0,
        progress=False,
    )
    vision = {
        target.config.image_token_id,
        target.config.vision_start_token_id,
        target.config.vision_end_token_id,
    }
    responses = [s.input_ids[s.prompt_len :].tolist() for s in seqs]
    assert sum(len(r) for r in responses) > 100  # sampling ran long enough to matter
    assert not vision & {t for r in responses for t in r}
    for s in seqs:
        assert sequence_features(target, s, [0, 1]).shape[0] == s.input_ids.shape[0]


def test_corpus_prompts_carry_filler_and_longform_in_their_own_shares():
    from glance.targets.vl import FILLER
    from glance.toy.world import toy_prompts

    convs = toy_prompts(20, seed=0, long_share=0.1, context=64, context_share=0.25)
    texts = [c[0]["content"][0]["text"] for c in convs]
    filled = [t for t in texts if t.startswith(FILLER.split()[0])]
    longform = [t for t in texts if t == "describe the page at length."]
    assert len(longform) == 2 and 3 <= len(filled) <= 5  # a filler draw of 0 tokens is none
    assert texts[-2:] == longform  # ordered short, then with context, then longform
    plain = toy_prompts(20, seed=0, long_share=0.1, context=0, context_share=0.25)
    assert not any(c[0]["content"][0]["text"].startswith(FILLER.split()[0]) for c in plain)
