"""The pipeline: conf/ composition, params.yaml, dvc.yaml wiring, and `dvc repro`
end to end on a shrunken toy world."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("hydra", reason="the pipeline extra is part of the README's test install")

from stages.params import compose_params  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["caption", "textvqa", "infovqa", "docvqa", "chartqa"]
#: the tiny pipeline's tasks: a subset, so that a run on some tasks is tested too
RUN_TASKS = ["docvqa", "chartqa"]

# Small enough for two CPU cores: the shipped target, a barely trained head, two
# measured prompts per task, two budgets and two context lengths.
TINY = [
    f"tasks=[{','.join(RUN_TASKS)}]",
    "prepare.n=3",
    "target.heldout=1",
    "corpus.greedy=4",
    "corpus.sampled=2",
    "corpus.heldout=2",
    "corpus.max_new_tokens=24",
    "corpus.shard_size=32",
    "head.train.steps=3",
    "scorer.steps=3",
    "n=2",
    "max_new_tokens=10",
    "decode.bootstrap=200",
    "sweep.budgets=[1,7]",
    "sweep.n=2",
    "context_sweep.lengths=[0,16]",
    "context_sweep.task=docvqa",
    "context_sweep.n=2",
    "seed_check.n=2",
    "audit.n=1",
    "bench.tasks=[docvqa,chartqa]",
    "bench.n=2",
    "bench.lengths=[8,24]",
    "bench.length_n=1",
    "bench.cost_n=1",
    "arms.n=2",
    "arms.tasks=[docvqa,chartqa]",
    "arms.budget=8",
    "arms.budgets=[4,8]",
    "arms.train.window=4",
    "arms.train.steps=3",
    "arms.train.ttt=2",
    "arms.assistant.train.steps=3",
    "threads=1",
]


def run(*args, cwd=ROOT, check=True):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0")
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def test_params_yaml_is_the_composition_of_conf():
    committed = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert committed == compose_params(), "params.yaml is stale: run `python -m stages.params`"


KNOBS = ("budget", "branch_k", "timing", "n", "max_new_tokens", "chain", "context", "temperature")


def test_each_decode_knob_has_one_name():
    p = compose_params(["budget=31", "timing=legacy"])
    assert p["budget"] == 31 and p["timing"] == "legacy"
    for knob in (*KNOBS, "extend_budget"):
        assert knob in p and knob not in p["decode"], knob
    # and nothing in params.yaml is stored twice under two names
    text = (ROOT / "params.yaml").read_text()
    assert "${" not in text


@pytest.mark.parametrize("target", ["toy", "qwen3_vl_8b", "qwen2_5_vl_7b"])
def test_every_target_config_composes(target):
    p = compose_params([f"target={target}", "+task=chartqa"])
    assert p["target"]["name"] == target
    assert p["task"]["file"] == "chartqa.jsonl"
    assert p["dtype"] == ("float32" if target == "toy" else "bfloat16")


@pytest.mark.parametrize("pipeline", ["dvc.yaml", "stages/arms/dvc.yaml"])
def test_every_stage_param_exists_in_params_yaml(pipeline):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    stages = yaml.safe_load((ROOT / pipeline).read_text())["stages"]
    for name, stage in stages.items():
        body = stage.get("do", stage)
        for key in body.get("params", []):
            node = params
            for part in key.split("."):
                assert part in node, f"dvc.yaml stage {name} reads {key}, not in params.yaml"
                node = node[part]


def test_unknown_task_fails_with_hydras_options():
    proc = run("-m", "stages.decode", "+task=nope", check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "nope" in text and all(t in text for t in TASKS)


def test_missing_task_names_the_options():
    proc = run("-m", "stages.decode", check=False)
    assert proc.returncode != 0
    assert "+task=" in proc.stderr and "chartqa" in proc.stderr


@pytest.mark.slow
def test_target_ships_checked_and_retrains_only_when_asked(tmp_path):
    data, out = tmp_path / "data", tmp_path / "target"
    run("-m", "stages.prepare", "prepare.n=3", "n=2", f"paths.data={data}")
    shipped = run(
        "-m", "stages.target", "target.heldout=1", f"paths.data={data}", f"paths.target={out}",
        f"paths.results={tmp_path / 'results'}",
    )  # fmt: skip
    info = json.loads((out / "target.json").read_text())
    assert not info["retrained"] and info["path"] == "models/toy-target" and "train" not in info
    assert not (out / "model.safetensors").exists(), shipped.stderr  # nothing was trained
    bad = run(
        "-m",
        "stages.target",
        "target.sha256=" + "0" * 64,
        f"paths.data={data}",
        f"paths.target={tmp_path / 'other'}",
        check=False,
    )
    assert bad.returncode != 0 and "does not match target.sha256" in bad.stderr
    run(
        "-m",
        "stages.target",
        "target.retrain=true",
        "target.train.init=null",  # a fresh tiny one, not the shipped reader
        "target.train.steps=2",
        "target.train.phases=1",
        "target.train.batch=2",
        "target.size.hidden=32",
        "target.size.layers=1",
        "target.heldout=1",
        "threads=1",
        f"paths.data={data}",
        f"paths.target={out}",
        f"paths.results={tmp_path / 'results'}",
    )
    info = json.loads((out / "target.json").read_text())
    timing = json.loads((tmp_path / "results" / "timing" / "target.json").read_text())
    assert timing["phases"][0]["seconds"] > 0 and "seconds" not in info["train"]
    assert info["retrained"] and info["train"]["steps"] == 2 and info["path"] == str(out)
    assert info["hidden_size"] == 32 and (out / "model.safetensors").is_file()


def _page(path):
    from glance.toy.tasks import render

    render(["abc"]).save(path, format="PNG")


def _source(folder, records=3):
    """A good prepare.source folder: ``records`` records per task, one page image."""
    folder.mkdir(parents=True, exist_ok=True)
    _page(folder / "a.png")
    line = json.dumps({"image": "a.png", "prompt": "what is written?"}) + "\n"
    for t in TASKS:
        (folder / f"{t}.jsonl").write_text(line * records)
    return folder


def _snapshot(root):
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.slow
@pytest.mark.parametrize("image", ["../../README.md", "../outside.png", "/etc/passwd", "link.png"])
def test_prepare_never_reads_or_writes_outside_its_folders(tmp_path, image):
    source = _source(tmp_path / "deep" / "src")
    _page(tmp_path / "outside.png")
    (tmp_path / "README.md").write_text("keep me")
    (source / "link.png").symlink_to(tmp_path / "outside.png")  # points out of the folder
    (source / "docvqa.jsonl").write_text((json.dumps({"image": image, "prompt": "q"}) + "\n") * 3)
    out = tmp_path / "deep" / "data"
    before = _snapshot(tmp_path)
    system = Path("/etc/passwd").read_bytes()
    proc = run(
        "-m",
        "stages.prepare",
        f"prepare.source={source}",
        f"paths.data={out}",
        "n=2",
        check=False,
    )
    assert proc.returncode != 0
    assert "docvqa.jsonl:1: image" in proc.stderr and image in proc.stderr
    assert "leaves its folder" in proc.stderr or "is absolute" in proc.stderr
    assert not out.exists(), "a failed prepare left a half-written data folder"
    assert _snapshot(tmp_path) == before  # nothing written, nothing changed, inside or out
    assert Path("/etc/passwd").read_bytes() == system


@pytest.mark.slow
@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (
            lambda s: (s / "b.png").write_bytes(b"png"),
            "docvqa.jsonl:2: image 'b.png': not an image",
        ),
        (lambda s: (s / "b.png").write_bytes(b""), "docvqa.jsonl:2: image 'b.png': not an image"),
        (lambda s: None, "docvqa.jsonl:2: image 'b.png' not found"),
    ],
)
def test_prepare_refuses_images_that_do_not_open(tmp_path, prepared, break_it, message):
    source = _source(tmp_path / "src")
    break_it(source)
    good = json.dumps({"image": "a.png", "prompt": "q"})
    (source / "docvqa.jsonl").write_text(
        good + "\n" + json.dumps({"image": "b.png", "prompt": "q"}) + "\n" + good + "\n"
    )
    _refused(tmp_path, prepared, source, message)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"image": "a.png", "prompt": ""}', "docvqa.jsonl:2: prompt: expected a non-empty string"),
        (
            '{"image": "a.png", "prompt": 7}',
            "docvqa.jsonl:2: prompt: expected a non-empty string; got 7",
        ),
        ('["a.png", "q"]', "docvqa.jsonl:2: expected a JSON object; got list"),
        ('{"image": "a.png"}', "docvqa.jsonl:2: missing field(s) ['prompt']"),
        ("not json", "docvqa.jsonl:2: not JSON"),
        (
            json.dumps({"image": "a.png", "prompt": "a" * 4200}),
            "docvqa.jsonl:2: prompt: 4",  # the count, then the target's positions
        ),
    ],
)
def test_prepare_refuses_bad_records_and_keeps_the_old_data(tmp_path, prepared, line, message):
    source = _source(tmp_path / "src")
    good = '{"image": "a.png", "prompt": "q"}\n'
    (source / "docvqa.jsonl").write_text(good + line + "\n" + good)
    stderr = _refused(tmp_path, prepared, source, message)
    if "4200" in line:
        assert "exceeds the target's 4096 positions" in stderr


@pytest.mark.slow
def test_prepare_needs_one_more_record_than_decode_n(tmp_path, prepared):
    source = _source(tmp_path / "src", records=2)
    _refused(
        tmp_path,
        prepared,
        source,
        "docvqa.jsonl: 2 records; the pipeline needs at least 3",
        n=2,
        tasks="[docvqa]",
    )
    proc = run(
        "-m",
        "stages.prepare",
        "prepare.n=3",
        "n=3",
        f"paths.data={tmp_path / 'toy'}",
        check=False,
    )
    assert proc.returncode != 0 and "prepare.n: expected at least n + 1 = 4" in proc.stderr


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A data folder that prepare wrote from a good source (n=2)."""
    root = tmp_path_factory.mktemp("prepared")
    good = _source(root / "good")
    run("-m", "stages.prepare", f"prepare.source={good}", f"paths.data={root / 'data'}", "n=2")
    return root / "data"


