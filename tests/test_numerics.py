"""Pinned CPU numerics (glance.core.numerics) and the golden training run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glance.core.numerics import Numerics, NumericsError, cpu, pin, unpinned

ROOT = Path(__file__).resolve().parent.parent

# The weights of `python -m glance.testing.golden` (30 steps of the toy head)
# under the default pinned numerics. When the training code, the toy target or
# the corpus changes on purpose, rerun that command and paste its sha256 here,
# in the same commit as the change and the pipeline's regenerated results.
GOLDEN = "c34bff7debd147104494f0349c5b1d9a1acc148c634f75ec7b4c142641700d3c"
# The CPU vendor of the machine that made GOLDEN and the committed results
# (an Intel Xeon with AVX-512). MKL honours the MKL_CBWR pin on Intel CPUs only,
# so an AMD machine trains other bits under the same pin (docs/guarantees.md):
# there the test is an expected failure that names the CPU and both hashes,
# until a pin that holds across vendors is found.
GOLDEN_VENDOR = "GenuineIntel"


def check_golden(sha: str) -> None:
    """Assert ``sha`` is GOLDEN on a CPU of GOLDEN's vendor; elsewhere, xfail
    naming the CPU, its vector features and both hashes."""
    machine = cpu()
    if sha == GOLDEN:
        return
    said = (
        f"golden weights {sha} != committed {GOLDEN} on {machine['model']!r} "
        f"({machine['vendor']}; features {' '.join(machine['features'])})"
    )
    if machine["vendor"] != GOLDEN_VENDOR:
        pytest.xfail(f"{said}: GOLDEN was made on a {GOLDEN_VENDOR} CPU (MKL_CBWR honoured)")
    raise AssertionError(
        f"{said}: this machine's numerics differ from the machine that made the results, "
        "or the training code changed (see GOLDEN's comment)"
    )


def golden(env_extra: dict, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in Numerics().env()}
    proc = subprocess.run(
        [sys.executable, "-m", "glance.testing.golden", *args],
        cwd=ROOT,
        env=env | env_extra,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_golden_run_gives_the_committed_weights_whatever_capability_is_set():
    """The pin wins over what the machine (or the user) would choose: the same
    weights with ATEN_CPU_CAPABILITY preset to avx512 and MKL_CBWR to AUTO."""
    out = golden({"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO"})
    assert out["numerics"]["aten_capability"] == "avx2"
    assert out["numerics"]["MKL_CBWR"] == "AVX2"
    check_golden(out["sha256"])


@pytest.mark.slow
def test_the_golden_hash_moves_with_aten_s_level():
    """The golden test can fail: at ATen's baseline kernels the weights differ."""
    out = golden({}, "--aten", "default")
    assert out["numerics"]["aten_capability"] == "default"
    assert out["sha256"] != GOLDEN


def test_a_golden_mismatch_fails_on_the_vendor_that_made_it_and_xfails_elsewhere(monkeypatch):
    import _pytest.outcomes

    monkeypatch.setattr(sys.modules[__name__], "cpu", lambda: {
        "vendor": GOLDEN_VENDOR, "model": "X", "features": ["avx2"]})  # fmt: skip
    check_golden(GOLDEN)
    with pytest.raises(AssertionError, match="'X' .GenuineIntel; features avx2."):
        check_golden("0" * 64)
    monkeypatch.setattr(sys.modules[__name__], "cpu", lambda: {
        "vendor": "AuthenticAMD", "model": "EPYC", "features": ["avx2", "avx512f"]})  # fmt: skip
    with pytest.raises(_pytest.outcomes.XFailed, match=f"0{{64}} != committed {GOLDEN}.*avx512f"):
        check_golden("0" * 64)


def test_the_env_holds_one_value_per_library_switch():
    env = Numerics(threads=3).env()
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["MKL_CBWR"] == "AVX2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    assert {env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")} == {"3"}
    assert Numerics(pin=False, threads=0).env() == {}


@pytest.mark.parametrize(
    "field, value",
    [("aten_cpu_capability", "sse9"), ("mkl_cbwr", ""), ("mkl_cbwr", "AVX 2"), ("threads", 0)],
)
def test_bad_numerics_are_refused_naming_the_key(field, value):
    with pytest.raises(ValueError, match=field.replace("aten_", "numerics.aten_")):
        Numerics(**{field: value})


def test_from_config_refuses_an_unknown_key():
    with pytest.raises(ValueError, match="numerics: unknown key 'mkl'"):
        Numerics.from_config({"mkl": "AVX2"}, 2)


def test_pin_refuses_when_torch_already_loaded_other_numerics(monkeypatch):
    """In a process where torch is loaded (this one), a different pin cannot
    take effect: it is refused naming the variable, and nothing is set."""
    pytest.importorskip("torch")
    for k in Numerics().env():
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    before = dict(os.environ)
    with pytest.raises(NumericsError, match="ATEN_CPU_CAPABILITY: torch is already imported"):
        pin(Numerics())
    assert dict(os.environ) == before


def test_pin_does_nothing_when_the_environment_already_holds_it(monkeypatch):
    for k, v in Numerics().env().items():
        monkeypatch.setenv(k, v)
    assert unpinned(Numerics()) == {}
    pin(Numerics())  # torch is loaded, but nothing differs


def _stage_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in Numerics().env()}


def test_a_stage_refuses_bad_numerics_before_any_work(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "stages.fit_law", "numerics.aten_cpu_capability=avx9",
         f"paths.results={tmp_path}"],
        cwd=ROOT, env=_stage_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "numerics.aten_cpu_capability: expected one of" in proc.stderr


def test_only_the_timing_stages_run_on_the_machine_s_own_kernels():
    """bench and compile time the machine as a user runs it (and record its
    CPU); every stage whose numbers must reproduce stays pinned."""
    from glance.testing.dvc_deps import stages

    unpinned = {name for _, name, _, _ in stages() if _cmd(name).count("numerics.pin=false")}
    assert unpinned == {"bench", "compile"}


def _cmd(name: str) -> str:
    import yaml

    for pipeline in ("dvc.yaml", "stages/arms/dvc.yaml"):
        found = yaml.safe_load((ROOT / pipeline).read_text())["stages"].get(name)
        if found:
            return found.get("do", found)["cmd"]
    raise KeyError(name)


def test_a_timing_line_names_the_cpu_and_the_kernels():
    from glance.core.numerics import describe_timing_machine

    line = describe_timing_machine(Numerics(pin=False, threads=2))
    assert "numerics unpinned" in line and "2 threads" in line
    if cpu()["model"]:
        assert cpu()["model"] in line
