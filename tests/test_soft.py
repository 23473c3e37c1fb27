"""The writer's world (glance.toy.writer.World) and soft-labelled target
training (glance.toy.soft): where the labels go, and that the loss is the
writer's cross-entropy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from glance.toy.soft import soft_batch, soft_loss  # noqa: E402
from glance.toy.tasks import ALPHABET, make_example  # noqa: E402
from glance.toy.writer import SYMBOLS, Knobs, Voice, using  # noqa: E402


def draw(task, rng, knobs=None):
    with using(knobs or Knobs()) as world:
        ex = make_example(task, rng)
    return world, ex


@pytest.fixture(scope="module")
def encoder():
    from glance.toy.processor import build_processor
    from glance.toy.world import Encoder

    return Encoder(build_processor().tokenizer)


def test_voices_set_the_free_words_and_redraws_keep_the_page():
    knobs = Knobs(voices=Knobs().voices | {"chartqa": Voice(2, 4, 1.0)}, space=0.0)
    world, ex = draw("chartqa", np.random.default_rng(0), knobs)
    marks = ex.marks
    assert len(marks) == 10 * 2 * 4  # ten pairs of values, two free words of four letters
    again, marks2 = world.write("chartqa", ex.parts, np.random.default_rng(1))
    assert again != ex.answer and len(marks2) == len(marks)
    assert [m[0] for m in marks2] == [m[0] for m in marks]  # same skeleton, same places


def test_soft_labels_sit_on_the_free_letters_and_one_hot_elsewhere(encoder):
    from glance.toy.world import glyph_table

    rng = np.random.default_rng(3)
    items = []
    for task in ("caption", "docvqa"):
        ex = make_example(task, rng)
        items.append((ex, ex.answer, ex.marks))
    batch = soft_batch(encoder, items, glyph_table())
    soft, mask = batch["soft"], batch["loss_mask"]
    assert torch.allclose(soft[mask].sum(-1), torch.ones(int(mask.sum())))
    assert float(soft[~mask].abs().sum()) == 0.0
    letter_ids = encoder.tokenizer.convert_tokens_to_ids(list(SYMBOLS))
    for b, (_, _, marks) in enumerate(items):
        start = int(mask[b].nonzero()[0])
        free = {start + i for i, _, _ in marks}
        for index, ids, probs in marks:
            row = soft[b, start + index]
            want = torch.zeros_like(row)
            want[[letter_ids[i] for i in ids]] = torch.as_tensor(probs, dtype=torch.float32)
            assert torch.allclose(row, want)
            # the drawn letter is the input one step on, and the row allows it
            assert int(batch["input_ids"][b, start + index + 1]) in {letter_ids[i] for i in ids}
        for t in mask[b].nonzero()[:, 0].tolist():
            if t not in free:
                assert soft[b, t, batch["input_ids"][b, t + 1]] == 1.0


def test_the_loss_is_least_when_the_model_matches_the_labels(encoder):
    """A model whose output is the soft labels themselves scores their mean
    entropy; any other output scores more."""
    from glance.toy.world import glyph_table

    ex = make_example("textvqa", np.random.default_rng(5))
    batch = soft_batch(encoder, [(ex, ex.answer, ex.marks)], glyph_table())
    soft = batch["soft"]

    class Fixed(torch.nn.Module):
        def __init__(self, probs):
            super().__init__()
            self.logits = torch.log(probs.clamp_min(1e-30))

        def forward(self, **_):
            return type("Out", (), {"logits": self.logits})

    loss, entropy = soft_loss(Fixed(soft), batch)
    mask = batch["loss_mask"]
    p = soft[mask]
    want = -(p * torch.log(p.clamp_min(1e-30))).sum(-1).mean()
    assert torch.isclose(loss, want, atol=1e-5)
    assert torch.allclose(entropy, -(p * torch.log(p.clamp_min(1e-30))).sum(-1), atol=1e-5)
    noisy = torch.softmax(torch.log(soft.clamp_min(1e-30)) + torch.randn_like(soft), -1)
    assert soft_loss(Fixed(noisy), batch)[0] > loss


def test_spread_sharpens_each_run_by_the_item_before_it():
    """With a spread, the free letters of one run share one sharpness, set by
    the last character of the grounded part before the run."""
    from glance.toy.writer import letter_context, row_entropy

    world, ex = draw("infovqa", np.random.default_rng(2), Knobs(spread=0.8, space=0.0))
    marks = ex.marks
    voice = world.voice("infovqa")
    per_run = voice.words * voice.letters
    runs = [marks[i : i + per_run] for i in range(0, len(marks), per_run)]
    assert len(runs) == 5
    betas = []
    for run in runs:
        index = run[0][0]
        grounded = ex.answer[: index - 1].split(";")[-1].strip()  # "figs 42"
        z = world.z[ALPHABET.index(grounded[-1])]
        rows = world.sharp(round(voice.beta * float(np.exp(0.8 * z)), 6))
        for i, _, probs in run:
            context = letter_context(ex.answer[:i], skip=True)
            a, b = (ALPHABET.index(c) for c in context)
            assert np.array_equal(probs, rows.probs[a, b])
        betas.append(round(voice.beta * float(np.exp(0.8 * z)), 6))
    assert len(set(betas)) > 1  # items differ
    flat = draw("infovqa", np.random.default_rng(2), Knobs(spread=0.0, space=0.0))[1].marks
    assert row_entropy(np.array([m[2] for m in flat])).std() > 0


def test_free_word_breaks_make_every_position_of_a_run_a_choice():
    """With ``space``, a run is one stretch of characters whose breaks are
    drawn too: never first, last or after fewer than two letters of a word,
    and offered (with the table's probability) wherever two letters came
    before."""
    from glance.toy.writer import SPACE

    world, _ = draw("caption", np.random.default_rng(0), Knobs(space=0.3, spread=0.0))
    voice = world.voice("caption")
    length = voice.words * (voice.letters + 1) - 1
    rng = np.random.default_rng(9)
    offered = broke = 0
    for _ in range(20):
        _, ex = draw("caption", rng, Knobs(space=0.3, spread=0.0))
        marks = ex.marks
        runs = [marks[i : i + length] for i in range(0, len(marks), length)]
        assert all(len(run) == length for run in runs)
        for run in runs:
            text = "".join(ex.answer[i] for i, _, _ in run)
            assert not text.startswith(" ") and not text.endswith(" ") and "  " not in text
            assert all(len(word) >= 2 for word in text.split(" ")[:-1])
            for j, (i, ids, probs) in enumerate(run):
                has_space = SPACE in ids
                assert has_space == (0 < j < length - 1 and " " not in ex.answer[i - 2 : i])
                assert np.isclose(probs.sum(), 1.0)
                if has_space:
                    offered += 1
                    broke += ex.answer[i] == " "
    assert 0.15 < broke / offered < 0.45  # the table's mean is 0.3
