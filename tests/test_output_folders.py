"""Issue 42: no stage deletes what it did not write, and checkpoints are per run.

Each test is a case of the issue's table that lost data on the code before it:
a corpus built over a user's folder, a checkpoint folder removed whole, an
output of one kind replaced by another (decode over task data, a scorer over
the head, an export over anything), one checkpoint slot per stage, shared
feature files, and damaged checkpoints that blocked every rerun.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from glance._io import MARKER, check_replaceable, replace_dir

ROOT = Path(__file__).resolve().parent.parent


def _stage(*args, check=False, **popen):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", *args, "threads=1"]
    if popen:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, **popen)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"{args}:\n{proc.stderr[-4000:]}"
    return proc


def _snapshot(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def _made(folder: Path, kind: str, files: dict) -> Path:
    def fill(tmp: Path) -> None:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)

    replace_dir(folder, fill, "test", kind=kind)
    return folder


# --- case 1: the corpus stage over a user's folder ---------------------------


def _users_folder(tmp_path) -> Path:
    mine = tmp_path / "mine"
    (mine / "train" / "shard-00007").mkdir(parents=True)
    (mine / "train" / "shard-00007" / "notes.txt").write_text("keep me")
    (mine / "thesis.tex").write_text("keep me too")
    return mine


def test_the_corpus_stage_refuses_a_users_folder_and_removes_nothing(tmp_path):
    mine = _users_folder(tmp_path)
    before = _snapshot(mine)
    proc = _stage("stages.corpus", f"paths.corpus={mine}", f"paths.results={tmp_path / 'r'}")
    assert proc.returncode != 0
    assert _last_line(proc).startswith(f"paths.corpus {mine}: holds files"), proc.stderr
    assert _snapshot(mine) == before


def test_build_corpus_removes_no_shard_it_did_not_make(tmp_path):
    from glance.training.corpus import CorpusError, build_corpus

    mine = tmp_path / "corpus"
    (mine / "train" / "shard-00003").mkdir(parents=True)
    (mine / "train" / "shard-00003" / "notes.txt").write_text("keep me")
    before = _snapshot(mine)
    with pytest.raises(CorpusError, match=r"holds files a corpus does not \(train/shard-00003\)"):
        build_corpus(mine, [], lambda *a: [], {"recipe": 1}, shard_size=32)
    assert _snapshot(mine) == before


def test_a_corpus_folder_is_marked_and_another_kind_is_refused(tmp_path):
    from glance.training.corpus import CorpusError, build_corpus, check_corpus_folder

    out = tmp_path / "corpus"
    build_corpus(out, [], lambda *a: [], {"recipe": 1}, shard_size=32)
    assert json.loads((out / MARKER).read_text())["kind"] == "corpus"
    check_corpus_folder(out)  # its own folder: accepted again
    head = _made(tmp_path / "head", "head", {"config.json": "{}"})
    with pytest.raises(CorpusError, match="holds GLANCE's head output, not a corpus"):
        check_corpus_folder(head)


# --- case 3: an output of one kind never replaces another -------------------


def test_an_output_folder_of_another_kind_is_refused(tmp_path):
    tasks = _made(tmp_path / "tasks", "tasks", {"docvqa.jsonl": "{}\n"})
    head = _made(tmp_path / "head", "head", {"head.json": "{}", "config.json": "{}"})
    with pytest.raises(ValueError, match=rf"^out_dir {tasks}: holds GLANCE's tasks output"):
        check_replaceable(tasks, "out_dir", ("summary.json",), kind="decode")
    with pytest.raises(ValueError, match=rf"^paths.scorer {head}: holds GLANCE's head output"):
        check_replaceable(head, "paths.scorer", ("config.json",), kind="scorer")
    check_replaceable(head, "paths.head", ("head.json", "config.json"), kind="head")


def test_a_users_file_beside_an_output_is_never_replaced(tmp_path):
    head = _made(tmp_path / "head", "head", {"head.json": "{}"})
    (head / "my-notes.md").write_text("keep me")
    with pytest.raises(ValueError, match=r"holds files GLANCE did not write \(my-notes.md\)"):
        replace_dir(head, lambda tmp: None, "paths.head", ("head.json",), kind="head")
    assert (head / "my-notes.md").read_text() == "keep me"


def test_a_marker_without_a_kind_passes_only_for_its_own_files(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "docvqa.jsonl").write_text("{}\n")
    (old / MARKER).write_text(json.dumps({"written_by": "glance", "files": {"docvqa.jsonl": "x"}}))
    with pytest.raises(ValueError, match=r"holds another kind of GLANCE output \(docvqa.jsonl\)"):
        check_replaceable(old, "out_dir", ("summary.json", "rounds.jsonl"), kind="decode")
    check_replaceable(old, "paths.data", ("docvqa.jsonl",), kind="tasks")


def test_export_never_replaces_task_data_or_the_trained_head(checkpoints, tmp_path):
    import glance

    head = glance.load_block_head(checkpoints["qwen3"][1], dtype=torch.float32)
    tasks = _made(tmp_path / "tasks", "tasks", {"docvqa.jsonl": "{}\n"})
    trained = _made(tmp_path / "head", "head", {"head.json": "{}", "config.json": "{}"})
    for folder in (tasks, trained):
        before = _snapshot(folder)
        with pytest.raises(ValueError, match=r"holds GLANCE's (tasks|head) output"):
            glance.export_head(head, folder, "zlab")
        assert _snapshot(folder) == before
    out = glance.export_head(head, tmp_path / "export", "zlab")
    glance.export_head(head, out, "speculators")  # its own kind: replaced
    assert json.loads((out / MARKER).read_text())["kind"] == "head export"


def test_a_stage_refuses_a_folder_another_paths_key_names(tmp_path):
    head = tmp_path / "head"
    results = f"paths.results={tmp_path / 'r'}"
    proc = _stage("stages.scorer", f"paths.head={head}", f"paths.scorer={head}", results)
    assert proc.returncode != 0
    assert _last_line(proc) == (
        f"paths.scorer {head}: is paths.head's folder too; give each output its own folder"
    )
    data = tmp_path / "data"
    proc = _stage("stages.decode", "+task=docvqa", f"paths.data={data}", f"out_dir={data}", results)
    assert proc.returncode != 0
    assert _last_line(proc).startswith(f"out_dir {data}: is paths.data's folder too")
    assert not head.exists() and not data.exists()


def test_saved_weights_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:

        def fill(tmp: Path) -> None:
            fd = os.open(tmp / "model.safetensors", os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
            (tmp / "sub").mkdir(mode=0o700)

        replace_dir(tmp_path / "out", fill, "test", kind="head")
    finally:
        os.umask(old)
    assert (tmp_path / "out" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "out" / "sub").stat().st_mode & 0o777 == 0o755


# --- cases 2 and 4: checkpoints per run, locked, removed only by their run ---


def test_each_run_has_its_own_checkpoint_folder():
    from glance.training.checkpoints import run_folder

    a, b = run_folder("ck/head", "lr=0.001"), run_folder("ck/head", "lr=0.002")
    assert a != b and a.parent == b.parent == Path("ck/head")
    assert run_folder("ck/head", "lr=0.001") == a


def test_a_live_runs_lock_is_refused_and_a_dead_ones_taken_over(tmp_path):
    from glance.training.checkpoints import CheckpointBusy, locked

    folder = tmp_path / "head" / "abc"
    with locked(folder):
        with pytest.raises(CheckpointBusy, match=rf"process {os.getpid()} is training"):
            with locked(folder):
                pass
    assert not folder.parent.exists()  # lock released, the emptied stage folder removed
    folder.parent.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder.with_name("abc.lock").write_text(
        json.dumps({"pid": gone.pid, "host": os.uname().nodename})
    )
    with locked(folder):
        assert json.loads(folder.with_name("abc.lock").read_text())["pid"] == os.getpid()


def test_finish_removes_only_a_checkpoint(tmp_path):
    from glance.training.checkpoints import finish

    mine = _made(tmp_path / "a", "checkpoint", {"state.json": "{}"})
    theirs = tmp_path / "b"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    finish(mine)
    finish(theirs)
    assert not mine.exists() and (theirs / "notes.txt").is_file()
    assert tmp_path.is_dir()  # a parent holding anything else stays
    only = _made(tmp_path / "head" / "abc", "checkpoint", {"state.json": "{}"})
    finish(only)
    assert not (tmp_path / "head").exists()  # an emptied stage folder goes too


#: the run ``fit`` trains: four steps, a checkpoint after the second
RUN = SimpleNamespace(steps=4, lr=0.05, warmup=0, weight_decay=0.0, seed=0)


def _fit(folder: Path):
    from glance.training.loop import RunFiles, fit

    torch.manual_seed(0)
    head = torch.nn.Linear(4, 2)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))

    def batch_loss(rng):
        rows = torch.from_numpy(rng.integers(0, 8, size=4))
        return head(x[rows]).pow(2).mean()

    files = RunFiles(checkpoint=folder, save_every=2, key="k")
    log = fit(head, RUN, batch_loss, lambda r: head(x).pow(2).mean(), [], desc="t",
              eval_every=100, progress=False, feature_seconds=0.0, files=files)  # fmt: skip
    return [p.detach().clone() for p in head.parameters()], log


def _garbage_state(folder: Path) -> None:
    (folder / "state.json").write_text("{not json")


def _truncated_weights(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _missing_state(folder: Path) -> None:
    (folder / "state.safetensors").unlink()


@pytest.mark.parametrize("damage", [_garbage_state, _truncated_weights, _missing_state])
def test_a_damaged_checkpoint_is_moved_aside_and_the_run_starts_afresh(tmp_path, damage, caplog):
    fresh, _ = _fit(tmp_path / "fresh")
    folder = tmp_path / "ck"
    _fit(folder)  # leaves its step-2 checkpoint
    assert (folder / "state.json").is_file()
    damage(folder)
    with caplog.at_level("WARNING", logger="glance"):
        weights, log = _fit(folder)
    assert "resumed_from" not in log
    assert all(torch.equal(a, b) for a, b in zip(weights, fresh, strict=True))
    aside = tmp_path / "ck.damaged-1"
    assert aside.is_dir() and "is damaged" in caplog.text and str(folder) in caplog.text


def test_an_intact_checkpoint_still_resumes_to_the_same_weights(tmp_path):
    fresh, _ = _fit(tmp_path / "fresh")
    _fit(tmp_path / "ck")
    weights, log = _fit(tmp_path / "ck")
    assert log["resumed_from"] == 2
    assert all(torch.equal(a, b) for a, b in zip(weights, fresh, strict=True))


# --- shared feature files ------------------------------------------------------


class _Rows(list):
    def sequence(self, i):
        return self[i]


def test_two_runs_sharing_a_features_folder_keep_their_own_files(checkpoints, tmp_path):
    from glance import testing as tiny
    from glance.targets.vl import load_target
    from glance.training.block import Sequence
    from glance.training.features import OfflineFeatures

    target, _ = load_target(checkpoints["qwen3"][0], dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    rows = _Rows(Sequence(torch.randint(0, tiny.MASK, (12,), generator=g), 4) for _ in range(3))
    a = OfflineFeatures(target, rows, [0], tmp_path, key="corpus A")
    first = a(1).clone()
    b = OfflineFeatures(target, _Rows(rows[:2]), [1], tmp_path, key="corpus B")
    assert a.folder != b.folder and a.folder.parent == b.folder.parent == tmp_path
    assert torch.equal(a(1), first)
    assert OfflineFeatures(target, rows, [0], tmp_path, key="corpus A").folder == a.folder
    assert sorted(p.name for p in a.folder.iterdir()) == ["features.bin", "index.json"]


# --- the head stage, end to end -------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny toy corpus behind the shipped toy target's record."""
    root = tmp_path_factory.mktemp("pipeline")
    data = [f"paths.data={root / 'data'}", f"paths.results={root / 'results'}"]
    _stage("stages.prepare", "prepare.n=3", "n=2", *data, check=True)
    common = [f"paths.target={root / 'target'}", f"paths.corpus={root / 'corpus'}", *data]
    _stage("stages.target", "target.heldout=1", *common, check=True)
    _stage("stages.corpus", "corpus.greedy=32", "corpus.sampled=0", "corpus.heldout=4",
           "corpus.shard_size=32", "corpus.max_new_tokens=32", *common, check=True)  # fmt: skip
    return [*common, "corpus.greedy=32", "corpus.sampled=0", "corpus.heldout=4",
            "corpus.shard_size=32", "corpus.max_new_tokens=32", "head.train.eval_every=5",
            "head.train.save_every=5"]  # fmt: skip


