"""The report stage: ``notebooks/results.ipynb`` is executed, saved with its
outputs, and current with the files under ``results/`` and ``figures/`` it reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from glance.reporting import notebook as report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / report.NOTEBOOK
RERUN = "python -m stages.report --config-name from_params (or dvc repro report)"


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _copy(tmp_path: Path, leave_out=()) -> Path:
    """A scratch project: the notebook, a dvc.yaml (the notebook's root
    marker) and the committed inputs, less ``leave_out``."""
    (tmp_path / "notebooks").mkdir()
    shutil.copy(NOTEBOOK, tmp_path / report.NOTEBOOK)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for rel in report.read_paths(nb):
        if rel not in leave_out:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_notebook_reads_the_results_it_reports():
    paths = report.read_paths(nbformat.read(NOTEBOOK, as_version=4))
    for needed in (
        "results/main_table.md",
        "results/law.json",
        "results/audit.json",
        "results/bench.md",
        "figures/verify_cost.png",
        "figures/length.png",
        "figures/host_share.png",
        "figures/law.png",
        "figures/tree_vs_chain.png",
        "figures/context.png",
        "figures/budget.png",
    ):
        assert needed in paths, f"{report.NOTEBOOK} no longer reads {needed}"


def test_read_paths_finds_literals_past_ipython_syntax():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell('%matplotlib inline\nx = root / "results/a.json"'),
            nbformat.v4.new_markdown_cell('"results/not_code.md"'),
            nbformat.v4.new_code_cell('for p in ("figures/b.png", "results/"):\n    print(p)'),
        ]
    )
    assert report.read_paths(nb) == ["results/a.json", "figures/b.png"]


ARMS_RERUN = "python -m stages.arms_report --config-name from_params"


@pytest.mark.parametrize(
    ("name", "rerun"), [(report.NOTEBOOK, RERUN), (report.ARMS_NOTEBOOK, ARMS_RERUN)]
)
def test_committed_notebook_is_executed_and_current(name, rerun):
    nb = nbformat.read(ROOT / name, as_version=4)
    for i, cell in enumerate(_code_cells(nb), 1):
        assert cell.outputs, f"{name}: code cell {i} has no outputs; run {rerun}"
        assert cell.execution_count == i, f"{name}: code cell {i} not executed in order"
        assert not any(o.output_type == "error" for o in cell.outputs)
    recorded = nb.metadata.get("glance", {}).get("inputs")
    assert recorded, f"{name}: no recorded inputs; run {rerun}"
    live = report.inputs(ROOT, ROOT / name)
    stale = sorted(p for p in live.keys() | recorded.keys() if live.get(p) != recorded.get(p))
    assert not stale, f"{name} is older than {stale}; run {rerun}"


def test_the_arms_notebook_reads_the_arms_and_the_claims():
    paths = report.read_paths(nbformat.read(ROOT / report.ARMS_NOTEBOOK, as_version=4))
    for needed in ("results/arms.md", "results/arms.json", "results/claims.md",
                   "figures/arms_context.png"):  # fmt: skip
        assert needed in paths


def test_execute_on_a_copy_saves_outputs_and_digests(tmp_path):
    root = _copy(tmp_path)
    path = root / report.NOTEBOOK
    digests = report.execute(path, root)
    assert digests == report.inputs(root) == report.inputs(ROOT)
    first = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["glance"]["inputs"] == digests
    nbformat.validate(nb)
    for i, cell in enumerate(_code_cells(nb), 1):
        assert cell.outputs and cell.execution_count == i
        assert "execution" not in cell.metadata  # no timestamps
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "data" in o]
    assert sum("image/png" in o.data for o in images) == 7
    text = first.decode()
    assert str(tmp_path) not in text and str(ROOT) not in text  # no absolute paths
    report.execute(path, root)
    assert path.read_bytes() == first  # the same inputs give the same file
    with open(root / "results/law.json", "a") as f:  # a rerun pipeline: now stale
        f.write("\n")
    live = report.inputs(root)
    assert [p for p in live if live[p] != digests[p]] == ["results/law.json"]


def test_missing_input_is_named_and_leaves_the_notebook(tmp_path):
    root = _copy(tmp_path, leave_out={"results/law.json"})
    path = root / report.NOTEBOOK
    before = path.read_bytes()
    with pytest.raises(FileNotFoundError, match="results/law.json"):
        report.execute(path, root)
    with pytest.raises(FileNotFoundError, match="results/law.json"):
        report.inputs(root)
    assert path.read_bytes() == before


def test_dvc_stage_declares_the_notebooks_inputs():
    yaml = pytest.importorskip("yaml")
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"].get("report")
    if stage is None:
        pytest.skip("dvc.yaml has no report stage yet")
    deps = {str(d) for d in stage["deps"]}
    missing = sorted(set(report.inputs(ROOT)) - deps)
    assert not missing, f"dvc.yaml stage report: deps lack {missing}, which the notebook reads"
    outs = {k: v for out in stage["outs"] for k, v in out.items()}
    # not persistent, DVC would delete the notebook (its own source) before running
    assert outs[report.NOTEBOOK] == {"cache": False, "persist": True}
    assert report.NOTEBOOK not in deps
