"""Benchmarks through ``datasets``: each mapping in ``conf/dataset/`` on a tiny
local dataset with the benchmark's real column names and feature types, run
through the ``prepare`` stage; malformed ones fail naming the column or row,
with nothing written."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")
from PIL import Image  # noqa: E402

from glance._io import MARKER, replace_dir  # noqa: E402
from glance.data.benchmarks import Mapping, load_rows, write_task  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf" / "dataset"
F = datasets.Features
V, L, IMG = datasets.Value, datasets.List, datasets.Image


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    # sizes the toy target's processor takes whole (it does not resize)
    Image.new("RGB", (32 + 16 * seed, 32), (seed * 40 % 255, 90, 160)).save(buf, format="PNG")
    return buf.getvalue()


def _rows(n: int) -> dict[str, dict]:
    """Per mapping: its columns with the hub copies' names and types (lmms-lab)."""
    imgs = [{"bytes": _png(i), "path": None} for i in range(n)]
    q = [f"what is item {i}?" for i in range(n)]
    docvqa = (
        {
            "questionId": [str(i) for i in range(n)],
            "question": q,
            "question_types": [["abstractive"]] * n,
            "image": imgs,
            "docId": list(range(n)),
            "answers": [[f"a{i}", f"b{i}"] for i in range(n)],
            "data_split": ["val"] * n,
        },
        F(
            questionId=V("string"), question=V("string"), question_types=L(V("string")),
            image=IMG(), docId=V("int64"), answers=L(V("string")), data_split=V("string"),
        ),
    )  # fmt: skip
    infovqa = (
        {
            "questionId": [str(i) for i in range(n)],
            "question": q,
            "answers": [[f"{i}"] for i in range(n)],
            "answer_type": [["single span"]] * n,
            "image": imgs,
            "ocr": ["{}"] * n,
        },
        F(
            questionId=V("string"), question=V("string"), answers=L(V("string")),
            answer_type=L(V("string")), image=IMG(), ocr=V("string"),
        ),
    )  # fmt: skip
    chartqa = (
        {"type": ["human_test"] * n, "question": q, "answer": [f"{i}" for i in range(n)],
         "image": imgs},
        F(type=V("string"), question=V("string"), answer=V("string"), image=IMG()),
    )  # fmt: skip
    textvqa = (
        {
            "image_id": [f"im{i}" for i in range(n)],
            "question_id": list(range(n)),
            "question": q,
            "image": imgs,
            "answers": [[f"w{i}"] * 10 for i in range(n)],
            "ocr_tokens": [["x"]] * n,
        },
        F(
            image_id=V("string"), question_id=V("int32"), question=V("string"), image=IMG(),
            answers=L(V("string")), ocr_tokens=L(V("string")),
        ),
    )  # fmt: skip
    coco = (
        {
            "question_id": [f"{i:012d}.jpg" for i in range(n)],
            "image": imgs,
            "question": ["Please carefully observe the image."] * n,
            "answer": [[f"a cat {i}", f"a dog {i}"] for i in range(n)],
            "id": list(range(n)),
            "file_name": [f"{i:012d}.jpg" for i in range(n)],
        },
        F(
            question_id=V("string"), image=IMG(), question=V("string"), answer=L(V("string")),
            id=V("int64"), file_name=V("string"),
        ),
    )  # fmt: skip
    return {"docvqa": docvqa, "infovqa": infovqa, "chartqa": chartqa, "textvqa": textvqa,
            "coco": coco}  # fmt: skip


def _dataset(name: str, n: int = 3):
    data, features = _rows(n)[name]
    return datasets.Dataset.from_dict(data, features=features)


def _save(ds, tmp: Path, layout: str) -> Path:
    """The dataset in one of the local layouts a user holds."""
    if layout == "parquet":
        path = tmp / "validation-00000-of-00001.parquet"
        ds.to_parquet(str(path))
        return path
    if layout == "parquet_dir":
        (tmp / "pq").mkdir()
        ds.to_parquet(str(tmp / "pq" / "part-0.parquet"))
        return tmp / "pq"
    path = tmp / "disk"
    datasets.DatasetDict({"validation": ds, "test": ds, "val": ds}).save_to_disk(str(path))
    return path


def _prepare(*overrides, check=True):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HYDRA_FULL_ERROR="0", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "stages.prepare", *overrides],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


LAYOUTS = {"docvqa": "parquet", "infovqa": "disk", "chartqa": "parquet_dir", "textvqa": "disk",
           "coco": "parquet"}  # fmt: skip


