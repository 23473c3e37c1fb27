"""Head training as the pipeline runs it: the corpus (resumable Arrow shards,
checked before training), the trainer's checkpoints (a SIGKILLed run resumes
bit for bit), data parallelism (K=2 ranks against one), dvclive's metrics, and
the online and offline feature modes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from glance.training.block import Sequence
from glance.training.corpus import Corpus, CorpusError, Part, build_corpus

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone")
TOY = ROOT / "models" / "toy-target"


def _conversations(n: int, seed: int):
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        colour = tuple(int(c) for c in rng.integers(0, 255, size=3))
        image = Image.new("RGB", (16 + 8 * (i % 3), 16), colour)
        content = [{"type": "image", "image": image}, {"type": "text", "text": f"q{i}"}]
        out.append([{"role": "user", "content": content}])
    return out


class _Answerer:
    """A stand-in target: answers from the conversation's text and the seed;
    counts what it answered, and can fail after ``fail_after`` batches."""

    def __init__(self, fail_after=None):
        self.batches, self.fail_after = 0, fail_after

    def __call__(self, conversations, temperature, seed):
        if self.fail_after is not None and self.batches >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.batches += 1
        out = []
        for j, conv in enumerate(conversations):
            q = int(conv[0]["content"][1]["text"][1:])
            ids = [1, 2, 3, 4 + q % 7, 5 + (seed + j) % 11, 9]
            out.append(Sequence(torch.tensor(ids), 3))
        return out


def _parts(n=96, seed=0):
    return [
        Part("train", "test", _conversations(n, seed), range(n), 0.0, seed),
        Part("train", "test", _conversations(32, seed + 1), range(32), 1.0, seed + 1),
        Part("heldout", "test", _conversations(8, seed + 2), range(8), 0.0, seed + 2),
    ]


def _table(folder, part="train"):
    c = Corpus(folder, part, vocab_size=64)
    return [c.input_ids(i).tolist() for i in range(len(c))], c


def test_a_killed_corpus_run_resumes_after_its_last_shard(tmp_path):
    recipe = {"target": "abc", "max_new_tokens": 8}
    whole = build_corpus(tmp_path / "whole", _parts(), _Answerer(), recipe, shard_size=32)
    killed = _Answerer(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(tmp_path / "c", _parts(), killed, recipe, shard_size=32)
    assert sorted(p.name for p in (tmp_path / "c" / "train").iterdir()) == [
        "shard-00000",
        "shard-00001",
    ]  # finished shards only: the third was never renamed into place
    again = _Answerer()
    index = build_corpus(tmp_path / "c", _parts(), again, recipe, shard_size=32)
    assert again.batches == 3  # the two finished shards were reused
    assert index == whole
    assert _table(tmp_path / "c")[0] == _table(tmp_path / "whole")[0]
    assert len(Corpus(tmp_path / "c", "heldout", vocab_size=64)) == 8


def test_a_shard_from_another_recipe_is_made_again(tmp_path, caplog):
    build_corpus(tmp_path, _parts(), _Answerer(), {"target": "a"}, shard_size=32)
    again = _Answerer()
    with caplog.at_level("INFO", logger="glance"):
        build_corpus(tmp_path, _parts(), again, {"target": "b"}, shard_size=32)
    assert again.batches == 5  # every shard, none reused
    assert "made by another recipe or target" in caplog.text
    assert Corpus(tmp_path, vocab_size=64).recipe == {"target": "b"}


def test_corpus_rows_keep_their_images_and_source_rows(tmp_path):
    build_corpus(tmp_path, _parts(), _Answerer(), {"target": "a"}, shard_size=32)
    import datasets

    shard = datasets.load_from_disk(str(tmp_path / "train" / "shard-00003"))
    assert shard["source_row"] == list(range(32)) and set(shard["temperature"]) == {1.0}
    refs = [r for row in shard["images"] for r in row]
    assert len(refs) == 32 and all((tmp_path / r).is_file() for r in refs)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        ("truncate", r"corpus shard .*train/shard-00001: cannot be read"),
        ("image", r"shard-00000, row \d+: image 'images/[0-9a-f]+\.png' is missing"),
        ("recipe", r"corpus shard .*train/shard-00002: made_by.json is missing or records another"),
        ("index", r"corpus .*corpus.json: cannot be read"),
    ],
)  # fmt: skip
def test_a_damaged_corpus_fails_before_training_naming_the_shard(tmp_path, damage, match):
    build_corpus(tmp_path, _parts(), _Answerer(), {"target": "a"}, shard_size=32)
    if damage == "truncate":
        arrow = next((tmp_path / "train" / "shard-00001").glob("*.arrow"))
        arrow.write_bytes(arrow.read_bytes()[:200])
    elif damage == "image":
        import datasets

        ref = datasets.load_from_disk(str(tmp_path / "train" / "shard-00000"))["images"][5][0]
        (tmp_path / ref).unlink()
    elif damage == "recipe":
        made = tmp_path / "train" / "shard-00002" / "made_by.json"
        made.write_text(json.dumps(json.loads(made.read_text()) | {"recipe": {"target": "z"}}))
    else:
        (tmp_path / "corpus.json").write_text("{")
    with pytest.raises(CorpusError, match=match):
        Corpus(tmp_path, vocab_size=64)


def test_a_corpus_row_outside_the_vocabulary_is_named(tmp_path):
    build_corpus(tmp_path, _parts(), _Answerer(), {"target": "a"}, shard_size=32)
    with pytest.raises(CorpusError, match=r"shard-00000, row \d+: token ids outside 0\.\.9"):
        Corpus(tmp_path, vocab_size=10)


# The trainer, on the shipped toy target: a few dozen steps of a small head.
TRAIN = """
import hashlib, json, sys
from pathlib import Path
import torch
from glance.core.numerics import Numerics, pin
pin(Numerics(threads=1), reexec=True)
torch.set_num_threads(1)
from glance.targets.vl import load_target
from glance.toy.world import toy_corpus
from glance.training.block import HeadConfig, train_head
from glance.training.loop import RunFiles
out, features = Path(sys.argv[1]), sys.argv[2]
target, processor = load_target("{toy}", dtype=torch.float32)
seqs, probe, _ = toy_corpus(target, processor, greedy=8, sampled=8, heldout=4, seed=0,
                            max_new_tokens=48, long_share=0.0, context=0)