@pytest.mark.slow
def test_a_finished_run_removes_its_own_checkpoint_and_nothing_else(corpus, tmp_path):
    ck = tmp_path / "ck"
    (ck / "head").mkdir(parents=True)
    (ck / "head" / "notes.txt").write_text("keep me")
    out = [f"paths.checkpoints={ck}", f"paths.results={tmp_path / 'r'}"]
    # run A, killed once it has a checkpoint
    a = _stage("stages.head", *corpus, *out, f"paths.head={tmp_path / 'a'}",
               "head.train.steps=4000", "head.train.lr=0.002",
               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 300

    def saved():  # a checkpoint renamed into place, not one still in its hidden temporary folder
        return [p.parent for p in (ck / "head").glob("*/state.json") if p.parent.name[0] != "."]

    while not saved():
        assert a.poll() is None, a.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    a.send_signal(signal.SIGKILL)
    a.wait()
    (a_folder,) = saved()
    a_state = (a_folder / "state.json").read_bytes()
    # run B, another learning rate, to the end
    _stage("stages.head", *corpus, *out, f"paths.head={tmp_path / 'b'}",
           "head.train.steps=10", "head.train.lr=0.003", check=True)  # fmt: skip
    assert (ck / "head" / "notes.txt").read_text() == "keep me"
    assert (a_folder / "state.json").read_bytes() == a_state  # A's, untouched
    # (a kill -9 inside a checkpoint write may leave its hidden temporary folder)
    left = sorted(p.name for p in (ck / "head").iterdir() if not p.name.startswith("."))
    assert left == sorted(["notes.txt", a_folder.name, a_folder.name + ".lock"]) or left == sorted(
        ["notes.txt", a_folder.name]
    ), left  # B's folder and lock are gone; A's stale lock may stay until A reruns
    assert np.isfinite(
        json.loads((tmp_path / "b" / "head.json").read_text())["train"]["final_loss"]
    )