def _refused(tmp_path, prepared, source, message, n=2, tasks=None):
    """Run prepare from ``source`` over a copy of the good folder ``prepared``:
    it must fail with ``message`` and leave the old folder byte-identical."""
    out = tmp_path / "data"
    shutil.copytree(prepared, out, symlinks=True)
    before = _snapshot(out)
    args = [f"tasks={tasks}"] if tasks else []
    proc = run(
        "-m",
        "stages.prepare",
        f"prepare.source={source}",
        f"paths.data={out}",
        f"n={n}",
        *args,
        check=False,
    )
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-2000:]
    assert _snapshot(out) == before, "a failed prepare changed the old data"
    return proc.stderr


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("budget=1.5", "budget"),
        pytest.param("budget=abc", "budget", marks=pytest.mark.slow),
        pytest.param("budget=1000000", "budget", marks=pytest.mark.slow),
        pytest.param("max_new_tokens=0", "max_new_tokens", marks=pytest.mark.slow),
        ("context=-5", "context"),
        pytest.param("n=0", "n", marks=pytest.mark.slow),
        pytest.param("timing=fast", "timing", marks=pytest.mark.slow),
        ("temperature=-1", "temperature"),
    ],
)
def test_decode_refuses_bad_settings_before_loading_anything(tmp_path, override, key):
    # paths.target points nowhere: reaching the model loader would fail differently
    proc = run(
        "-m",
        "stages.decode",
        "+task=docvqa",
        override,
        f"paths.target={tmp_path / 'none'}",
        f"paths.data={tmp_path / 'none'}",
        check=False,
    )
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith(f"{key}: expected"), proc.stderr[-2000:]
    assert override.split("=", 1)[1] in message


