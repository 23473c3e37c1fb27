"""The typed config: bad values are refused in milliseconds, before any model loads."""

from __future__ import annotations

import re
import time

import pytest
from conftest import THREADS

pytest.importorskip("hydra", reason="the pipeline extra is part of the README's test install")

from omegaconf import OmegaConf  # noqa: E402

from glance.pipeline.config import MAX_BUDGET, check_config  # noqa: E402
from stages.params import compose_params  # noqa: E402

BAD = [
    ("budget=1.5", "budget", "1.5"),
    ("budget=abc", "budget", "abc"),
    ("budget=10**6", "budget", "10**6"),
    (f"budget={MAX_BUDGET + 1}", "budget", str(MAX_BUDGET + 1)),
    ("max_new_tokens=0", "max_new_tokens", "0"),
    ("context=-5", "context", "-5"),
    ("n=0", "n", "0"),
    ("timing=fast", "timing", "fast"),
    ("temperature=inf", "temperature", "inf"),
    ("n=abc", "n", "abc"),
    ("chain=maybe", "chain", "maybe"),
    ("decode.bootstrap=abc", "decode.bootstrap", "abc"),
    ("decode.top_p=0", "decode.top_p", "0"),
    ("decode.sampled=[0.7,x]", "decode.sampled[1]", "x"),
    ("sweep.budgets=[1,0]", "sweep.budgets[1]", "0"),
    ("sweep.n=0", "sweep.n", "0"),
    ("audit.n=-1", "audit.n", "-1"),
    ("bench.lengths=[8,0]", "bench.lengths[1]", "0"),
    ("context_sweep.lengths=[-1]", "context_sweep.lengths[0]", "-1"),
    ("threads=two", "threads", "two"),
    ("+surprise=1", "surprise", "surprise"),
    ("target.auto_cost.sizes=[1,3,3,15,31,63,127,255]", "target.auto_cost.sizes", "3, 3"),
    ("target.auto_cost.verify_ms=[1.0,2.0]", "target.auto_cost.verify_ms", "2.0"),
    ("target.auto_cost.verify_ms=[1,2,3,4,5,6,7,-8]", "target.auto_cost.verify_ms[7]", "-8"),
    ("target.auto_cost.draft_ms=nan", "target.auto_cost.draft_ms", "nan"),
    ("target.source=hub", "target.source", "hub"),
    ("head.source=hub", "head.source", "hub"),
    ("head.train.features=cached", "head.train.features", "cached"),
    ("head.train.mask_span=open", "head.train.mask_span", "open"),
    ("head.train.save_every=-1", "head.train.save_every", "-1"),
    ("head.train.lr=0", "head.train.lr", "0"),
    ("corpus.shard_size=100", "corpus.shard_size", "100"),
    ("corpus.greedy=-3", "corpus.greedy", "-3"),
    ("corpus.long_share=1.5", "corpus.long_share", "1.5"),
    ("corpus.source=hf", "corpus.hub", "None"),
    ("scorer.top_k=1", "scorer.top_k", "1"),
    ("scorer.rank=0", "scorer.rank", "0"),
    ("scorer.lr=-0.1", "scorer.lr", "-0.1"),
    ("scorer.seed=-1", "scorer.seed", "-1"),
    ("decode.scored_row=maybe", "decode.scored_row", "maybe"),
    ("target.size.family=llava", "target.size.family", "llava"),
    ("arms.assistant.size.heads=0", "arms.assistant.size.heads", "0"),
]


def _cfg(*overrides):
    return OmegaConf.create(compose_params(["+task=docvqa", *overrides]))


def test_defaults_and_every_target_pass():
    check_config(_cfg())
    for target in ("qwen3_vl_8b", "qwen2_5_vl_7b", "toy_qwen2_5_vl"):
        check_config(_cfg(f"target={target}"))
        check_config(_cfg(f"target={target}", "head=train", "corpus=cauldron_vqav2"))
        check_config(_cfg(f"target={target}", "corpus=cauldron_localized_narratives"))
    check_config(_cfg("budget=auto", "sweep.budgets=[1,auto]"))


