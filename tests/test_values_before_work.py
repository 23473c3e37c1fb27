"""Issue 42: every value checked before work, as named regressions.

Each test is a value that used to be taken and fail late (after seconds or
minutes of loading or training) or run silently on nonsense. Now each exits at
once with one line naming the key, the value and what was expected: in the
config check (:func:`glance.pipeline.config.check_config`) where the config
alone says it, else at the start of its stage, from the target's
``config.json``, before any weight loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("hydra", reason="the pipeline extra is part of the README's test install")

from omegaconf import OmegaConf  # noqa: E402

from glance.pipeline.config import check_config  # noqa: E402
from stages.params import compose_params  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _refused(*overrides) -> str:
    cfg = OmegaConf.create(compose_params(list(overrides)))
    with pytest.raises(SystemExit) as err:
        check_config(cfg)
    return str(err.value)


def _stage(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [sys.executable, "-m", *args, "threads=1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def toy_target(tmp_path) -> Path:
    """A target stage's record pointing at the committed toy target (4096
    positions, 57 tokens), so a stage finds its ``config.json``."""
    folder = tmp_path / "target"
    folder.mkdir()
    record = {"path": str(ROOT / "models" / "toy-target"), "local": True, "source": "toy"}
    (folder / "target.json").write_text(json.dumps(record))
    return folder


# --- 1: dtype -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["banana", "int64", "float8_e4m3fn"])
def test_case_01_a_dtype_the_target_cannot_load_in_is_refused(value):
    message = _refused(f"dtype={value}")
    assert message.startswith("dtype: expected a dtype the target loads in"), message
    assert message.endswith(f"got {value!r}")


def test_case_01_the_target_dtype_is_named_when_it_is_the_bad_one():
    assert _refused("target.dtype=int64").startswith("target.dtype: expected a dtype")


# --- 2: block size ------------------------------------------------------------


def test_case_02_a_block_size_the_head_loader_refuses_is_refused_before_training():
    assert _refused("head.train.block_size=65") == (
        "head.train.block_size: expected an integer in 2..64; got 65"
    )


def test_case_02_the_config_and_the_head_loader_agree_on_block_sizes():
    from glance.heads.block import BLOCK_SIZES
    from glance.pipeline import config

    assert config.BLOCK_SIZES == BLOCK_SIZES


# --- 3: learning rate, and a NaN loss -----------------------------------------


@pytest.mark.parametrize(
    "key", ["head.train.lr", "scorer.lr", "arms.train.lr", "target.train.lr",
            "arms.assistant.train.lr"],
)  # fmt: skip
def test_case_03_a_learning_rate_past_one_is_refused(key):
    assert _refused(f"{key}=1e30") == f"{key}: expected a finite number in (0, 1.0]; got 1e+30"


def test_case_03_training_stops_at_the_first_non_finite_loss():
    import torch

    from glance.training.loop import NonFiniteLoss, RunFiles, fit

    head = torch.nn.Linear(2, 1)
    calls = []

    def batch_loss(rng):
        calls.append(1)
        loss = head(torch.ones(1, 2)).sum()
        return loss * float("nan") if len(calls) == 3 else loss

    cfg = SimpleNamespace(steps=10, lr=1e-3, warmup=0, weight_decay=0.0, seed=0)
    with pytest.raises(NonFiniteLoss, match=r"^head: loss is nan at step 2; lower the learning"):
        fit(head, cfg, batch_loss, None, [], desc="head", eval_every=100, progress=False,
            feature_seconds=0.0, files=RunFiles())  # fmt: skip
    assert len(calls) == 3
    assert issubclass(NonFiniteLoss, FloatingPointError) and issubclass(NonFiniteLoss, ValueError)


# --- 4, 5: limits from the target's config.json, before loading ---------------


def test_case_04_a_corpus_context_past_the_targets_positions_exits_before_loading(
    tmp_path, toy_target
):
    corpus = tmp_path / "corpus"
    proc = _stage("stages.corpus", "corpus.context=100000", f"paths.target={toy_target}",
                  f"paths.corpus={corpus}")  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "corpus.context: expected at most 3391 filler tokens (the target's 4096 positions, "
        "less corpus.max_new_tokens=704 and the question); got 100000"
    )
    assert not corpus.exists()


def test_case_04_the_limits_pass_when_the_target_stage_has_not_run(tmp_path):
    from glance.pipeline.limits import check_corpus_positions, target_text_config

    cfg = OmegaConf.create(compose_params([f"paths.target={tmp_path}", "corpus.context=100000"]))
    assert target_text_config(cfg) is None
    check_corpus_positions(cfg)  # the stage then names the missing target.json


def test_case_05_a_scorer_top_k_past_the_vocabulary_exits_before_loading(tmp_path, toy_target):
    out = tmp_path / "scorer"
    proc = _stage("stages.scorer", "scorer.top_k=100000", f"paths.target={toy_target}",
                  f"paths.scorer={out}", f"paths.head={tmp_path / 'head'}")  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "scorer.top_k: expected at most the target's vocabulary, 57 tokens; got 100000"
    )
    assert not out.exists()


# --- 6: lists of runs ---------------------------------------------------------

LISTS = {
    "sweep.budgets": "[15,15]",
    "context_sweep.lengths": "[0,0]",
    "seed_check.seeds": "[2,2]",
    "bench.lengths": "[64,64]",
    "bench.tasks": "[docvqa,docvqa]",
    "arms.budgets": "[8,8]",
    "arms.tasks": "[docvqa,docvqa]",
    "arms.rules": "[top2,top2]",
    "tasks": "[docvqa,docvqa]",
    "decode.sampled": "[0.7,0.7]",
}


@pytest.mark.parametrize("key", sorted(LISTS))
def test_case_06_a_list_of_runs_with_an_entry_twice_is_refused(key):
    message = _refused(f"{key}={LISTS[key]}")
    assert message.startswith(f"{key}[1]: expected each entry once"), message


@pytest.mark.parametrize("key", sorted(set(LISTS) - {"decode.sampled", "arms.rules", "tasks"}))
def test_case_06_an_empty_list_of_runs_is_refused(key):
    assert _refused(f"{key}=[]") == (
        f"{key}: expected a list of distinct entries, at least one; got []"
    )


@pytest.mark.parametrize("key", ["decode.sampled", "arms.rules"])
def test_case_06_an_empty_list_of_optional_rows_means_none(key):
    check_config(OmegaConf.create(compose_params([f"{key}=[]"])))


# --- 7: numerics --------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mkl_cbwr", "BOGUS"),
        ("mkl_cbwr", "'AVX2,LAX'"),
        ("onednn_max_cpu_isa", "AVX3"),
        ("openblas_coretype", "Pentium9"),
        ("npy_disable_cpu_features", "'AVX512F NOT_A_FEATURE'"),
    ],
)
def test_case_07_a_numerics_value_its_library_ignores_is_refused(key, value):
    message = _refused(f"numerics.{key}={value}")
    assert message.startswith(f"numerics.{key}: expected "), message
    assert message.endswith(f"got {value.strip(chr(39))!r}")


@pytest.mark.parametrize(
    "override",
    [
        "numerics.mkl_cbwr='AVX2,STRICT'",
        "numerics.mkl_cbwr=COMPATIBLE",
        "numerics.openblas_coretype=skylakex",  # OpenBLAS ignores case
        "numerics.onednn_max_cpu_isa=AVX512_CORE",
        "numerics.npy_disable_cpu_features=''",
    ],
)
def test_case_07_values_the_libraries_take_pass(override):
    check_config(OmegaConf.create(compose_params([override])))


# --- 8: head=checkpoint without head.path -------------------------------------


def test_case_08_a_checkpoint_head_without_a_path_is_one_line():
    assert _refused("head=checkpoint").startswith(
        "head.path: expected the folder of a trained head"
    )


# --- 9: a sweep folder name past the file system's limit ----------------------


def test_case_09_a_long_sweep_folder_name_is_shortened_and_kept_apart(tmp_path):
    from glance.experiments.decode import NAME_MAX, sweep_folder

    long = ",".join(f"arms.rules=[r{i}]" for i in range(40))
    a, b = sweep_folder(tmp_path, long + ",x=1"), sweep_folder(tmp_path, long + ",x=2")
    assert len(a.name) <= NAME_MAX and len(b.name) <= NAME_MAX
    assert a != b and a.name[:100] == long[:100]
    assert sweep_folder(tmp_path, long + ",x=1") == a  # deterministic
    a.mkdir()  # the file system takes it
    assert sweep_folder(tmp_path, "budget=15") == tmp_path / "budget=15"  # short: as before


# --- 10, 11: prepare.n and the other training numbers ------------------------


def test_case_10_prepare_n_past_the_toy_image_names_is_refused():
    assert _refused("prepare.n=1000000") == "prepare.n: expected an integer in 1..9999; got 1000000"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("scorer.weight_decay=5", "scorer.weight_decay: expected a finite number in [0, 1]"),
        ("corpus.long_share=2", "corpus.long_share: expected a finite number in [0, 1]"),
        ("head.train.rows=0", "head.train.rows: expected an integer >= 1"),
        ("head.train.warmup=-1", "head.train.warmup: expected an integer >= 0"),
        ("target.train.steps=0", "target.train.steps: expected an integer >= 1"),
        ("target.train.weight_decay=nan", "target.train.weight_decay: expected a finite number"),
        ("arms.assistant.train.batch=0", "arms.assistant.train.batch: expected an integer >= 1"),
        ("target.train.task_weights=[0,0,0,0,0,0]", "target.train.task_weights: expected weights"),
        ("arms.assistant.train.init=models/nowhere", "arms.assistant.train.init: expected a"),
        ("corpus.context_share=0.99", "corpus.context_share: expected at most 1 - corpus.long"),
    ],
)
def test_case_11_other_training_numbers_are_in_range(override, expected):
    message = _refused(override)
    assert message.startswith(expected), message


def test_case_11_a_target_backbone_is_checked_only_when_the_target_retrains():
    message = _refused("target.retrain=true", "target.train.init=models/nowhere")
    assert message.startswith("target.train.init: expected a saved toy target"), message
    check_config(OmegaConf.create(compose_params(["target.train.init=models/nowhere"])))