cfg = HeadConfig(block_size=8, layers=1, steps=40, seed=0, mask_span="variable")
files = RunFiles(checkpoint=out / "ckpt", save_every=10, key="k", live=out / "live", log_every=5)
head, log = train_head(target, seqs, 3, cfg, heldout=probe, eval_every=10, features=features,
                       work_dir=out / "work", files=files, progress=False)
state = b"".join(v.numpy().tobytes() for v in head.state_dict().values())
(out / "result.json").write_text(json.dumps({{"sha": hashlib.sha256(state).hexdigest(),
                                              "curve": log["heldout_curve"],
                                              "resumed": log.get("resumed_from")}}))
"""


def _train(out: Path, features: str = "offline", wait_for_checkpoint: bool = False):
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", TRAIN.format(toy=TOY), str(out), features]
    if not wait_for_checkpoint:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads((out / "result.json").read_text())
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not (out / "ckpt" / "state.json").is_file():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return None


@pytest.mark.slow
def test_a_sigkilled_training_run_resumes_to_the_same_weights(tmp_path):
    whole = _train(tmp_path / "whole")
    _train(tmp_path / "killed", wait_for_checkpoint=True)
    assert not (tmp_path / "killed" / "result.json").exists()
    resumed = _train(tmp_path / "killed")
    assert resumed["resumed"] in (10, 20, 30)
    assert resumed["sha"] == whole["sha"]
    assert resumed["curve"] == whole["curve"]
    # dvclive's files hold every logged step once, as an uninterrupted run's do
    for name in ("train/loss.tsv", "heldout/loss.tsv", "train/lr.tsv"):
        a = (tmp_path / "whole" / "live" / "plots" / "metrics" / name).read_text()
        b = (tmp_path / "killed" / "live" / "plots" / "metrics" / name).read_text()
        assert a == b, name
    summary = json.loads((tmp_path / "whole" / "live" / "metrics.json").read_text())
    assert {"loss", "lr", "tokens_per_second"} <= set(summary["train"])


@pytest.mark.slow
def test_online_and_offline_features_train_the_same_head(tmp_path):
    assert _train(tmp_path / "on", "online")["sha"] == _train(tmp_path / "off", "offline")["sha"]


def _stage(args, cwd, launcher=()):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0", OMP_NUM_THREADS="1")
    cmd = [*launcher, "-m", *args] if launcher else [sys.executable, "-m", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """The target stage's record of the shipped toy target, made here: a fresh
    clone has no ``models/target`` until ``dvc repro`` runs."""
    root = tmp_path_factory.mktemp("target")
    data = [f"paths.data={root / 'data'}"]
    _stage(["stages.prepare", "prepare.n=3", "n=2", *data], ROOT)
    _stage(["stages.target", "target.heldout=1", *data, f"paths.target={root / 'target'}",
            f"paths.results={root / 'results'}"], ROOT)  # fmt: skip
    return root / "target"


@pytest.mark.slow
def test_two_ranks_train_the_head_one_rank_trains(tmp_path, target):
    """torchrun with gloo, K=2 against K=1 with the same global batch: the
    held-out curves agree to float rounding."""
    common = [
        f"paths.target={target}", f"paths.corpus={tmp_path / 'corpus'}",
        "corpus.greedy=32", "corpus.sampled=32", "corpus.heldout=4", "corpus.shard_size=32",
        "corpus.max_new_tokens=48", "head.train.steps=40", "head.train.eval_every=10",
        "head.train.save_every=0", "threads=1",
    ]  # fmt: skip
    _stage(["stages.corpus", *common, f"paths.results={tmp_path / 'r0'}"], ROOT)
    curves = {}
    for k in (1, 2):
        out = [f"paths.head={tmp_path / f'head{k}'}", f"paths.results={tmp_path / f'r{k}'}",
               f"paths.checkpoints={tmp_path / f'ck{k}'}"]  # fmt: skip
        launcher = (*TORCHRUN, f"--nproc_per_node={k}")
        _stage(["stages.head", *common, *out], ROOT, launcher if k > 1 else ())
        record = json.loads((tmp_path / f"head{k}" / "head.json").read_text())
        assert record["train"]["ranks"] == k
        curves[k] = np.array([loss for _, loss in record["train"]["heldout_curve"]])
    assert len(curves[1]) == 5
    assert np.max(np.abs(curves[2] - curves[1]) / curves[1]) < 1e-4
    assert (tmp_path / "r2" / "train" / "head" / "metrics.json").is_file()  # rank 0's


@pytest.mark.slow
def test_a_rank_that_fails_stops_the_run_with_its_error(tmp_path, target):
    proc = subprocess.run(
        [*TORCHRUN, "--nproc_per_node=2", "-m", "stages.head", f"paths.target={target}",
         f"paths.corpus={tmp_path / 'none'}", f"paths.head={tmp_path / 'h'}",
         f"paths.checkpoints={tmp_path / 'ck'}", "threads=1"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "corpus.json: cannot be read" in proc.stdout + proc.stderr
    assert not (tmp_path / "h").exists()


def test_the_readme_multi_node_recipe_composes():
    """The ``srun torchrun`` recipe of docs/real-targets.md: torchrun's own parser accepts its
    launcher arguments, and the stage's overrides compose into a config that
    passes the checks (nothing is launched)."""
    import re
    import shlex

    from omegaconf import OmegaConf
    from torch.distributed.run import get_args_parser

    from glance.pipeline.config import check_config
    from stages.params import compose_params

    readme = (ROOT / "docs" / "real-targets.md").read_text(encoding="utf-8")
    block = re.search(r"srun [^\n]*torchrun[^`]*?(?=\n```)", readme, re.S).group(0)
    words = shlex.split(
        block.replace("\\\n", " ").replace("$(scontrol show hostnames | head -1)", "node0")
    )
    launcher = words[words.index("torchrun") + 1 :]
    args = get_args_parser().parse_args(launcher)
    assert args.nnodes == "2" and args.nproc_per_node == "8" and args.rdzv_backend == "c10d"
    assert args.module and args.training_script == "stages.head"
    overrides = args.training_script_args
    assert "head=train" in overrides and "device=cuda" in overrides
    check_config(OmegaConf.create(compose_params(overrides)))
