"""The numbers of the README and the docs pages: every table is a block
`python -m stages.readme` writes from results/ (or says where else its numbers
come from, and is checked there), and the prose numbers that cite a file match it."""

import importlib.util
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from glance.reporting.readme import blocks, law_table, render, speed_table
from glance.toy.tasks import TASKS, WRITABLE, make_example
from glance.toy.writer import default_world, row_entropy
from stages.readme import documents

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WORLD = ROOT / "docs" / "world.md"
RESULTS = ROOT / "results"
DOCUMENTS = documents(ROOT)

#: A number as the README writes one (signed, decimal, exponent, a trailing
#: ``x``), but not a digit inside a name (Qwen3-VL, EAGLE-3, 8x8, 0.79M).
NUMBER = re.compile(r"(?<![\w.\-])-?\d+(?:\.\d+)?(?:[eE]-?\d+)?x?(?!\w|\.\d)")
MARKER = re.compile(r"<!-- (\w+):(start|end) -->")

#: Tables outside the generated blocks that may hold numbers, by header line,
#: and why their numbers do not come from results/.
TOY_TASKS = (
    "| task | prompt | one item | free run: words x letters, beta | free share | nats / char "
    "| characters |"
)
_spec = importlib.util.spec_from_file_location("tries_table", ROOT / "notes/issue43/tries_table.py")
TRIES = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TRIES)
ALLOWED = {
    TOY_TASKS: "the toy world's definition (glance/toy/tasks.py) and its drawn task files; "
    "test_toy_task_table_matches_the_world recomputes every number",
    "| subpackage | what it holds | needs |": "describes code ('width 1' is the chain)",
    TRIES.HEADER: "the fourth world's calibration tries (notes/issue43/tries); "
    "test_calibration_tries_table_is_the_record recomputes it",
}


def numbers(line: str) -> list[str]:
    """The numbers in ``line`` as written, leaving out `code spans` (names, commands)."""
    return NUMBER.findall(re.sub(r"`[^`]*`", "", line))


def table_lines(text: str) -> list[tuple[int, str, str | None]]:
    """``(line number, line, generated block or None)`` for each Markdown table
    line (one starting with ``|``, indented or not) outside code fences."""
    out, block, fence = [], None, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        marker = MARKER.fullmatch(line.strip())
        if marker:
            block = marker[1] if marker[2] == "start" else None
        elif not fence and line.lstrip().startswith("|"):
            out.append((i, line, block))
    return out


