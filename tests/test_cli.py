"""The ``glance`` command: its decode prints what the library decodes, losslessly;
check-head names the field that does not fit; bad arguments fail early, by name."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from glance.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "models" / "toy-target"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The shipped toy target, a random head that fits it, and a rendered page."""
    from glance import testing as tiny
    from glance.targets.vl import load_target
    from glance.toy.tasks import make_example, render

    root = tmp_path_factory.mktemp("cli")
    target, processor = load_target(TOY, dtype=torch.float32)
    vocab = target.config.get_text_config().vocab_size
    tiny.build_head(target, block_size=8, mask=vocab - 1).save_pretrained(root / "head")
    example = make_example("docvqa", np.random.default_rng(0))
    render(example.lines).save(root / "page.png")
    return {"root": root, "target": target, "processor": processor, "prompt": example.prompt}


def decode_json(toy, capsys, *extra):
    argv = ["decode", "--target", str(TOY), "--head", str(toy["root"] / "head")]
    argv += ["--image", str(toy["root"] / "page.png"), "--prompt", toy["prompt"]]
    argv += ["--max-new-tokens", "24", "--threads", "2", "--json", *extra]
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def library(toy, n, budget="auto", temperature=0.0, seed=None):
    """What the library decodes for the same call: ``(glance ids, baseline ids)``."""
    from PIL import Image

    import glance
    from glance.targets.vl import chat_inputs, stop_ids

    target, processor = toy["target"], toy["processor"]
    head = glance.load_block_head(toy["root"] / "head", target=target)
    ids, positions = chat_inputs(processor, toy["prompt"], Image.open(toy["root"] / "page.png"))
    kw = dict(positions=positions, stop_token_ids=stop_ids(processor, target),
              temperature=temperature)  # fmt: skip

    def draw():
        return {} if seed is None else {"generator": torch.Generator().manual_seed(seed)}

    out = glance.generate(head, target, ids, n, budget=budget, **kw, **draw())
    base = glance.greedy_generate(target, ids, n, **kw, **draw())
    return out[0, ids.shape[1] :].tolist(), base[0, ids.shape[1] :].tolist()


def test_decode_prints_the_librarys_output_and_its_figures(toy, capsys):
    rc, got = decode_json(toy, capsys, "--budget", "15")
    ids, greedy = library(toy, 24, budget=15)
    assert rc == 0 and got["equals_baseline"] is True
    assert got["ids"] == ids == greedy and got["new_tokens"] == len(ids)
    tok = toy["processor"].tokenizer
    assert got["answer"] == tok.decode(ids, skip_special_tokens=True)
    assert got["tau"] >= 1 and got["ms_per_token"] > 0 and got["greedy_ms_per_token"] > 0
    assert got["speedup"] == pytest.approx(got["greedy_ms_per_token"] / got["ms_per_token"])
    assert got["budget"] == 15 and got["window"] == "decode_only"


def test_decode_with_a_scorer_prints_the_librarys_output(toy, capsys):
    import glance
    from glance.heads.scorer import build_scorer

    head = glance.load_block_head(toy["root"] / "head", target=toy["target"])
    scorer = build_scorer(head, toy["target"], rank=4, top_k=4, seed=2)
    with torch.no_grad():
        scorer.successor.weight.normal_(0.0, 0.5)  # one that re-ranks
    scorer.save_pretrained(toy["root"] / "scorer")
    rc, got = decode_json(toy, capsys, "--budget", "15", "--scorer", str(toy["root"] / "scorer"))
    _, greedy = library(toy, 24, budget=15)
    assert rc == 0 and got["equals_baseline"] is True and got["ids"] == greedy


def test_decode_samples_exactly_at_a_temperature(toy, capsys):
    rc, got = decode_json(toy, capsys, "--temperature", "1", "--seed", "3", "--repeats", "2")
    ids, base = library(toy, 24, temperature=1.0, seed=3)
    assert rc == 0 and got["equals_baseline"] is True and got["repeats"] == 2
    assert got["ids"] == ids == base  # one seeded stream: the same draw in every decoder
    assert got["temperature"] == 1.0 and got["budget"] == "auto"


