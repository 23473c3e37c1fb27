"""Library edge cases from the fuzzing review (issue 24, sections 8 and 9): each
is now a named error or a documented behaviour."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import glance
from glance import DraftabilityLaw
from glance import testing as tiny
from glance.core.tree import build_budget_tree
from glance.decoding.loop import MAX_BUDGET, Options

# --- 1. build_budget_tree: ids past int64, repeated ids in a row ------------------


def test_tree_refuses_uint64_ids_past_int64():
    lp = np.log([[0.6, 0.4], [0.5, 0.5]])
    ids = np.array([[2**63, 5], [1, 2]], dtype=np.uint64)  # would wrap to -2**63
    with pytest.raises(ValueError, match=r"top_ids must hold token ids that fit in int64"):
        build_budget_tree(ids, lp, budget=3, branch_k=2)
    # uint64 ids inside int64's range give the int64 tree.
    small = np.array([[2**63 - 1, 5], [1, 2]], dtype=np.uint64)
    tree = build_budget_tree(small, lp, budget=3, branch_k=2)
    assert tree.tokens.dtype == np.int64 and (tree.tokens >= 0).all()
    assert tree.tokens.tolist() == [2**63 - 1, 5, 1]


def test_tree_refuses_repeated_ids_in_a_row():
    lp = np.log([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]])
    ids = np.array([[1, 2, 3], [7, 9, 7]])
    with pytest.raises(ValueError, match=r"distinct token ids in each row.*row 1 repeats id 7"):
        build_budget_tree(ids, lp, budget=5, branch_k=3)
    # Unsorted rows are checked too (the check does not rely on the sort).
    with pytest.raises(ValueError, match="row 0 repeats id 4"):
        build_budget_tree(np.array([[4, 8, 4]]), np.log([[0.2, 0.5, 0.3]]), 3, 3)


def test_topk_ids_never_trip_the_repeat_check():
    # The decoder's drafts are torch.topk of a log-softmax: distinct per row even
    # when every logit ties.
    for logits in (torch.zeros(6, 50), torch.randn(6, 50, generator=torch.manual_seed(0))):
        lp, ids = torch.log_softmax(logits.double(), -1).topk(8, dim=-1)
        tree = build_budget_tree(ids.numpy(), lp.numpy(), 63, 8)
        assert len(tree) == 63


# --- 2 and 3. requests: input_ids dtype, budget caps ---------------------------------


@pytest.fixture(scope="module")
def text():
    target = tiny.build_target("qwen3", layers=2)
    return target, tiny.build_head(target)


IDS = [3, 17, 42, 8]


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.float32, torch.float64]
)
def test_input_ids_of_a_narrow_or_non_integer_dtype_are_refused(text, dtype):
    target, head = text
    ids = torch.tensor([IDS]).to(dtype)
    match = re.escape(f"input_ids must hold integer token ids; got dtype {dtype}")
    for fn, args in (
        (glance.generate, (head, target)),
        (glance.chain_generate, (head, target)),
        (glance.greedy_generate, (target,)),
    ):
        with pytest.raises(TypeError, match=match):
            fn(*args, ids, 4)


def test_input_ids_of_int32_decode_as_int64(text):
    target, head = text
    want = glance.greedy_generate(target, torch.tensor([IDS]), 6)
    got = glance.generate(head, target, torch.tensor([IDS], dtype=torch.int32), 6, budget=7)
    assert got.dtype == torch.int32 and got.tolist() == want.tolist()


@pytest.mark.parametrize("budget", [10**9, MAX_BUDGET + 1, 1e9, 0])
def test_budget_past_the_cap_is_refused_before_allocating(text, budget, monkeypatch):
    target, head = text

    def never(*args, **kwargs):
        raise AssertionError("a tree was planned for an out-of-range budget")

    monkeypatch.setattr(glance.decoding.loop, "search_tree", never)
    match = re.escape(f'budget must be an int in [1, {MAX_BUDGET}] (MAX_BUDGET) or "auto"')
    with pytest.raises(ValueError, match=match):
        glance.generate(head, target, torch.tensor([IDS]), 4, budget=budget)


def test_extend_budget_past_the_cap_is_refused(text):
    target, head = text
    with pytest.raises(
        ValueError, match=re.escape(f"extend_budget must be an int in [0, {MAX_BUDGET}]")
    ):
        glance.generate(head, target, torch.tensor([IDS]), 4, extend_budget=10**9)


def test_pipeline_budgets_stay_inside_the_cap():
    # conf/ uses 1..255 and "auto"; the stages cap their configs at 4095 too.
    for budget in (1, 63, 255, MAX_BUDGET, "auto"):
        assert Options(4, budget=budget, extend_budget=MAX_BUDGET).budget == budget


# --- 4. DraftabilityLaw.fit: separation, bad rounds ----------------------------------


def _separated_uncensored(n_low=50, n_high=150, seed=0):
    """Every accepted token comes at H = 0; every round above accepts none."""
    rng = np.random.default_rng(seed)
    entropy = np.concatenate([np.zeros(n_low), rng.uniform(0.5, 3.0, n_high)])
    accepted = np.concatenate([rng.integers(1, 5, n_low), np.zeros(n_high, dtype=int)])
    return entropy, accepted


def test_law_fit_on_separated_rounds_does_not_converge_or_hold():
    entropy, accepted = _separated_uncensored()
    law = DraftabilityLaw.fit(entropy, accepted)
    assert not law.converged
    assert law.reason.startswith("separation") and "b1 runs off to +inf" in law.reason
    ok, conditions = law.holds()
    assert not ok and not conditions["non_degenerate"]
    # Censored: low entropy always reaches the cap, high entropy accepts nothing.
    rng = np.random.default_rng(1)
    entropy = rng.uniform(0.0, 3.0, 200)
    law = DraftabilityLaw.fit(entropy, np.where(entropy < 1.5, 15, 0), cap=15)
    assert not law.converged and "b1 runs off to +inf" in law.reason
    assert not law.holds()[0]
    # The reverse direction, and no success at all.
    law = DraftabilityLaw.fit(3.0 - entropy, np.where(entropy < 1.5, 15, 0), cap=15)
    assert not law.converged and "b1 runs off to -inf" in law.reason
    law = DraftabilityLaw.fit(entropy, np.zeros(200, dtype=int))
    assert not law.converged and "b0 runs off to -inf" in law.reason
    law = DraftabilityLaw.fit(entropy, np.full(200, 15), cap=15)
    assert not law.converged and "b0 runs off to +inf" in law.reason


def test_law_reason_round_trips_and_old_results_still_load():
    rng = np.random.default_rng(2)
    entropy = rng.uniform(0.0, 3.0, 300)
    p = 1.0 / (1.0 + np.exp(-(2.0 - 1.5 * entropy)))
    accepted = np.minimum(rng.geometric(1.0 - p) - 1, 15)
    law = DraftabilityLaw.fit(entropy, accepted, cap=15)
    assert law.converged and law.reason == ""  # mixed rounds: no separation
    bad = DraftabilityLaw.fit(*_separated_uncensored())
    assert DraftabilityLaw.from_json(bad.to_json()) == bad
    old = law.to_dict()
    del old["reason"]  # a law.json written before the field existed
    assert DraftabilityLaw.from_dict(old) == law


@pytest.mark.parametrize(
    ("entropy", "accepted", "match"),
    [
        ([0.1, 0.2, math.nan], [1, 2, 3], "entropy must be finite; round 2"),
        ([0.1, math.inf, 0.3], [1, 2, 3], "entropy must be finite; round 1"),
        ([0.1, 0.2, -math.inf], [1, 2, 3], "entropy must be finite; round 2"),
        ([0.1, 0.2, -0.3], [1, 2, 3], "entropy must be >= 0; round 2"),
        ([0.1, 0.2, 0.3], [1, -2, 3], "accepted must be integers >= 0; round 1"),
        ([0.1, 0.2, 0.3], [1, 2, math.nan], "accepted must be integers >= 0; round 2"),
    ],
)
def test_law_fit_names_the_bad_round(entropy, accepted, match):
    with pytest.raises(ValueError, match=match):
        DraftabilityLaw.fit(entropy, accepted)


# --- 5. chat_inputs: special tokens in the prompt --------------------------------------


@pytest.fixture(scope="module")
def processor():
    from glance.toy.processor import build_processor

    return build_processor()


@pytest.mark.parametrize(
    "token", ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|mask|>"]
)
def test_chat_inputs_refuses_special_tokens_in_the_text(processor, token):
    from glance.targets.vl import chat_inputs, control_tokens

    assert token in control_tokens(processor)  # read off the tokenizer, not a list here
    with pytest.raises(ValueError, match=re.escape(f"special token {token!r} at character 8")):
        chat_inputs(processor, f"what is {token} here?")


def test_chat_inputs_keeps_plain_text(processor):
    from glance.targets.vl import chat_inputs

    ids, _ = chat_inputs(processor, "what is <|x|> here?")  # not a special token
    image = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert ids.shape[0] == 1 and image not in ids[0].tolist()
    with pytest.raises(TypeError, match="text must be a str; got bytes"):
        chat_inputs(processor, b"what")


def test_defect_05_a_long_filler_is_tokenised_a_few_times_not_per_word():
    import time
    from pathlib import Path

    from glance import vl

    toy = Path(__file__).resolve().parent.parent / "models" / "toy-target"
    tokenizer = vl.load_processor(toy, True).tokenizer
    calls = []

    def counted(text):
        calls.append(len(text))
        return tokenizer(text)

    def one_word_at_a_time(n):  # what it did before: the fewest words that reach n tokens
        words, text, i = vl.FILLER.split(), "", 0
        while len(tokenizer(text)["input_ids"]) < n:
            text += words[i % len(words)] + " "
            i += 1
        return text

    for n in (1, 7, 64, 512):
        assert vl.filler(n, tokenizer) == one_word_at_a_time(n)
    start = time.perf_counter()
    text = vl.filler(100_000, counted)
    assert len(tokenizer(text)["input_ids"]) >= 100_000
    assert len(calls) < 60 and time.perf_counter() - start < 30


def test_the_library_and_the_schema_cap_the_budget_alike():
    from glance.decoding.loop import MAX_BUDGET
    from glance.pipeline.config import MAX_BUDGET as SCHEMA

    assert MAX_BUDGET == SCHEMA