def md_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``path``, each a dict keyed by its header."""
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append(line)
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    return [dict(zip(cells(table[0]), cells(line), strict=True)) for line in table[2:]]


def test_numbers_are_found_as_written():
    line = (
        "| caption | 0.79M `budget=63` Qwen3-VL 8x8 | -0.001 | 1.45x [1.34, 1.62] | 1e-6 | 130. |"
    )
    assert numbers(line) == ["-0.001", "1.45x", "1.34", "1.62", "1e-6", "130"]


def test_law_table_renders_what_each_fit_has():
    fit = {"n": 10, "b0": 1.0, "b1": 0.5, "b1_interval": {"low": 0.4, "high": 0.6}, "r2_round": 0.1}
    fit |= {"holds": False, "conditions": {"slope_positive": True, "fit_clears": False}}
    law = {
        "tasks": {"x": fit, "y": {"n": 3, "error": "too few rounds"}},
        "pooled": {"n": 13, "n_censored": 2, "b0": 1.0, "b1": 0.5, "holds": True},
    }
    lines = law_table(law).splitlines()
    assert lines[2] == "| x | 10 | 1.00 | 0.50 [0.40, 0.60] | 0.100 |  | no (fit_clears) |"
    assert lines[3] == "| y | 3 | | | | | not fitted: too few rounds |"
    assert lines[4] == "| pooled | 13 (2) | 1.00 | 0.50 |  |  | yes |"


def test_speed_table_is_the_bench_table_under_what_bench_json_has():
    text = speed_table({"target": "toy", "n": 3}, "| task |\n|---|\n")
    assert text.startswith("Measured by `python -m stages.bench` on `toy`, 3 prompts per task")
    assert text.endswith("\n\n| task |\n|---|\n")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_number_in_a_generated_table_equals_its_source():
    texts = blocks(RESULTS)
    problems, placed = [], set()
    for path in DOCUMENTS:
        doc = path.read_text(encoding="utf-8")
        found = defaultdict(list)
        for i, line, block in table_lines(doc):
            if block is not None:
                found[block].append((i, line))
        problems += [
            f"{_name(path)} has a block {name!r} that stages.readme does not write"
            for name in set(found) - set(texts)
        ]
        here = {k: v for k, v in texts.items() if f"<!-- {k}:start -->" in doc}
        placed |= set(here)
        for name, text in here.items():
            fresh = [line for line in text.splitlines() if line.lstrip().startswith("|")]
            have = found.get(name, [])
            if len(have) != len(fresh):
                problems.append(
                    f"block {name}: {_name(path)} has {len(have)} table lines, "
                    f"results/ give {len(fresh)}"
                )
            for (i, line), want in zip(have, fresh, strict=False):
                got, expected = numbers(line), numbers(want)
                wrong = [(g, w) for g, w in zip(got, expected, strict=False) if g != w]
                if wrong:
                    problems.append(
                        f"{_name(path)}:{i} ({name}): {wrong[0][0]} where results/ give "
                        f"{wrong[0][1]}: {line.strip()}"
                    )
                elif len(got) != len(expected) or line != want:
                    problems.append(
                        f"{_name(path)}:{i} ({name}): the line differs from results/: "
                        f"{line.strip()} != {want.strip()}"
                    )
        assert render(doc, here) == doc, f"{_name(path)}: blocks are stale: python -m stages.readme"
    problems += [f"no document holds the block {name!r}" for name in set(texts) - placed]
    assert not problems, "generated tables are stale (python -m stages.readme):\n" + "\n".join(
        problems
    )
    with pytest.raises(ValueError, match="markers"):
        render("no markers here", texts)


def test_the_readme_holds_the_headline_table_and_stays_short():
    readme = README.read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the front door keeps to 200"
    assert "<!-- main:start -->" in readme
    # the two commands for a new machine come first, before any other section
    sections = [line for line in lines if line.startswith("## ")]
    assert sections[0] == "## On a new machine", sections
    assert "dvc repro" in readme.split("## On a new machine")[1].split("## ")[0]


def test_readme_and_docs_links_resolve():
    """Every relative link in the README and the docs names a file that exists
    (mkdocs checks the docs' own links too, strictly, in test_docs)."""
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    missing = [
        f"{_name(path)}: {target}"
        for path in DOCUMENTS
        for target in link.findall(path.read_text(encoding="utf-8"))
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert not missing, missing


def test_tables_outside_generated_blocks_carry_no_untraced_numbers():
    tables: list[list[tuple[str, int, str]]] = []
    for path in DOCUMENTS:
        for i, line, block in table_lines(path.read_text(encoding="utf-8")):
            if block is not None:
                continue
            if tables and tables[-1][-1][:2] == (_name(path), i - 1):
                tables[-1].append((_name(path), i, line))
            else:
                tables.append([(_name(path), i, line)])
    headers = {table[0][2].strip() for table in tables}
    assert set(ALLOWED) <= headers, (
        f"ALLOWED names tables the documents no longer have: {set(ALLOWED) - headers}"
    )
    problems = [
        f"{name}:{i}: {numbers(line)[0]} is in a table outside the generated blocks "
        f"and not in ALLOWED: {line.strip()}"
        for table in tables
        if table[0][2].strip() not in ALLOWED
        for name, i, line in table
        if numbers(line)
    ]
    assert not problems, "\n".join(problems)


def test_toy_task_table_matches_the_world():
    prepare = yaml.safe_load((ROOT / "params.yaml").read_text())["prepare"]
    header = TOY_TASKS
    lines = [(i, line) for i, line, _ in table_lines(WORLD.read_text(encoding="utf-8"))]
    start = next(k for k, (_, line) in enumerate(lines) if line.strip() == header)
    rows = {
        line.split("|")[1].strip(): (i, line)
        for i, line in lines[start + 2 : start + 2 + len(TASKS)]
    }
    assert list(rows) == list(TASKS), f"the toy task table's rows: {list(rows)}, expected {TASKS}"
    for task in TASKS:
        rng = np.random.default_rng([prepare["seed"], WRITABLE.index(task)])  # as write_task draws
        examples = [make_example(task, rng) for _ in range(prepare["n"])]
        voice = default_world().voice(task)
        chars = sum(len(e.answer) for e in examples)
        free = sum(len(e.marks) for e in examples)
        nats = sum(float(row_entropy(p)) for e in examples for _, _, p in e.marks)
        expected = [voice.words, voice.letters, f"{voice.beta:g}"]
        expected += [f"{free / chars:.2f}", f"{nats / chars:.2f}", f"{chars / len(examples):.0f}"]
        i, line = rows[task]
        got = numbers(line)
        assert got == [str(x) for x in expected], (
            f"docs/world.md:{i} ({task}): {got}, the world gives {expected}"
        )
        assert f"| {examples[0].prompt} |" in line, (
            f"docs/world.md:{i}: the prompt is {examples[0].prompt!r}"
        )


def _prose_claims() -> list[tuple[str, str]]:
    """``(source, text)``: each prose number the README or the docs cite,
    formatted from its source."""
    read = lambda path: json.loads((ROOT / path).read_text(encoding="utf-8"))  # noqa: E731
    regime = read("results/regime_table.json")["tasks"]
    law = read("results/law.json")
    curve = read("results/bench.json")["length_curve"]
    context = {
        c: read(f"results/context/ctx-{c}/summary.json")["systems"]["glance"]["tau"]
        for c in (0, 512, 1536)
    }
    target = read("models/toy-target/train_log.json")
    seeds = {(r["draw"], r["task"]): r for r in md_rows(RESULTS / "seeds_table.md")}
    held = [name for name, fit in law["tasks"].items() if fit["holds"]]
    iqr = [float(r["root entropy IQR"]) for r in seeds.values()]
    new = [float(r["new tokens / answer"]) for r in seeds.values()]
    ratio = [float(r["tree / chain [95%]"].split("x")[0]) for r in seeds.values()]
    b1 = ", ".join(f"{law['tasks'][t]['b1']:.2f}" for t in TASKS)
    prepare = yaml.safe_load((ROOT / "params.yaml").read_text())["prepare"]
    rng = np.random.default_rng([prepare["seed"], WRITABLE.index("longform")])
    longform = np.mean([len(make_example("longform", rng).answer) for _ in range(prepare["n"])])
    tau = lambda key: [regime[t][key] for t in TASKS]  # noqa: E731
    low, high = TASKS[int(np.argmin(tau("glance_tau")))], TASKS[int(np.argmax(tau("glance_tau")))]
    return [
        (
            "results/regime_table.json",
            f"runs from {regime[low]['glance_tau']:.2f} ({low}) to "
            f"{regime[high]['glance_tau']:.2f} ({high}), the chain's from "
            f"{min(tau('chain_tau')):.2f} to {max(tau('chain_tau')):.2f}",
        ),
        (
            "results/seeds_table.md",
            f"IQR ({min(iqr):.2f} to {max(iqr):.2f} nats), the answers ({min(new):.0f} to "
            f"{max(new):.0f} new tokens) and the tree over its chain ({min(ratio):.2f}x to "
            f"{max(ratio):.2f}x)",
        ),
        ("results/law.json", f"The law holds on {len(held)} of {len(law['tasks'])}"),
        ("results/law.json", f"(pooled decile R² {law['pooled']['r2_decile']:.2f}; b1 runs {b1}"),
        (
            "results/bench.json",
            f"{'rises' if curve['glance_tree_tau'][-1] > curve['glance_tree_tau'][0] else 'falls'}"
            f" from {curve['glance_tree_tau'][0]:.1f} at {curve['lengths'][0]} new tokens to "
            f"{curve['glance_tree_tau'][-1]:.1f} at {curve['lengths'][-1]}",
        ),
        (
            "results/context/",
            f"from {context[0]:.2f} to {context[512]:.2f} at 512 tokens of filler and to "
            f"{context[1536]:.2f} at 1536",
        ),
        (
            "results/context/",
            f"{context[512] / context[0]:.0%} and {context[1536] / context[0]:.0%} of its tau",
        ),
        ("models/toy-target/train_log.json", f"It trains in {target['seconds']:.0f} s"),
        ("models/toy-target/train_log.json", f"with r {target['agreement']['r']:.2f} on held-out"),
        ("glance/toy/tasks.py", f"about {round(longform, -1):.0f} characters"),
    ]


def test_prose_numbers_match_the_files_they_cite():
    prose = " ".join(" ".join(p.read_text(encoding="utf-8").split()) for p in DOCUMENTS)
    missing = [
        f"{source}: expected the README or the docs to say {text!r}"
        for source, text in _prose_claims()
        if text not in prose
    ]
    assert not missing, "prose is stale:\n" + "\n".join(missing)


@pytest.mark.parametrize("eagle_steps, divisor", [(100, 100), (None, 6000)])
def test_training_table_divides_each_trainer_by_its_own_steps(tmp_path, eagle_steps, divisor):
    from glance.reporting.readme import training_table

    record = {"feature_seconds": 2.0, "phase_seconds": {"loss": 3.0, "backward": 6.0}}
    (tmp_path / "eagle_head.json").write_text(json.dumps(record))
    (tmp_path / "head.json").write_text(json.dumps(record | {"gauge_seconds": 0.0125}))
    params = {
        "head": {"train": {"steps": 6000}},
        "arms": {"train": {"steps": eagle_steps}},
    }
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in training_table(tmp_path, params).splitlines()[2:]
    }
    assert set(rows) == {"block head", "EAGLE-style head"}
    assert rows["EAGLE-style head"][-3] == f"{9000 / divisor:.1f}"  # total ms a step
    assert rows["block head"][-3] == f"{9000 / 6000:.1f}" and rows["block head"][-2] == "2.0"
    assert rows["block head"][-1] == "12.5" and rows["EAGLE-style head"][-1] == "–"  # gauge ms


def test_a_timing_record_carries_the_machine_s_gauge_and_only_seconds(tmp_path):
    from types import SimpleNamespace

    from glance.pipeline.files import write_timing

    cfg = SimpleNamespace(paths=SimpleNamespace(results=str(tmp_path)))
    log = {"steps": 3, "phase_seconds": {"loss": 1.5}, "curve": [{"x": 1, "wall_seconds": 2.0}]}
    rest = write_timing(cfg, "head", log)
    assert rest == {"steps": 3, "curve": [{"x": 1}]}  # the outputs keep no wall time
    record = json.loads((tmp_path / "timing" / "head.json").read_text())
    assert record["phase_seconds"] == {"loss": 1.5} and record["curve"] == [{"wall_seconds": 2.0}]
    assert 0 < record["gauge_seconds"] < 5


def test_calibration_tries_table_is_the_record():
    """docs/world.md's table of calibration tries is what their records give."""
    text = WORLD.read_text(encoding="utf-8")
    start = text.index(TRIES.HEADER)
    shown = text[start:].split("\n\n", 1)[0].strip()
    assert shown == TRIES.table(), "docs/world.md: rerun python notes/issue43/tries_table.py"
