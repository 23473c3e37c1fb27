"""Issue 42: one readable line for a refusal, a traceback only for a bug.

A stage or the ``glance`` command that refuses its input (a damaged or
missing file, a bad value, a record that contradicts itself) exits 2 with one
line on stderr naming the file, key or field; ``GLANCE_DEBUG=1`` adds the
traceback. A SIGTERM leaves no temporary files, and a torchrun rank that never
comes fails the others within ``dist_timeout``.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("hydra", reason="the pipeline extra is part of the README's test install")

from omegaconf import OmegaConf  # noqa: E402

from glance.pipeline.config import check_config  # noqa: E402
from stages.params import compose_params  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def _env(**extra):
    return dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0", **ONE_THREAD, **extra)


def _stage(*args, **extra):
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=_env(**extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _results(tmp_path: Path) -> Path:
    """A copy of the repository's results, to damage."""
    out = tmp_path / "results"
    shutil.copytree(ROOT / "results", out)
    return out


def _one_line(proc, start: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(start), line
    return line


# --- the handler: refusals are one line, bugs keep their traceback --------------


def test_a_refusal_is_one_line_and_status_2(capsys):
    from glance._errors import reported

    with pytest.raises(SystemExit) as exit_, reported():
        raise ValueError("paths.results /x/law.json: not JSON\n(line 1)")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "paths.results /x/law.json: not JSON (line 1)\n"


@pytest.mark.parametrize("bug", [TypeError, KeyError, AttributeError, IndexError, AssertionError])
def test_a_bug_keeps_its_traceback(bug):
    from glance._errors import reported

    with pytest.raises(bug), reported():
        raise bug("a bug")


def test_an_os_error_without_a_file_is_not_a_refusal():
    from glance._errors import message

    assert message(OSError("device busy")) is None
    assert message(OSError(13, "Permission denied", "/x/law.json")).endswith("'/x/law.json'")


def test_not_lossless_is_a_result_not_a_bug(capsys):
    from glance._errors import reported
    from glance.experiments.gate import NotLossless

    with pytest.raises(SystemExit), reported():
        raise NotLossless("row glance: prompt 3 differs from its baseline at token 7")
    assert capsys.readouterr().err.startswith("row glance: prompt 3")


def test_glance_debug_prints_the_traceback_above_the_line(monkeypatch, capsys):
    from glance._errors import reported

    monkeypatch.setenv("GLANCE_DEBUG", "1")
    with pytest.raises(SystemExit), reported():
        raise FileNotFoundError("/x/head.json: missing")
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.strip().splitlines()[-1] == "/x/head.json: missing"


# --- stages: the survey's refusals ----------------------------------------------


def test_figures_refuse_a_garbage_law_json_in_one_line(tmp_path):
    results = _results(tmp_path)
    (results / "law.json").write_text("{garbage")
    proc = _stage(
        "stages.figures", f"paths.results={results}", f"paths.figures={tmp_path}/f", "threads=1"
    )
    _one_line(proc, f"{results / 'law.json'}: not JSON")


def test_figures_refuse_a_garbage_law_json_in_one_line_under_multirun(tmp_path):
    results = _results(tmp_path)
    (results / "law.json").write_text("{garbage")
    proc = _stage(
        "stages.figures",
        "-m",
        f"paths.results={results}",
        f"paths.figures={tmp_path}/f",
        "threads=1",
        f"hydra.sweep.dir={tmp_path}/sweeps",
    )
    _one_line(proc, f"{results / 'law.json'}: not JSON")


def test_a_stage_missing_its_input_says_so_in_one_line(tmp_path):
    proc = _stage(
        "stages.corpus", f"paths.target={tmp_path}/t", f"paths.corpus={tmp_path}/c", "threads=1"
    )
    _one_line(proc, f"{tmp_path / 't' / 'target.json'}: missing")


def test_glance_debug_gives_a_stage_its_traceback(tmp_path):
    proc = _stage(
        "stages.corpus",
        f"paths.target={tmp_path}/t",
        f"paths.corpus={tmp_path}/c",
        "threads=1",
        GLANCE_DEBUG="1",
    )
    assert proc.returncode == 2 and "Traceback" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{tmp_path / 't' / 'target.json'}: missing")


def test_the_cli_refuses_a_damaged_checkpoint_in_one_line(tmp_path, monkeypatch, capsys):
    """A checkpoint error outside the loader's own catch (here the target's
    config) is one line and status 2, not a traceback."""
    from glance import cli

    target = tmp_path / "target"
    shutil.copytree(ROOT / "models" / "toy-target", target)
    (tmp_path / "head").mkdir()

    def damaged(*args, **kwargs):
        raise json.JSONDecodeError("Expecting value", "", 0)

    monkeypatch.setattr(cli, "_check_prompt", damaged)
    argv = ["decode", "--target", str(target), "--head", str(tmp_path / "head"), "--prompt", "hi"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"
    )


# --- part 5: a law.json that contradicts itself ---------------------------------


def test_figures_refuse_a_law_whose_holds_contradicts_its_fit(tmp_path):
    results = _results(tmp_path)
    law = json.loads((results / "law.json").read_text())
    law["pooled"]["b1"], law["pooled"]["holds"] = -7, True
    (results / "law.json").write_text(json.dumps(law))
    proc = _stage(
        "stages.figures", f"paths.results={results}", f"paths.figures={tmp_path}/f", "threads=1"
    )
    line = _one_line(proc, f"{results / 'law.json'}: pooled.")
    assert "slope_positive" in line or "holds" in line
    assert not (tmp_path / "f" / "law.png").exists()


def test_a_holds_flag_alone_flipped_is_named():
    from glance.core.law import check_law_record

    law = json.loads((ROOT / "results" / "law.json").read_text())
    check_law_record(law, "results/law.json")
    name = next(iter(law["tasks"]))
    law["tasks"][name]["holds"] = not law["tasks"][name]["holds"]
    with pytest.raises(ValueError, match=rf"^results/law.json: tasks.{name}.holds: records"):
        check_law_record(law, "results/law.json")


# --- part 5: the report reads paths.results --------------------------------------


def test_report_refuses_an_empty_results_folder_naming_the_file(tmp_path):
    before = (ROOT / "notebooks" / "results.ipynb").read_bytes()
    proc = _stage("stages.report", f"paths.results={tmp_path}", "threads=1")
    line = _one_line(proc, f"paths.results {tmp_path}: no ")
    assert ".md" in line or ".json" in line
    assert (ROOT / "notebooks" / "results.ipynb").read_bytes() == before


# --- part 6: dist_timeout, SIGTERM ----------------------------------------------


def _refused(*overrides) -> str:
    cfg = OmegaConf.create(compose_params(list(overrides)))
    with pytest.raises(SystemExit) as err:
        check_config(cfg)
    return str(err.value)


@pytest.mark.parametrize("value", [0, -1, "'ten'"])
def test_dist_timeout_is_checked(value):
    assert _refused(f"dist_timeout={value}").startswith("dist_timeout: expected")


def test_params_yaml_has_the_configs_dist_timeout():
    import yaml

    conf = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert conf["dist_timeout"] == params["dist_timeout"] == 600


def test_init_distributed_passes_the_timeout(monkeypatch):
    import torch.distributed as dist

    from glance.pipeline import training

    seen = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: seen.update(kw))
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    assert training.init_distributed("cpu", 42) == (1, 2, "cpu")
    assert seen["timeout"] == datetime.timedelta(seconds=42)
    training.init_distributed("cpu")
    assert seen["timeout"] == datetime.timedelta(seconds=600)


