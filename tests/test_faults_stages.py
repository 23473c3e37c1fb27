"""Issue 24's defects in the stages and their files, as named regressions.

Each test is one defect a hostile or careless user found: a folder destroyed, a
path outside its folder, a set of outputs mixed from two runs, a check made
after the work, nonsense taken with exit code 0, or a raw error where a named
one was promised. Library edge cases are in ``test_faults_library.py``, and
checkpoints in ``test_faults_weights.py``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hydra", reason="the pipeline extra is part of the README's test install")

from omegaconf import OmegaConf  # noqa: E402

from glance._io import (  # noqa: E402
    MARKER,
    check_replaceable,
    check_set,
    replace_dir,
    write_files,
)
from glance.experiments.results import read_rounds  # noqa: E402
from glance.pipeline.config import check_config  # noqa: E402
from stages.params import compose_params  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _stage(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _refused(*overrides) -> str:
    cfg = OmegaConf.create(compose_params(list(overrides)))
    with pytest.raises(SystemExit) as err:
        check_config(cfg)
    return str(err.value)


def _snapshot(root: Path) -> dict:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- 1-3: folders destroyed, paths outside their folder -----------------------


def test_defect_01_a_paths_folder_glance_did_not_write_is_never_replaced(tmp_path):
    repo = tmp_path / "checkout"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "README.md").write_text("keep me")
    before = _snapshot(repo)
    proc = _stage("stages.prepare", f"paths.data={repo}", "prepare.n=3", "n=2", "threads=1")
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith(f"paths.data {repo}: holds files GLANCE did not write"), message
    assert ".git" in message and MARKER in message
    assert _snapshot(repo) == before


@pytest.mark.parametrize("what", ["paths.head", "paths.target", "out_dir"])
def test_defect_01_every_output_folder_refuses_a_foreign_folder(tmp_path, what):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=rf"^{what} {tmp_path}: holds files GLANCE did not write"):
        replace_dir(tmp_path, lambda t: (t / "x").write_text("1"), what)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_defect_01_a_folder_glance_wrote_is_replaced_and_marked(tmp_path):
    out = tmp_path / "out"
    replace_dir(out, lambda t: (t / "a.txt").write_text("1"))
    (out / ".gitignore").write_text("/a.txt\n")  # DVC's bookkeeping survives
    replace_dir(out, lambda t: (t / "b.txt").write_text("2"))
    assert sorted(p.name for p in out.iterdir()) == [".gitignore", MARKER, "b.txt"]
    marker = json.loads((out / MARKER).read_text())
    assert set(marker["files"]) == {"b.txt"}
    # files of the set itself (an unmarked older run) may be replaced too
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "summary.json").write_text("{}")
    replace_dir(plain, lambda t: (t / "summary.json").write_text("[]"), expect={"summary.json"})
    assert (plain / "summary.json").read_text() == "[]"


def test_defect_02_an_empty_task_list_is_an_error():
    assert _refused("tasks=[]") == "tasks: expected at least one task; got []"


def test_defect_02_prepare_with_no_tasks_leaves_the_data_folder(tmp_path):
    data = tmp_path / "data"
    replace_dir(data, lambda t: (t / "docvqa.jsonl").write_text("{}\n"))
    before = _snapshot(data)
    proc = _stage("stages.prepare", "tasks=[]", f"paths.data={data}", "prepare.source=/x")
    assert proc.returncode != 0 and "tasks: expected at least one task" in proc.stderr
    assert _snapshot(data) == before


@pytest.mark.parametrize(
    "overrides",
    ["prepare.split=../../../x", "paths.data=/etc", "a=..", "..", ".", "x=a/../../.."],
)
def test_defect_03_a_sweep_override_never_leaves_results_sweeps(tmp_path, overrides):
    from glance.experiments.decode import sweep_folder

    base = tmp_path / "results" / "sweeps" / "docvqa"
    folder = sweep_folder(base, overrides)
    assert folder.parent == base and folder.name not in (".", "..")
    assert base.resolve() in folder.resolve().parents


# --- 4: outputs replaced as a set --------------------------------------------


def test_defect_04_a_killed_fill_leaves_the_old_set(tmp_path):
    out = tmp_path / "decode"
    replace_dir(
        out, lambda t: [(t / n).write_text("old") for n in ("rounds.jsonl", "summary.json")]
    )
    before = _snapshot(out)

    def killed(t):
        (t / "rounds.jsonl").write_text("new")
        raise KeyboardInterrupt  # killed before summary.json was written

    with pytest.raises(KeyboardInterrupt):
        replace_dir(out, killed)
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["decode"]  # no temporary left behind
    check_set(out)


def test_defect_04_a_mixed_decode_folder_is_refused_by_its_reader(tmp_path):
    out = tmp_path / "decode"
    record = {"prompt": 1, "system": "glance", "entropy": 0.5, "accepted": 2, "cap": 15}
    replace_dir(out, lambda t: (t / "rounds.jsonl").write_text(json.dumps(record) + "\n"))
    (out / "rounds.jsonl").write_text(json.dumps(record | {"accepted": 3}) + "\n")
    with pytest.raises(ValueError, match="rounds.jsonl is not the one written with the rest"):
        check_set(out, names=("rounds.jsonl",))


def test_defect_04_a_shared_set_writes_nothing_when_one_file_fails(tmp_path):
    (tmp_path / "law.json").write_text("old")
    with pytest.raises(TypeError):
        write_files(tmp_path, {"law_deciles.csv": "new", "law.json": None})
    assert (tmp_path / "law.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["law.json"]


def test_defect_04_a_new_law_beside_old_deciles_is_refused_on_read(tmp_path):
    from glance.pipeline.files import read_json, write_set

    write_set(tmp_path, "law.json", {"pooled": {}}, {"law_deciles.csv": "task\nnew\n"})
    assert read_json(tmp_path / "law.json", "")["pooled"] == {}
    (tmp_path / "law_deciles.csv").write_text("task\nold\n")  # the kill between renames
    with pytest.raises(ValueError, match="law_deciles.csv is not the one written with it"):
        read_json(tmp_path / "law.json", "")


# --- 5: checks before the work ------------------------------------------------


@pytest.mark.parametrize("key", ["n", "sweep.n", "context_sweep.n", "seed_check.n", "bench.n"])
def test_defect_05_one_prompt_is_refused_before_decoding(key):
    assert _refused(f"{key}=1") == f"{key}: expected an integer >= 2; got 1"


def test_defect_05_an_unwritable_out_dir_is_refused_before_work(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file, so no folder can be made there"):
        check_replaceable(tmp_path / "file" / "out", "out_dir")
    proc = _stage(
        "stages.decode",
        "+task=docvqa",
        f"out_dir={tmp_path / 'file' / 'out'}",
        f"paths.target={tmp_path / 'none'}",
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith(f"out_dir {tmp_path / 'file' / 'out'}")


def test_defect_05_a_context_past_the_targets_positions_is_refused_at_once(tmp_path):
    from glance.experiments.settings import check_context

    target = tmp_path / "target"
    target.mkdir()
    toy = ROOT / "models" / "toy-target"
    (target / "target.json").write_text(json.dumps({"path": str(toy), "local": True}))
    cfg = OmegaConf.create({"paths": {"target": str(target)}})
    start = time.perf_counter()
    with pytest.raises(SystemExit, match=r"context: 100000 filler tokens .* exceed the target's"):
        check_context(cfg, {"context": 100000, "max_new_tokens": 64})
    assert time.perf_counter() - start < 10
    check_context(cfg, {"context": 512, "max_new_tokens": 64})  # the pipeline's own fits


# --- 6: nonsense is refused, never a table entry -------------------------------

GOOD = {"prompt": 1, "system": "glance", "entropy": 0.5, "accepted": 2, "cap": 15}


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("entropy", float("nan"), "entropy: expected a finite number"),
        ("entropy", float("inf"), "entropy: expected a finite number"),
        ("entropy", -0.5, "entropy: expected a number >= 0"),
        ("accepted", -1, "accepted: expected an integer >= 0"),
        ("accepted", 1.5, "accepted: expected an integer >= 0"),
        ("cap", 0, "cap: expected an integer >= 1"),
        ("prompt", -3, "prompt: expected an integer >= 0"),
        ("stop", "eos", "stop: expected one of ('rejection', 'depth', 'end', 'leaf')"),
    ],
)
def test_defect_06_a_bad_round_names_its_file_and_line(tmp_path, field, value, expected):
    path = tmp_path / "rounds.jsonl"
    bad = GOOD | {field: value}
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError) as err:
        read_rounds(path, prompts=True)
    assert str(err.value).startswith(f"{path}:2: ") and expected in str(err.value)


def test_read_rounds_knows_every_stop_the_loop_writes(tmp_path):
    from glance.decoding.loop import STOPS

    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(GOOD | {"stop": stop}) + "\n" for stop in STOPS))
    *_, censored = read_rounds(path, prompts=True, censored=True)
    assert censored.tolist() == [stop != "rejection" for stop in STOPS]


def test_defect_06_an_empty_rounds_file_is_an_error_not_a_smaller_pool(tmp_path):
    path = tmp_path / "rounds.jsonl"
    path.write_text("")
    with pytest.raises(ValueError, match=rf"{path}: no round of system 'glance'"):
        read_rounds(path)


def test_defect_06_fit_law_refuses_a_bad_round_instead_of_an_error_entry(tmp_path):
    results = tmp_path / "results"
    rng = np.random.default_rng(0)
    for task in ("docvqa", "chartqa"):
        rows = [
            GOOD | {"prompt": int(p), "entropy": float(h), "accepted": int(a)}
            for p, h, a in zip(
                rng.integers(1, 6, 400),
                rng.uniform(0, 3, 400),
                rng.integers(0, 15, 400),
                strict=True,
            )
        ]
        if task == "chartqa":
            rows[7]["entropy"] = float("nan")
        text = "".join(json.dumps(r) + "\n" for r in rows)
        folder = results / "decode" / task
        folder.mkdir(parents=True)
        (folder / "rounds.jsonl").write_text(text)
    proc = _stage(
        "stages.fit_law", f"paths.results={results}", "tasks=[docvqa,chartqa]", "threads=1"
    )
    assert proc.returncode != 0
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"{results / 'decode' / 'chartqa' / 'rounds.jsonl'}:8: ")
    )
    assert not (results / "law.json").exists()


@pytest.mark.parametrize("text", ['{"tau": NaN}', '{"tau": Infinity}', '{"tau": -Infinity}'])
def test_defect_06_figures_refuse_a_bare_nan_in_a_summary(tmp_path, text):
    from glance.pipeline.files import read_json

    path = tmp_path / "summary.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"{path}: .*Infinity|{path}: NaN"):
        read_json(path, "", nonnegative=True)


def test_defect_06_figures_refuse_a_negative_rate(tmp_path):
    from glance.pipeline.files import read_json

    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"systems": {"glance": {"speedup": {"estimate": -1.2}}}}))
    with pytest.raises(ValueError, match=r"systems.glance.speedup.estimate = -1.2; expected"):
        read_json(path, "", nonnegative=True)


def test_defect_06_json_is_written_strictly(tmp_path):
    from glance.pipeline.files import write_json

    with pytest.raises(ValueError, match=r"non-finite number as JSON: pooled.b1 = nan"):
        write_json(tmp_path / "law.json", {"pooled": {"b1": float("nan")}})
    assert not (tmp_path / "law.json").exists()


def test_defect_06_the_target_stage_refuses_a_checkpoint_without_vision(tmp_path):
    from glance.experiments.target import describe, vision_language

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3",
                "architectures": ["Qwen3ForCausalLM"],
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "intermediate_size": 64,
                "vocab_size": 100,
            }
        )
    )
    with pytest.raises(SystemExit, match=rf"target.path {head}: Qwen3ForCausalLM .* no vision"):
        vision_language(describe(head), head)
    vision_language(describe(ROOT / "models" / "toy-target"), "toy")  # the shipped one passes


def test_defect_06_the_target_stage_refuses_a_folder_that_is_no_checkpoint(tmp_path):
    from glance.experiments.target import describe

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match=rf"target.path {tmp_path}: not a model checkpoint"):
        describe(tmp_path)


# --- 7: named errors, not raw ones --------------------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("seed=-1", "seed: expected an integer in 0..4294967295; got -1"),
        ("threads=100000", "threads: expected an integer in 0..256; got 100000"),
        ("prepare.seed=-2", "prepare.seed: expected an integer in 0..4294967295; got -2"),
        ("prepare.dataset=../x", "prepare.dataset: expected a mapping name"),
        ("tasks=[../../x]", "tasks[0]: expected a task name"),
    ],
)
def test_defect_07_ranges_are_named(override, expected):
    assert _refused(override).startswith(expected)


def test_defect_07_a_cuda_device_on_a_cpu_machine_is_named():
    import torch

    from glance.pipeline.app import check_device

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="device: 'cuda', but this machine has no CUDA device"):
        check_device("cuda")
    with pytest.raises(SystemExit, match="device: expected cpu, cuda or cuda:N; got 'gpu0'"):
        check_device("gpu0")
    check_device("cpu")


def _png(path: Path, width: int, height: int) -> None:
    """A valid PNG header claiming ``width`` x ``height`` with almost no data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * (width + 1))  # one row; the rest is missing
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat))