@pytest.mark.parametrize(("override", "key", "value"), BAD)
def test_bad_values_name_key_value_and_what_is_allowed(override, key, value):
    with pytest.raises(SystemExit) as err:
        check_config(_cfg(override))
    message = str(err.value)
    assert message.startswith(f"{key}: "), message
    assert value in message
    if key != "surprise":
        assert "expected" in message


def test_a_pretrained_target_needs_a_path():
    with pytest.raises(SystemExit, match=r"^target.path: expected a hub name or a local"):
        check_config(_cfg("target=qwen3_vl_8b", "target.path=null"))


@pytest.mark.parametrize("stage", ["decode", "audit", "bench"])
def test_stages_refuse_bad_config_before_any_model_loads(stage, monkeypatch):
    """Each stage, called as Hydra calls it, fails within a second although
    loading the target would take five: the check comes first."""
    import importlib

    import glance.pipeline.app
    import glance.targets.vl

    def slow_load(*args, **kwargs):
        time.sleep(5)
        raise AssertionError("the stage loaded a model before checking its config")

    monkeypatch.setattr(glance.pipeline.app, "load_target", slow_load)
    monkeypatch.setattr(glance.targets.vl, "load_target", slow_load)
    main = importlib.import_module(f"stages.{stage}").main
    for override, key, _ in BAD[:9]:
        cfg = _cfg(override)
        start = time.perf_counter()
        with pytest.raises(SystemExit, match=f"^{key}: expected"):
            main(cfg)
        assert time.perf_counter() - start < 1.0, override


@pytest.mark.parametrize("stage", ["decode", "sweep", "audit", "bench", "arms"])
def test_stages_read_their_task_files_before_any_model_loads(stage, monkeypatch, tmp_path, capsys):
    """A missing task file is named before the target loads, in one line
    (status 2, issue 42)."""
    import importlib

    import glance.pipeline.app
    import glance.targets.vl

    def slow_load(*args, **kwargs):
        raise AssertionError("the stage loaded a model before reading its task files")

    monkeypatch.setattr(glance.pipeline.app, "load_target", slow_load)
    monkeypatch.setattr(glance.targets.vl, "load_target", slow_load)
    main = importlib.import_module(f"stages.{stage}").main
    paths = (f"paths.data={tmp_path / 'data'}", f"paths.results={tmp_path / 'results'}")
    cfg = _cfg(*paths, f"threads={THREADS}")
    with pytest.raises(SystemExit) as exit_:
        main(cfg)
    assert exit_.value.code == 2
    assert re.match(f"^{tmp_path / 'data'}/.*: missing task file", capsys.readouterr().err)


def test_the_built_config_holds_the_librarys_own_objects():
    from glance.pipeline.config import Config, CorpusConfig, TrainRun, build
    from glance.toy.config import EagleWindows, TargetSize, TrainConfig

    cfg = build(_cfg())
    assert isinstance(cfg, Config)
    assert isinstance(cfg.head.train, TrainRun) and cfg.head.train.steps == 6000
    assert isinstance(cfg.target.size, TargetSize) and isinstance(cfg.target.train, TrainConfig)
    assert (
        cfg.target.train.init == "models/toy-reader"
        and list(cfg.target.train.task_weights)[0] == 0.2
    )
    assert (
        isinstance(cfg.arms.assistant.train, TrainConfig) and cfg.arms.assistant.size.hidden == 64
    )
    assert isinstance(cfg.arms.train, EagleWindows) and cfg.arms.train.ttt == 7
    assert cfg.task.name == "docvqa" and cfg.task.max_new_tokens > 0
    # the corpus the block and EAGLE-style heads share comes from one block
    assert isinstance(cfg.corpus, CorpusConfig) and cfg.corpus.greedy == 800
    assert build(_cfg("head=checkpoint", "head.path=x")).head.train is None


@pytest.mark.parametrize(
    "key",
    [
        "arms.assistant.train.warmup",  # a library default must not fill in for conf/
        "target.size.hidden",
        "head.train.lr",
        "arms.train.window",
        "decode.top_k",
        "scorer.steps",
        "paths.scorer",
    ],
)
def test_a_key_conf_leaves_out_is_named_never_defaulted(key):
    from glance.pipeline.config import build

    with pytest.raises(SystemExit, match=rf"^{key}: expected a value"):
        build(_cfg(f"~{key}"))