def test_sigterm_during_prepare_leaves_no_temporary_folder(tmp_path):
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stages.prepare",
            f"paths.data={data}",
            "prepare.n=3000",
            "threads=1",
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.startswith(".") for p in tmp_path.iterdir()):
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "no temporary folder appeared"
            time.sleep(0.05)
        time.sleep(0.5)  # well inside the fill
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert not data.exists()


RANK = """
import sys, time
import torch.distributed as dist
from glance.pipeline.training import init_distributed
init_distributed("cpu", timeout=3)
if dist.get_rank() == 1:
    time.sleep(60)  # a rank stopped (SIGSTOP) or hung: it never reaches the barrier
    sys.exit(0)
start = time.monotonic()
try:
    dist.barrier()
except Exception as err:  # noqa: BLE001
    print(f"waited {time.monotonic() - start:.1f} s: {type(err).__name__}", flush=True)
    sys.exit(3)
"""


@pytest.mark.slow
def test_a_rank_that_never_comes_fails_the_other_within_dist_timeout():
    """The hang of the issue: a torchrun rank stopped, the other blocked for
    torch's default 30 minutes. Two gloo ranks, ``dist_timeout`` 3 s."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    ranks = [
        subprocess.Popen([sys.executable, "-c", RANK], cwd=ROOT, env=dict(env, RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]  # fmt: skip
    try:
        out, err = ranks[0].communicate(timeout=50)
    finally:
        for p in ranks:
            p.kill()
    assert ranks[0].returncode == 3, err[-2000:]
    waited = float(out.split()[1])
    assert 2.5 <= waited < 30, out