def test_defect_07_a_one_pixel_image_is_named_by_its_source(tmp_path):
    from PIL import Image

    from glance.data.tasks import MIN_SIDE, check_image

    Image.new("RGB", (1, 1)).save(tmp_path / "dot.png")
    with pytest.raises(ValueError, match=rf"src/x.jsonl:3: image is 1x1; .* {MIN_SIDE} pixels"):
        check_image(tmp_path / "dot.png", "src/x.jsonl:3")


# --- 8: cost before refusal ---------------------------------------------------


def test_defect_08_a_huge_image_is_refused_from_its_header(tmp_path):
    from glance.data.tasks import MAX_PIXELS, check_image

    _png(tmp_path / "bomb.png", 12000, 12000)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"144000000 pixels.*the limit is {MAX_PIXELS}"):
        check_image(tmp_path / "bomb.png", "bomb")
    assert time.perf_counter() - start < 2  # header only: no 10 GB decode


def test_defect_08_a_warned_size_is_an_error_too(tmp_path):
    from glance.data.tasks import check_image

    _png(tmp_path / "big.png", 10000, 9000)  # 90 MP: Pillow only warns
    with pytest.raises(ValueError, match="the limit is"):
        check_image(tmp_path / "big.png", "big")


def test_defect_08_only_the_records_used_are_read(tmp_path):
    from glance.data.tasks import numbered_records

    good = json.dumps({"image": "a.png", "prompt": "q"}) + "\n"
    path = tmp_path / "docvqa.jsonl"
    path.write_text(good * 3 + "not json\n" * 100_000)
    start = time.perf_counter()
    assert len(numbered_records(path, limit=3)) == 3  # the bad lines after are never parsed
    assert time.perf_counter() - start < 1
    with pytest.raises(ValueError, match=":4: not JSON"):
        numbered_records(path, limit=4)