def test_decode_prints_the_answer_then_one_line_of_figures(toy, capsys):
    argv = ["decode", "--target", str(TOY), "--head", str(toy["root"] / "head"),
            "--prompt", "describe the page.", "--max-new-tokens", "8"]  # fmt: skip
    assert main(argv) == 0  # a text-only prompt: no image
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("tau ") and "x over greedy" in lines[-2]
    assert lines[-1] == "output equals the target's own decoding: yes"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--budget", "0", 'budget: expected an integer in 1..4095 or "auto"; got 0'),
        ("--budget", "lots", "budget: expected an integer in 1..4095 or \"auto\"; got 'lots'"),
        ("--temperature", "-1", "temperature: expected a finite number"),
        ("--max-new-tokens", "0", "max_new_tokens: expected an integer >= 1; got 0"),
        ("--top-p", "0", "top_p: expected a number in (0, 1]"),
        ("--device", "cuda:7", "device: expected cpu or a CUDA device"),
        ("--image", "/no/such.png", "image: expected an image file; got '/no/such.png'"),
        ("--head", "/no/head", "head: expected a checkpoint folder or a hub id; got '/no/head'"),
        ("--prompt", "  ", "prompt: expected a non-empty question"),
        ("--scorer", "/no/scorer", "scorer: expected a checkpoint folder or a hub id"),
    ],
)
def test_bad_arguments_fail_by_name_before_anything_loads(tmp_path, capsys, flag, value, message):
    argv = {"--target": str(TOY), "--head": str(TOY), "--prompt": "x", flag: value}
    with pytest.raises(SystemExit) as exit_:
        main(["decode", *[x for kv in argv.items() for x in kv]])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_scorer_needs_a_fixed_budget(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["decode", "--target", str(TOY), "--head", str(TOY), "--prompt", "x",
              "--scorer", str(TOY)])  # fmt: skip
    assert exit_.value.code == 2
    assert "budget: expected an integer in 1..4095 with --scorer; got 'auto'" in (
        capsys.readouterr().err
    )


def test_a_prompt_over_the_target_s_positions_exits_2_before_any_weight_loads(
    tmp_path, capsys, monkeypatch
):
    # A 1024x768 page is over 12,000 tokens to the toy's processor, over its
    # 4096 positions: named from the processor and config alone, no weights read,
    # and from the image's header, undecoded (issue 42: an 88-megapixel image
    # cost 16 s and 6.3 GB of decoding before this refusal).
    from PIL import Image, ImageFile

    import glance.targets.vl as vl

    def refuse(*a, **k):
        raise AssertionError("the target's weights were loaded, or the image decoded")

    monkeypatch.setattr(vl, "load_target", refuse)
    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)
    big = tmp_path / "big.png"
    Image.new("RGB", (1024, 768), "white").save(big)
    with pytest.raises(SystemExit) as exit_:
        main(["decode", "--target", str(TOY), "--head", str(TOY), "--prompt", "x",
              "--image", str(big)])  # fmt: skip
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    least = re.search(r"the prompt and image make at least (\d+) tokens", err)
    assert least and 12000 < int(least.group(1)) <= 12311, err  # 12,311 decoded
    assert "max_new_tokens 256" in err and "max_position_embeddings 4096" in err


def test_an_unreadable_image_is_named(tmp_path, capsys):
    bad = tmp_path / "page.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(SystemExit):
        main(["decode", "--target", str(TOY), "--head", str(TOY), "--prompt", "x",
              "--image", str(bad)])  # fmt: skip
    assert str(bad) in capsys.readouterr().err


def test_check_head_fits_and_names_the_field_that_does_not(toy, capsys, checkpoints):
    assert main(["check-head", "--target", str(TOY), "--head", str(toy["root"] / "head")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fits: block 8, 1 layer(s), reads target layers")
    _, other_head = checkpoints["qwen3_vl"]  # a tiny head of another width
    assert main(["check-head", "--target", str(TOY), "--head", str(other_head)]) == 1
    assert capsys.readouterr().out.strip() == (
        "does not fit: head hidden_size 64 != target hidden_size 128"
    )


def test_check_head_names_a_damaged_head_file(toy, tmp_path, capsys):
    import shutil

    head = tmp_path / "head"
    shutil.copytree(toy["root"] / "head", head)
    (head / "model.safetensors").write_bytes(b"\0" * 16)
    assert main(["check-head", "--target", str(TOY), "--head", str(head), "--json"]) == 1
    got = json.loads(capsys.readouterr().out)
    assert got["fits"] is False and "model.safetensors" in got["reason"]


def test_the_console_script_lists_its_commands():
    script = Path(sys.executable).parent / "glance"
    assert script.is_file(), "pip install -e . installs the glance console script"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "decode" in proc.stdout and "check-head" in proc.stdout
