"""Run the results notebook on the pipeline's outputs and save it with them.

The notebook is its own source: its code cells are run afresh in a ``python3``
kernel of this interpreter, from the project root, and the notebook is written
back in place with its outputs, so GitHub shows it as is. The files it reads
are the string literals in its code cells that name a file under ``results/``
or ``figures/`` (the notebook spells each path out in full); every one must
exist before the kernel starts. Their SHA-256 go into the notebook's metadata,
``metadata["glance"]["inputs"]`` (path relative to the root -> hex digest), so
a test can tell whether the saved outputs are current.

The saved notebook depends only on its cells and its inputs: no timing
metadata, execution counts numbered 1, 2, ... over the code cells.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import tempfile
from pathlib import Path

NOTEBOOK = "notebooks/results.ipynb"
#: the arms pipeline's notebook: the comparison arms, the heads and the claims
ARMS_NOTEBOOK = "notebooks/arms.ipynb"
#: seconds one cell may run before the stage fails
CELL_TIMEOUT = 300
_INPUT = re.compile(r"(results|figures)/[\w.\-/]+\.\w+")


def read_paths(nb) -> list[str]:
    """The files a notebook reads: every string literal in its code cells that
    names a file under ``results/`` or ``figures/``, relative to the project
    root, in order of first use."""
    from IPython.core.inputtransformer2 import TransformerManager

    found = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:  # IPython syntax (magics, !commands) to plain Python first
            tree = ast.parse(TransformerManager().transform_cell(cell.source))
        except SyntaxError as err:
            raise ValueError(f"code cell {i}: not Python ({err})") from err
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if _INPUT.fullmatch(node.value):
                    found[node.value] = None
    return list(found)


def sha256(path) -> str:
    """The hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def inputs(root, notebook=None) -> dict[str, str]:
    """``{path: sha256}`` for every file the notebook reads (:func:`read_paths`),
    paths relative to ``root``; ``notebook`` defaults to ``root/NOTEBOOK``.
    A missing file raises ``FileNotFoundError`` naming it."""
    import nbformat

    root = Path(root)
    path = Path(notebook) if notebook is not None else root / NOTEBOOK
    nb = nbformat.read(path, as_version=4)
    return _digests(root, read_paths(nb), path)


def _digests(root: Path, paths: list[str], notebook: Path) -> dict[str, str]:
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{notebook} reads {', '.join(missing)}, missing under {root}; "
            "run `dvc repro` (or the stage that writes it) first"
        )
    return {p: sha256(root / p) for p in paths}


def _kernel_manager(kernel_dir: Path):
    """A manager for a ``python3`` kernel of this interpreter (``sys.executable``),
    whatever other ``python3`` kernelspecs the machine has."""
    import zmq
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    write_kernel_spec(kernel_dir / "python3")
    specs = KernelSpecManager(kernel_dirs=[str(kernel_dir)])
    return KernelManager(
        kernel_name="python3",
        kernel_spec_manager=specs,
        # CurveZMQ where this pyzmq has it, so the kernel's local traffic is encrypted
        transport_encryption="auto" if zmq.has("curve") else "disabled",
    )


def execute(path, root, timeout: int = CELL_TIMEOUT) -> dict[str, str]:
    """Run the notebook at ``path`` from ``root`` in a fresh kernel and write it
    back in place (atomically) with its outputs and its inputs' digests.
    Returns the digests, ``{path relative to root: sha256}``. Raises
    ``FileNotFoundError`` naming any input that is missing, nbclient's
    ``CellExecutionError`` when a cell fails, and ``RuntimeError`` when an
    input changed while the notebook ran; the file is untouched then."""
    import nbformat
    from nbclient import NotebookClient

    from glance._io import atomic_write_text

    path, root = Path(path), Path(root).resolve()
    nb = nbformat.read(path, as_version=4)
    before = _digests(root, read_paths(nb), path)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with tempfile.TemporaryDirectory(prefix="glance-kernel-") as kernel_dir:
        NotebookClient(
            nb,
            km=_kernel_manager(Path(kernel_dir)),
            kernel_name="python3",
            timeout=timeout,
            record_timing=False,
            resources={"metadata": {"path": str(root)}},
        ).execute(
            cleanup_kc=True,  # shut the kernel down: we own its manager
            # no user profile or startup files, no history left behind
            env={**os.environ, "IPYTHONDIR": str(Path(kernel_dir) / "ipython")},
        )
    after = _digests(root, list(before), path)
    changed = [p for p in before if before[p] != after[p]]
    if changed:
        raise RuntimeError(f"{', '.join(changed)} changed while {path} ran; run it again")
    count = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        for out in cell.outputs:
            if "execution_count" in out:
                out.execution_count = count
    nb.metadata["glance"] = {"inputs": before}
    nbformat.validate(nb)
    atomic_write_text(path, nbformat.writes(nb) + "\n")
    return before


def check_inputs(notebook, folders: dict[str, Path]) -> None:
    """Every file the notebook at ``notebook`` reads (:func:`read_paths`),
    looked for in ``folders`` (``"results"`` / ``"figures"`` -> folder); a
    missing one raises ``FileNotFoundError`` naming the file and its
    ``paths.*`` key."""
    import nbformat

    nb = nbformat.read(Path(notebook), as_version=4)
    missing = []
    for path in read_paths(nb):
        key, rest = path.split("/", 1)
        if not (folders[key] / rest).is_file():
            missing.append(f"paths.{key} {folders[key]}: no {rest}")
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise FileNotFoundError(
            f"{missing[0]}{more}, which {notebook} reads; run the stage that writes it first"
        )


def run_stage(name: str, results=None, figures=None) -> None:
    """What a report stage does: execute the notebook ``name`` (relative to the
    project root, the working directory) in place and log how long it took.
    The notebook reads ``results/`` and ``figures/`` under the root; other
    ``results`` or ``figures`` folders are shown to it under those names (a
    temporary root of links), so its inputs' recorded paths stay the same.
    Every input must exist first (:func:`check_inputs`)."""
    import logging
    import time

    root = Path.cwd()
    folders = {
        "results": Path(results) if results is not None else root / "results",
        "figures": Path(figures) if figures is not None else root / "figures",
    }
    check_inputs(root / name, folders)
    start = time.perf_counter()
    if all(folders[k].resolve() == (root / k).resolve() for k in folders):
        digests = execute(root / name, root)
    else:
        with tempfile.TemporaryDirectory(prefix="glance-report-") as view:
            view = Path(view)
            (view / "dvc.yaml").symlink_to(root / "dvc.yaml")  # how the notebook finds its root
            for key, folder in folders.items():
                (view / key).symlink_to(folder.resolve(), target_is_directory=True)
            digests = execute(root / name, view)
    seconds = time.perf_counter() - start
    logging.getLogger("glance").info(
        "%s executed in %.1f s from %d inputs", name, seconds, len(digests)
    )
