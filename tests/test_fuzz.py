"""Property-based tests of the task-file reader, of prepare's copy, and of the
readers of the stages' outputs (rounds, summaries, decoded ids).

Random JSONL lines and records are either accepted, and then round-trip, or
refused with a ``ValueError`` or ``FileNotFoundError`` that names the file and
line. Nothing else is raised, and nothing is written outside the output folder.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from glance._io import replace_dir
from glance.data.tasks import copy_folder, read_task
from glance.toy.tasks import render

EXAMPLES = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,  # the same 500 examples on every run
    suppress_health_check=[HealthCheck.too_slow],
)

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
paths = st.sampled_from(
    [
        "a.png",
        "sub/b.png",
        "sub/../a.png",
        "./a.png",
        "../outside.png",
        "sub/../../outside.png",
        "/etc/passwd",
        "link.png",
        "away/outside.png",
        "junk.png",
        "empty.png",
        "missing.png",
        "sub",
        "",
        " ",
    ]
) | st.text(max_size=10)
records = st.fixed_dictionaries(
    {},
    optional={
        "image": paths | values,
        "prompt": st.text(max_size=12) | values,
        "answer": values,
    },
)
# Mostly valid records, so that a good share of task files is accepted whole.
good = st.fixed_dictionaries(
    {
        "image": st.sampled_from(["a.png", "sub/b.png", "./a.png", "sub/../a.png"]),
        "prompt": st.text(min_size=1, max_size=12).filter(str.strip),
    },
    optional={"answer": values},
)
mixed = st.one_of(good, good, good, good, good, good, records)
lines = st.one_of(
    records.map(json.dumps),
    values.map(json.dumps),
    st.text(max_size=20),
    st.sampled_from(["", "  ", "{", "[]", "null", '{"image": "a.png"}']),
)


def _named_line(message: str, path: Path, count: int) -> bool:
    """The error starts with the file, and names a line that exists when it names one."""
    if not message.startswith(f"{path}"):
        return False
    m = re.match(rf"{re.escape(str(path))}:(\d+):", message)
    return m is None or 1 <= int(m.group(1)) <= max(count, 1)


@EXAMPLES
@given(body=st.lists(lines, max_size=6), raw=st.binary(max_size=8), use_raw=st.booleans())
def test_reader_accepts_and_round_trips_or_names_the_line(body, raw, use_raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "task.jsonl"
        data = raw if use_raw else ("\n".join(body) + "\n").encode("utf-8", "surrogatepass")
        path.write_bytes(data)
        count = data.count(b"\n") + data.count(b"\r") + 1
        try:
            got = read_task(path)
        except ValueError as err:
            assert _named_line(str(err), path, count), str(err)
            event("refused")
            return
        event("accepted")
        for r in got:
            assert isinstance(r, dict)
            for key in ("image", "prompt"):
                assert isinstance(r[key], str) and r[key].strip()
        again = Path(tmp) / "again.jsonl"
        again.write_text("".join(json.dumps(r) + "\n" for r in got), encoding="utf-8")
        assert read_task(again) == got
        if not use_raw and all(line.startswith("{") for line in body):
            parsed = [json.loads(line) for line in body]
            assert got == [r for r in parsed if isinstance(r, dict)]


def _world(root: Path) -> Path:
    """A source folder with good, bad and escaping images, and a sentinel outside."""
    source = root / "deep" / "src"
    (source / "sub").mkdir(parents=True)
    (root / "away").mkdir()
    render(["abc"]).save(source / "a.png", format="PNG")
    render(["xyz"]).save(source / "sub" / "b.png", format="PNG")
    render(["out"]).save(root / "outside.png", format="PNG")
    (source / "junk.png").write_bytes(b"\x89PNG not really")
    (source / "empty.png").write_bytes(b"")
    (source / "link.png").symlink_to(root / "outside.png")
    (source / "away").symlink_to(root / "away", target_is_directory=True)
    render(["far"]).save(root / "away" / "outside.png", format="PNG")
    return source


def _snapshot(root: Path, skip: Path) -> dict:
    return {
        p: p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and skip not in p.parents
    }


@EXAMPLES
@given(
    task=st.lists(mixed, min_size=1, max_size=4),
    extra=st.lists(st.one_of(st.just(""), st.just(""), lines), max_size=1),
)
def test_prepare_copies_exactly_or_refuses_naming_the_line(task, extra):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = _world(root)
        text = "".join(json.dumps(r) + "\n" for r in task) + "".join(x + "\n" for x in extra)
        (source / "docvqa.jsonl").write_bytes(text.encode("utf-8", "surrogatepass"))
        out = root / "deep" / "data"
        before = _snapshot(root, out)
        try:
            replace_dir(out, lambda fill: copy_folder(source, ["docvqa"], fill))
        except (ValueError, FileNotFoundError) as err:
            path = source / "docvqa.jsonl"
            assert _named_line(str(err), path, text.count("\n") + 1), str(err)
            assert not out.exists(), "a refused prepare left an output folder"
            event("refused")
        else:
            event("accepted")
            # the records used (need=1: the first), copied byte for byte up to that line
            copied = (out / "docvqa.jsonl").read_bytes()
            assert (source / "docvqa.jsonl").read_bytes().startswith(copied)
            assert len(read_task(out / "docvqa.jsonl")) == 1
            for r in read_task(out / "docvqa.jsonl"):
                # read from inside the source folder only, written inside the output only
                assert source.resolve() in (source / r["image"]).resolve().parents
                copied = (out / r["image"]).resolve()
                assert out.resolve() in copied.parents
                assert copied.read_bytes() == (source / r["image"]).resolve().read_bytes()
        assert _snapshot(root, out) == before  # nothing outside the output changed


# --- the stage outputs' readers -------------------------------------------------

READERS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
numbers = (
    st.integers(-3, 40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.none()
    | st.text(max_size=3)
)
rounds = st.fixed_dictionaries(
    {},
    optional={
        "prompt": numbers,
        "system": st.sampled_from(["glance", "chain", 3]),
        "entropy": numbers,
        "accepted": numbers,
        "cap": numbers,
    },
)


def _line_named(message: str, path: Path, lines: int) -> bool:
    m = re.match(rf"{re.escape(str(path))}:(\d+): ", message)
    return bool(m) and 1 <= int(m.group(1)) <= lines or message.startswith(f"{path}: no round")


@READERS
@given(st.lists(rounds | values, min_size=0, max_size=5))
def test_read_rounds_returns_valid_rounds_or_names_the_line(records):
    from glance.experiments.results import read_rounds

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rounds.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        try:
            h, a, cap, prompt = read_rounds(path, prompts=True)
        except ValueError as err:
            assert _line_named(str(err), path, len(records)), str(err)
            event("refused")
            return
        event("accepted")
        assert len(h) > 0 and np.isfinite(h).all() and (h >= 0).all()
        assert (a >= 0).all() and (cap >= 1).all() and (a <= cap).all() and (prompt >= 0).all()


@READERS
@given(values, st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", ""]))
def test_read_json_returns_finite_nonnegative_data_or_names_the_file(value, extra):
    from glance.pipeline.files import read_json

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "summary.json"
        text = json.dumps({"x": value, "y": extra and f"@{extra}@"}).replace(
            f'"@{extra}@"', extra or '""'
        )
        path.write_text(text)
        try:
            data = read_json(path, "", nonnegative=True)
        except ValueError as err:
            assert str(err).startswith(f"{path}: "), str(err)
            event("refused")
            return
        event("accepted")
        assert json.loads(json.dumps(data, allow_nan=False)) == data  # finite, plain JSON


@READERS
@given(st.lists(values, max_size=4))
def test_read_outputs_returns_token_lists_or_names_the_line(lines):
    from glance.experiments.outputs import read_outputs

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outputs.jsonl"
        recipe = {"budget": 63}
        path.write_text("".join(json.dumps(x) + "\n" for x in [{"recipe": recipe}, *lines]))
        try:
            found = read_outputs(path, recipe)
        except SystemExit as err:
            assert str(err).startswith(f"{path}, line "), str(err)
            return
        for ids in found.values():
            assert all(isinstance(t, int) and t >= 0 for t in ids)