def test_every_shipped_mapping_reads_and_names_its_task():
    names = sorted(p.stem for p in CONF.glob("*.yaml"))
    assert names == sorted(LAYOUTS)
    tasks = {Mapping.from_file(CONF / f"{n}.yaml").task for n in names}
    assert tasks == {"docvqa", "infovqa", "chartqa", "textvqa", "caption"}
    assert all((ROOT / "conf" / "task" / f"{t}.yaml").is_file() for t in tasks)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_benchmark_runs_through_prepare(tmp_path, name):
    mapping = Mapping.from_file(CONF / f"{name}.yaml")
    source = _save(_dataset(name), tmp_path, LAYOUTS[name])
    out = tmp_path / "data"
    _prepare(
        "--config-name", "from_params", f"prepare.dataset={name}", f"prepare.source={source}",
        f"tasks=[{mapping.task}]", "n=2", f"paths.data={out}",
    )  # fmt: skip
    lines = (out / f"{mapping.task}.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == 3  # n + 1
    for i, r in enumerate(records):
        with Image.open(out / r["image"]) as img:
            assert img.format == "PNG" and img.size == (32 + 16 * i, 32)
        assert r["row"] == i and r["answers"] and all(isinstance(a, str) for a in r["answers"])
        if name == "coco":
            assert r["prompt"] == "Provide a one-sentence caption for the provided image."
        else:
            assert r["prompt"].startswith(f"{'W' if name == 'textvqa' else 'w'}hat is item {i}?\n")
    data = json.loads((out / "data.json").read_text())
    assert data["tasks"] == {mapping.task: 3} and data["dataset"]["mapping"] == name


def test_load_rows_reads_parquet_and_limits(tmp_path):
    mapping = Mapping.from_file(CONF / "chartqa.yaml")
    source = _save(_dataset("chartqa", 5), tmp_path, "parquet")
    ds = load_rows(str(source), mapping, split="test", limit=2)
    assert len(ds) == 2
    n = write_task(ds, mapping, tmp_path / "out", str(source))
    records = [json.loads(x) for x in (tmp_path / "out" / "chartqa.jsonl").read_text().splitlines()]
    assert n == 2 and records[1]["answers"] == ["1"]  # ChartQA's one answer, as a list
    assert records[1]["prompt"] == "what is item 1?\nAnswer the question with a single word."


def test_a_missing_column_is_named_with_those_present(tmp_path):
    ds = _dataset("docvqa").remove_columns("answers")
    source = _save(ds, tmp_path, "parquet")
    with pytest.raises(ValueError, match=r"answers \('answers'\).*not found.*'question'"):
        load_rows(str(source), Mapping.from_file(CONF / "docvqa.yaml"))


def test_an_unreadable_image_names_its_row_and_nothing_is_written(tmp_path):
    data, features = _rows(3)["docvqa"]
    data["image"][1] = {"bytes": b"not a png", "path": None}
    source = _save(datasets.Dataset.from_dict(data, features=features), tmp_path, "parquet")
    out = tmp_path / "data"
    replace_dir(out, lambda t: (t / "keep.txt").write_text("old"), kind="tasks")  # a prepare's
    proc = _prepare(
        "--config-name", "from_params", "prepare.dataset=docvqa", f"prepare.source={source}",
        "tasks=[docvqa]", "n=2", f"paths.data={out}", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "row 1, column 'image': image cannot be read" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "keep.txt"]  # the old folder


def test_a_bad_mapping_or_task_list_is_refused_before_reading(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: docvqa\nhub: x\nconfig: null\nsplit: validation\nprompt: '{question}'\n")
    with pytest.raises(ValueError, match=r"bad.yaml: missing key\(s\) \['columns'\]"):
        Mapping.from_file(bad)
    with pytest.raises(FileNotFoundError, match="no such dataset mapping; known"):
        Mapping.from_file(CONF / "nope.yaml")
    proc = _prepare("--config-name", "from_params", "prepare.dataset=docvqa",
                    "prepare.source=hf", f"paths.data={tmp_path / 'd'}", check=False)  # fmt: skip
    assert proc.returncode != 0 and "tasks: dataset docvqa fills one task" in proc.stderr


def test_the_toy_prepare_writes_every_task_a_stage_reads_by_name():
    # a run on a subset of the tasks still finds the context sweep's, the
    # bench's and the arms' tasks, and the longform length task
    from omegaconf import OmegaConf

    from glance.data.prepare import toy_tasks

    cfg = OmegaConf.create(
        {
            "tasks": ["chartqa", "docvqa"],
            "bench": {"length_task": "longform", "cost_task": "docvqa", "tasks": ["caption"]},
            "context_sweep": {"task": "textvqa"},
            "arms": {"tasks": ["chartqa", "nosuchtask"]},
        }
    )
    assert toy_tasks(cfg) == ["chartqa", "docvqa", "longform", "caption", "textvqa"]