@pytest.fixture(scope="module")
def repro(tmp_path_factory):
    """`dvc repro` of the whole pipeline in a copy of the project, on TINY params."""
    pytest.importorskip("dvc")
    work = tmp_path_factory.mktemp("pipeline")
    for item in (
        "conf",
        "stages",
        "glance",
        "notebooks",
        "dvc.yaml",
        "models/toy-target",
        "models/toy-reader",
    ):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, work / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, work / item)
    dvc = [str(Path(sys.executable).parent / "dvc")]
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    # dvclive reads the current commit: an empty repository makes it fail
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], cwd=work, check=True)
    subprocess.run([*dvc, "init", "-q"], cwd=work, check=True)
    shutil.copy2(ROOT / ".dvc" / "config", work / ".dvc" / "config")
    shutil.copy2(ROOT / ".dvcignore", work / ".dvcignore")  # caches inside glance/ are no source
    # What `dvc exp run -S ...` would write: the composition with the overrides.
    (work / "params.yaml").write_text(yaml.safe_dump(compose_params(TINY)))
    env = dict(os.environ, PYTHONPATH=str(work))
    proc = subprocess.run(
        [*dvc, "repro", "--no-run-cache"], cwd=work, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return work


@pytest.mark.slow
def test_repro_writes_every_declared_output(repro):
    stages = yaml.safe_load((repro / "dvc.yaml").read_text())["stages"]
    lock = yaml.safe_load((repro / "dvc.lock").read_text())["stages"]
    assert {"prepare", "target", "head", "audit", "fit_law", "figures"} <= set(lock)
    assert {f"decode@{t}" for t in RUN_TASKS} <= set(lock)
    assert {f"sweep@{t}" for t in RUN_TASKS} | {"context@0", "context@16", "bench"} <= set(lock)
    pngs = ("law", "tree_vs_chain", "context", "budget", "verify_cost", "length", "host_share")
    for png in (*pngs, "context_cost"):
        data = (repro / "figures" / f"{png}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    # every written file has the mode a plain open() gives under the umask
    mask = os.umask(0)
    os.umask(mask)
    for folder in ("figures", "results", "data"):
        for path in (repro / folder).rglob("*"):
            want = (0o777 if path.is_dir() else 0o666) & ~mask
            assert path.stat().st_mode & 0o777 == want, (path, oct(path.stat().st_mode))
    # every stage that dvc.yaml declares ran: each foreach item and matrix cell is in the lock
    for name in stages:
        assert any(k == name or k.startswith(f"{name}@") for k in lock), name
    assert {"seed_data@2"} <= set(lock) and any(k.startswith("seed_decode@") for k in lock)
    seeds = json.loads((repro / "results" / "seeds_table.json").read_text())
    assert set(seeds["draws"]) == {"main", "seed 2"}
    for rows in seeds["draws"].values():
        assert set(rows) == set(RUN_TASKS)


@pytest.mark.slow
def test_repro_decode_summaries(repro):
    for task in RUN_TASKS:
        s = json.loads((repro / "results" / "decode" / task / "summary.json").read_text())
        assert s["n"] == 2 and s["max_new_tokens"] == 10 and s["budget"] == 63
        assert set(s["systems"]) == {
            "ar",
            "glance",
            "chain",
            "glance_extend",
            "ar@0.7",
            "glance@0.7",
            "ar@1",
            "glance@1",
            "chain@0.7",
            "chain@1",
            "glance_auto",
            "glance_scored",
        }
        assert set(s["speed_over_chain"]) == {"glance", "glance_auto"}
        assert s["systems"]["glance_scored"]["matches_baseline"] == 2
        reg = s["regime"]
        assert len(reg["chain_offset_acceptance"]) == s["cap"]
        assert reg["new_tokens_per_answer"] <= 10 and 1 <= reg["tau_ceiling"] <= s["cap"] + 1
        assert set(s["tree_over_chain_by_temperature"]) == {"0", "0.7", "1"}
        r = s["tree_over_chain_interval"]
        assert r["low"] <= r["estimate"] <= r["high"]
        assert s["extend_row"] == 63 and set(s["tau_by_temperature"]) == {"0", "0.7", "1"}
        for system in ("glance", "chain", "glance_extend", "glance_auto", "glance@0.7", "chain@1"):
            x = s["systems"][system]
            # greedy rows equal greedy; sampled rows equal their seeded baseline
            assert x["matches_baseline"] == 2, f"{system} differed from its baseline"
            assert x["speedup"]["low"] <= x["speedup"]["estimate"] <= x["speedup"]["high"]
            assert 1.0 <= x["tau"] <= s["cap"] + 1
        rounds = [
            json.loads(line)
            for line in (repro / "results" / "decode" / task / "rounds.jsonl").open()
        ]
        glance_rounds = [r for r in rounds if r["system"] == "glance"]
        assert len(glance_rounds) == s["systems"]["glance"]["rounds"]
        assert {r["prompt"] for r in rounds} == {1, 2}, "warm-up rounds were reported"
        assert all(r["tree_size"] <= 63 for r in glance_rounds)
        # the effective cap: never past the block, nor past the output's end
        assert all(1 <= r["cap"] <= min(s["cap"], 10) for r in glance_rounds)
        assert all(r["tree_size"] <= 63 + 63 for r in rounds if r["system"] == "glance_extend")


@pytest.mark.slow
def test_repro_sweep_and_context_runs(repro):
    for task in RUN_TASKS:
        folder = repro / "results" / "sweep" / task
        s = json.loads((folder / "summary.json").read_text())
        assert s["task"] == task and set(s["budgets"]) == {"1", "7"} and s["n"] == 2
        for x in [*s["budgets"].values(), s["auto"]]:
            assert x["matches_baseline"] == 2  # the gate would have failed the stage otherwise
            assert x["speedup"]["low"] <= x["speedup"]["estimate"] <= x["speedup"]["high"]
        assert 1 <= s["auto"]["mean_tree_size"] <= 255
        lines = (folder / "curve.csv").read_text().splitlines()
        assert lines[0] == "budget,speedup,low,high,tau" and [
            x.split(",")[0] for x in lines[1:]
        ] == ["1", "7"]
    short = json.loads((repro / "results" / "context" / "ctx-0" / "summary.json").read_text())
    long = json.loads((repro / "results" / "context" / "ctx-16" / "summary.json").read_text())
    assert short["context"] == 0 and long["context"] == 16 and "tree_over_chain" in long


@pytest.mark.slow
def test_wall_times_stay_out_of_the_outputs_that_must_reproduce(repro):
    head = json.loads((repro / "models" / "head" / "head.json").read_text())
    assert not [k for k in head["train"] if k.endswith("seconds")] and head["train"]["steps"] == 3
    timing = json.loads((repro / "results" / "timing" / "head.json").read_text())
    assert timing["train_seconds"] > 0 and timing["feature_seconds"] > 0
    corpus = json.loads((repro / "results" / "timing" / "corpus.json").read_text())
    assert corpus["answer_seconds"] > 0
    for task in RUN_TASKS:
        folder = repro / "results" / "decode" / task
        rounds = [json.loads(line) for line in (folder / "rounds.jsonl").open()]
        times = [json.loads(line) for line in (folder / "round_ms.jsonl").open()]
        assert rounds and not [k for r in rounds for k in r if k.endswith("_ms")]
        assert [(r["prompt"], r["system"]) for r in rounds] == [
            (t["prompt"], t["system"]) for t in times
        ]
        assert all(t["verify_ms"] > 0 and t["draft_ms"] > 0 for t in times)


@pytest.mark.slow
def test_repro_audit_law_and_table(repro):
    audit = json.loads((repro / "results" / "audit.json").read_text())
    assert (
        audit["prompts"] == len(RUN_TASKS)
        and audit["mismatch"] == 0
        and audit["extend_budget"] == 63
    )
    assert all(r["glance_extend_equal"] for rows in audit["tasks"].values() for r in rows)
    # every lossless row, with greedy's control beside each prompt
    assert {"glance", "glance_auto", "chain", "glance_extend", "glance@N=1", "glance@N=7",
            "glance@0.7", "chain@0.7", "glance@1", "chain@1",
            "glance_scored", "glance_scored@N=8"} == set(audit["rows"])  # fmt: skip
    assert audit["scored_budgets"] == [63, 8]  # the decode stage's budget, then arms.budget
    assert all(r["equal"] == len(RUN_TASKS) and r["MISMATCH"] == 0 for r in audit["rows"].values())
    # decode and sweep ran the same recipe on these prompts: their rows are
    # reused, not decoded again; only the greedy control and the scorer at
    # arms.budget run afresh
    for task in RUN_TASKS:
        baselines = {"ar", "ar@0.7", "ar@1"}
        assert set(audit["reused"][task]) == set(audit["rows"]) - {"glance_scored@N=8"} | baselines
    assert all(
        p["prompt"] >= 1 and "ar" in p["control_equal"]
        for ps in audit["tasks"].values()
        for p in ps
    )
    sampled = json.loads((repro / "results" / "sampling_table.json").read_text())
    assert sampled["temperatures"] == ["0", "0.7", "1"] and set(sampled["tasks"]) == set(RUN_TASKS)
    assert all("extend" in row for row in sampled["tasks"].values())
    law = json.loads((repro / "results" / "law.json").read_text())
    assert set(law["tasks"]) == set(RUN_TASKS) and "pooled" in law
    # the law again on the consistency scorer's rounds, compared with GLANCE's
    assert set(law["scored"]["tasks"]) == set(RUN_TASKS) and "pooled" in law["scored"]
    assert "grounding_order" in law["scored_vs_glance"]
    scorer = json.loads((repro / "results" / "scorer.json").read_text())
    assert scorer["settings"]["steps"] == 3 and scorer["train"]["heldout_curve"]
    table = json.loads((repro / "results" / "main_table.json").read_text())
    assert set(table["tasks"]) == set(RUN_TASKS)
    over = table["tasks"]["docvqa"]["tree_over_chain"]
    assert over["low"] <= over["estimate"] <= over["high"]
    md = (repro / "results" / "main_table.md").read_text()
    # a caption naming the window and baseline, a blank line, the header, the rule, one row a task
    assert md.startswith("Measured by the decode stage") and "One window, decode" in md
    assert md.count("\n") == len(RUN_TASKS) + 4 and "geometric mean" not in md
    # every comparison in the table carries its interval: a ratio cell is "r.rrx [l.ll, h.hh]"
    assert all(
        re.fullmatch(r"\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\]", c.strip())
        for line in md.splitlines()[2:]
        for c in line.split("|")
        if "x" in c and "[" in c or c.strip().endswith("x")
    )


@pytest.mark.slow
def test_repro_is_reproducible_and_up_to_date(repro):
    dvc = str(Path(sys.executable).parent / "dvc")
    env = dict(os.environ, PYTHONPATH=str(repro))
    # Rerun the data stage: the same config must give the same bytes, so
    # nothing downstream goes stale.
    again = subprocess.run(
        [dvc, "repro", "-f", "-s", "prepare"], cwd=repro, env=env, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr[-3000:]
    # the main pipeline only: the arms pipeline runs by name (its own test)
    status = subprocess.run(
        [dvc, "status", "dvc.yaml"], cwd=repro, env=env, capture_output=True, text=True
    )
    assert status.returncode == 0 and "up to date" in status.stdout, status.stdout
    shown = subprocess.run(
        [dvc, "metrics", "show", "--json"], cwd=repro, env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    metrics = json.loads(shown.stdout)
    # DVC reads every task's tau back from the summaries it tracks as metrics
    found = {
        path: data["data"]["systems"]["glance"]["tau"]
        for run in metrics.values()
        for path, data in run["data"].items()
        if path.startswith("results/decode/")
    }
    assert len(found) == len(RUN_TASKS) and all(tau > 1 for tau in found.values()), found


@pytest.mark.slow
def test_results_notebook_runs_on_the_outputs(repro):
    # the report stage ran in `dvc repro`: every code cell has its outputs, and the
    # recorded input digests are those of this run's results and figures
    from glance.reporting import notebook as report

    nb = json.loads((repro / "notebooks" / "results.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] for c in code)
    assert not any(o.get("output_type") == "error" for c in code for o in c["outputs"])
    assert nb["metadata"]["glance"]["inputs"] == report.inputs(repro)


@pytest.mark.slow
def test_exp_run_set_param_reaches_the_stages(repro):
    # `dvc exp run -S` recomposes conf/ with the overrides into params.yaml (Hydra
    # composition is on in .dvc/config); the stages must then decode with them.
    dvc = str(Path(sys.executable).parent / "dvc")
    env = dict(
        os.environ,
        PYTHONPATH=str(repro),
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    subprocess.run(["git", "add", "-A"], cwd=repro, env=env, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-qm", "tiny"], cwd=repro, env=env, check=True)
    sets = [arg for o in [*TINY, "budget=7"] for arg in ("-S", o)]
    # One stage as the target: every stage reads params.yaml alike, and the
    # downstream reruns would only repeat the pipeline test.
    proc = subprocess.run(
        [dvc, "exp", "run", *sets, "decode@docvqa"],
        cwd=repro,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    params = yaml.safe_load((repro / "params.yaml").read_text())
    assert params["budget"] == 7 and "budget" not in params["decode"]
    assert "Running stage 'decode@docvqa'" in proc.stdout, proc.stdout[-3000:]
    for stage in ("target", "head", "decode@chartqa"):
        assert f"Running stage '{stage}'" not in proc.stdout, f"{stage} ran"
    out = repro / "results" / "decode" / "docvqa"
    assert json.loads((out / "summary.json").read_text())["budget"] == 7
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").open()]
    assert all(r["tree_size"] <= 7 for r in rounds if r["system"] == "glance")


@pytest.mark.slow
def test_a_sweep_covers_temperature_and_extend_budget(repro):
    """`-m temperature=... extend_budget=...` runs every pair; a sampled GLANCE
    run draws the same text as its seeded baseline, and the extension widens
    the tree within its budget."""
    sweep = ["temperature=0,0.7", "extend_budget=0,5", "n=2", "chain=false"]
    quiet = ["decode.sampled=[]", "decode.extend_row=0", "decode.auto_row=false",
             "decode.scored_row=false"]  # fmt: skip
    run("-m", "stages.decode", "--config-name", "from_params", "-m",
        "+task=docvqa", *sweep, *quiet, cwd=repro)  # fmt: skip
    found = {}
    for path in (repro / "results" / "sweeps" / "docvqa").glob("*/summary.json"):
        s = json.loads(path.read_text())
        found[(s["temperature"], s["extend_budget"])] = s
        assert set(s["systems"]) == {"ar", "glance"}
        assert s["systems"]["glance"]["matches_baseline"] == 2
        rounds = [json.loads(line) for line in (path.parent / "rounds.jsonl").open()]
        assert all(r["tree_size"] <= 63 + s["extend_budget"] for r in rounds)
    assert set(found) == {(0.0, 0), (0.0, 5), (0.7, 0), (0.7, 5)}


@pytest.mark.slow
def test_dvc_plots_show_renders_every_curve_and_figure(repro):
    dvc = str(Path(sys.executable).parent / "dvc")
    proc = subprocess.run(
        [dvc, "plots", "show", "--json"], cwd=repro, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = set(json.loads(proc.stdout)["data"])
    curves = {f"results/sweep/{t}/curve.csv" for t in RUN_TASKS}
    curves |= {"results/law_deciles.csv", "results/verify_cost.csv", "results/length_curve.csv"}
    pngs = {f"figures/{n}.png" for n in ("law", "tree_vs_chain", "context", "budget")}
    assert curves | pngs <= shown, sorted(curves | pngs - shown)


@pytest.mark.slow
def test_a_joblib_sweep_runs_two_jobs_each_with_one_thread(repro):
    """The docs' local-processes recipe (docs/pipeline.md): `hydra/launcher=joblib` runs the
    two budgets as two processes, each pinned to one thread."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    out = repro / "results" / "joblib"
    run("-m", "stages.decode", "--config-name", "from_params", "-m", "+task=docvqa",
        "budget=1,7", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "threads=1",
        "n=2", "chain=false", "decode.sampled=[]", "decode.extend_row=0",
        "decode.auto_row=false", f"paths.results={out}", cwd=repro)  # fmt: skip
    found = {}
    for path in (out / "sweeps" / "docvqa").rglob("summary.json"):  # paths.results nests
        s = json.loads(path.read_text())
        found[s["budget"]] = s
        assert s["systems"]["glance"]["matches_baseline"] == 2
    assert set(found) == {1, 7}


def test_the_readme_slurm_recipe_composes_with_submitit():
    """The docs' SLURM launcher settings (docs/pipeline.md) compose into a Hydra config
    (nothing is submitted)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir

    overrides = ["+task=docvqa", "hydra/launcher=submitit_slurm",
                 "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=1",
                 "hydra.launcher.cpus_per_task=8", "hydra.launcher.timeout_min=120",
                 "target=qwen3_vl_8b", "device=cuda"]  # fmt: skip
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert launcher.gpus_per_node == 1 and launcher.timeout_min == 120
    assert cfg.target.name == "qwen3_vl_8b" and cfg.device == "cuda"


@pytest.mark.slow
def test_repro_bench_rows_agree_and_cost_curves(repro):
    from glance.core.budget import AUTO_SIZES

    # the bench's rows, in order (glance.experiments.bench.bench_rows)
    ROWS = (
        "hf_greedy",
        "hf_prompt_lookup",
        "dflash_chain",
        "glance_greedy",
        "glance_chain",
        "glance_tree",
        "glance_auto",
        "glance_extend",
        "glance_best",
    )
    bench = json.loads((repro / "results" / "bench.json").read_text())
    assert set(bench["tasks"]) == {"docvqa", "chartqa"}
    assert bench["compared_with"] == "glance_auto"
    for task, rows in bench["tasks"].items():
        assert tuple(rows) == ROWS
        # glance_best is the sweep's fastest fixed budget on this task
        sweep = json.loads((repro / "results" / "sweep" / task / "summary.json").read_text())
        speed = {int(b): x["speedup"]["estimate"] for b, x in sweep["budgets"].items()}
        assert bench["best_budget"][task] == max(speed, key=speed.get)
        for name, row in rows.items():
            # Lossless rows and the baseline decode the same tokens.
            assert row["same_output_as_hf_greedy"] == 2, name
            for window in ("end_to_end", "decode_only"):
                for key in ("speedup", "auto_over"):
                    sp = row[window][key]
                    assert sp["low"] <= sp["estimate"] <= sp["high"]
            assert row["peak_mib"] is None  # no allocator peak off CUDA
            assert (row["tau"] is None) == (
                name in ("hf_greedy", "hf_prompt_lookup", "glance_greedy")
            )
            # our own drafting rows: a share of the round-cost limit
            assert ("efficiency" in row) == (row["tau"] is not None and name != "dflash_chain")
            if "efficiency" in row:
                e = row["efficiency"]
                # no bound at 1: the window is end_to_end minus a separately
                # timed first token, so on a busy machine the share can pass 1
                assert e["value"] > 0 and e["limit"] > 0
                assert e["value"] == pytest.approx(e["speedup"] / e["limit"])
        assert rows["glance_auto"]["decode_only"]["auto_over"]["estimate"] == pytest.approx(1.0)
    cost = bench["context_cost"]
    assert cost["lengths"] == [0, 16] and set(cost["rows"]) == {
        "glance_greedy", "glance_chain", "glance_auto", "glance_auto_window"
    }  # fmt: skip
    for points in cost["rows"].values():
        assert [x["context"] for x in points] == [0, 16]
        assert all(x["same_as_greedy"] == cost["n"] for x in points)
        assert points[1]["prompt_tokens"] > points[0]["prompt_tokens"]
        assert all(x["ms_per_token"] > 0 and x["verify_ms"] > 0 for x in points)
    assert all(x["draft_ms"] == 0 for x in cost["rows"]["glance_greedy"])
    csv = (repro / "results" / "context_cost.csv").read_text().splitlines()
    assert csv[0].startswith("context,row,ms_per_token") and len(csv) == 1 + 4 * 2
    lc = bench["length_curve"]
    assert lc["lengths"] == [8, 24] == lc["new_tokens"] and len(lc["glance_tree"]) == 2
    budgets = [r["budget"] for r in bench["budget_curve"]["rows"]]
    assert budgets == list(AUTO_SIZES)
    for r in bench["budget_curve"]["rows"]:
        assert 0 < r["host_share"] < 1 and r["tree_size"] <= r["budget"]


def test_readme_and_docs_tables_are_generated_from_results():
    from glance.reporting.readme import blocks, render
    from stages.readme import documents

    texts = blocks(ROOT / "results")
    assert set(texts) == {
        "bench",
        "regime",
        "seeds",
        "main",
        "law",
        "heads",
        "arms",
        "claims",
        "training",
    }
    placed = set()
    for path in documents(ROOT):
        doc = path.read_text(encoding="utf-8")
        here = {k: v for k, v in texts.items() if f"<!-- {k}:start -->" in doc}
        assert render(doc, here) == doc, f"{path} tables are stale: python -m stages.readme"
        placed |= set(here)
    assert placed == set(texts)


@pytest.mark.slow
def test_budget_auto_runs_through_decode_audit_and_bench(repro):
    out = repro / "results" / "auto"
    common = ["--config-name", "from_params", "budget=auto", "threads=1"]
    run("-m", "stages.decode", *common, "+task=docvqa", f"out_dir={out / 'decode'}", cwd=repro)
    assert json.loads((out / "decode" / "summary.json").read_text())["budget"] == "auto"
    run("-m", "stages.audit", *common, "audit.n=1", "tasks=[docvqa]", cwd=repro)
    audit = json.loads((repro / "results" / "audit.json").read_text())
    assert audit["budget"] == "auto" and audit["mismatch"] == 0
    run("-m", "stages.bench", *common, "bench.tasks=[docvqa]", "bench.n=2", cwd=repro)
    bench = json.loads((repro / "results" / "bench.json").read_text())
    assert bench["budget"] == "auto"


@pytest.mark.slow
def test_the_arms_pipeline_runs_by_name_and_every_lossless_row_is_greedy(repro):
    dvc = [str(Path(sys.executable).parent / "dvc")]
    env = dict(os.environ, PYTHONPATH=str(repro))
    proc = subprocess.run(
        [*dvc, "repro", "--no-run-cache", "stages/arms/dvc.yaml"],
        cwd=repro,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assistant = json.loads((repro / "models" / "assistant" / "assistant.json").read_text())
    assert assistant["train"]["steps"] == 3 and assistant["size"]["layers"] == 2
    eagle = json.loads((repro / "models" / "eagle-head" / "eagle.json").read_text())
    assert eagle["train"]["steps"] == 3 and eagle["train"]["heldout_curve"]
    arms = json.loads((repro / "results" / "arms.json").read_text())
    assert set(arms["cases"]) == {"docvqa", "chartqa", "docvqa@context16"}
    for case in [*arms["cases"].values(), arms["pooled"]]:
        rows = case["rows"]
        n = 4 if case is arms["pooled"] else case["n"]  # pooled: 2 tasks x 2 prompts
        for row in ("glance", "glance_scored", "eagle", "dflash_chain"):
            assert rows[row]["matches_baseline"] == n, (row, rows[row])
            assert not rows[row]["lossy"]
        assert rows["two_model"]["rounds"] >= 1 and not rows["two_model"]["lossy"]
        for rule in ("top2", "top3", "p30"):
            x = rows[f"relaxed_{rule}"]
            assert x["lossy"] and x["divergence"]["prompts"] == n
            assert x["divergence"]["diverged"] == n - x["matches_baseline"]
        for row in ("glance_auto", "eagle_best"):
            assert rows[row]["matches_baseline"] == n and not rows[row]["lossy"]
        keys = ("vs_eagle_tree", "vs_dflash_chain", "vs_two_model")
        keys += ("auto_vs_eagle_best", "auto_vs_eagle_tree", "auto_vs_dflash_chain")
        keys += ("scored_vs_glance", "scored_vs_eagle_tree")
        for key in keys:
            foreign = key.endswith("dflash_chain")
            for measure in ("tau", "speed_end_to_end", *(("speed",) * (not foreign))):
                r = case[key][measure]
                assert r["low"] <= r["estimate"] <= r["high"]
        # dflash's loop is timed end to end only: no decode-only figure, no mixed ratio
        assert "speed" not in case["vs_dflash_chain"] and "speedup" not in rows["dflash_chain"]
        assert rows["dflash_chain"]["end_to_end"]["speedup"]["estimate"] > 0
        assert "speedup" not in rows["greedy"]["end_to_end"]
    assert set(arms["budget_sweep"]["glance"]["tokens_per_s"]) == {"4", "8"} or set(
        arms["budget_sweep"]["glance"]["tokens_per_s"]
    ) == {4, 8}
    assert (repro / "figures" / "arms_context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(lossy)" in (repro / "results" / "arms.md").read_text()
    assert "Each system at its best" in (repro / "results" / "arms.md").read_text()
    assert "with the consistency scorer" in (repro / "results" / "arms.md").read_text()
    # torch.compile, measured: every row eager and compiled decodes greedy's tokens
    compiled = json.loads((repro / "results" / "compile.json").read_text())
    assert set(compiled["rows"]) == {
        f"{row}{mode}" for row in ("hf_greedy", "glance_greedy", "glance_auto")
        for mode in ("", "_compiled")
    }  # fmt: skip
    for name, x in compiled["rows"].items():
        assert x["same_as_eager_greedy"] == compiled["n"], name
        if name.endswith("_compiled"):
            assert x["same_as_compiled_greedy"] == compiled["n"] and x["warmup_s"] > 0
            sp = x["speed_over_eager"]
            assert sp["low"] <= sp["estimate"] <= sp["high"]
    # the arms' auto rows plan with target.auto_cost, as the decode stage's do:
    # same prompts, same trees, same tau
    for task in ("docvqa", "chartqa"):
        decoded = json.loads((repro / "results" / "decode" / task / "summary.json").read_text())
        tau = decoded["systems"]["glance_auto"]["tau"]
        assert arms["cases"][task]["rows"]["glance_auto"]["tau"] == pytest.approx(tau, abs=1e-12)


@pytest.mark.slow
def test_the_readme_example_and_the_glance_command_decode_the_trained_head(repro):
    """The README's Python example runs as written in a finished run's folder,
    and `glance decode` there prints the same answer, equal to greedy."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert example in (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(repro))
    proc = subprocess.run([sys.executable, "-c", example], cwd=repro, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer, tau = proc.stdout.rstrip("\n").rsplit(" ", 1)
    assert float(tau) >= 1
    command = re.search(r"```bash\n(glance decode .*?)```", readme, re.S).group(1)
    argv = shlex.split(command.replace("\\\n", " "))
    script = str(Path(sys.executable).parent / "glance")
    proc = subprocess.run([script, *argv[1:], "--json"], cwd=repro, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["answer"] == answer and got["equals_baseline"] is True


@pytest.mark.slow
def test_a_clone_pulls_the_run_from_a_remote(repro, tmp_path):
    """docs/remote.md's recipe on the shrunken pipeline: push to a local-folder
    remote, clone, `dvc pull`; the clone's `dvc status` is clean with no rerun
    and its outputs equal the run's."""
    dvc = str(Path(sys.executable).parent / "dvc")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    work = tmp_path / "work"
    shutil.copytree(repro, work, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / ".gitignore", work / ".gitignore")

    def sh(*cmd, cwd=work):
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    # other tests rerun stages in the shared run: bring it up to date first, as
    # a finished run is before anyone pushes it
    sh(dvc, "repro", "dvc.yaml")
    assert "Data and pipelines are up to date." in sh(dvc, "status", "dvc.yaml")
    sh(dvc, "remote", "add", "-d", "store", str(tmp_path / "remote"))
    # the main pipeline only: the shrunken run never ran the arms (stages/arms/dvc.yaml)
    sh(dvc, "push", "dvc.yaml")
    sh(*git, "add", "-A")
    sh(*git, "commit", "-q", "-m", "run")
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", str(work), str(clone), cwd=tmp_path)
    assert not (clone / "models" / "head").exists()  # cached by DVC, not in git
    sh(dvc, "pull", "dvc.yaml", cwd=clone)
    assert "Data and pipelines are up to date." in sh(dvc, "status", "dvc.yaml", cwd=clone)
    for rel in ("models/head/model.safetensors", "results/decode/docvqa/rounds.jsonl"):
        assert (clone / rel).read_bytes() == (work / rel).read_bytes(), rel
