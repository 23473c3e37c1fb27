"""dvc.yaml declares every source file each stage reads.

Each stage's Python closure (its module, and everything under ``glance/`` and
``stages/`` that it imports, at module level or inside functions, plus the
module behind each of ``glance``'s lazy attributes that it uses) must be
covered by the stage's ``deps``; so must the C kernel's source wherever
``glance.core.tree`` is imported. Otherwise an edit to an undeclared file leaves
``dvc status`` clean and the committed results stale.

The converse holds too: deps are by file, and a stage declares no source file
its closure does not reach, so that an edit to the decoding loop or the budget
planner retrains no head. The closure is :mod:`glance.testing.dvc_deps`'s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("yaml")

from glance.testing import dvc_deps  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STAGES = [(f"{p}:{n}", m, d) for p, n, m, d in dvc_deps.stages()]


@pytest.mark.parametrize(("name", "module", "deps"), STAGES, ids=lambda x: str(x)[:30])
def test_dvc_yaml_declares_every_file_a_stage_reads(name, module, deps):
    needed = dvc_deps.closure(module)
    missing = [f for f in needed if f not in deps]
    assert not missing, (
        f"stage {name!r} ({module}) reads undeclared {missing}: "
        "run python -m glance.testing.dvc_deps"
    )
    ignored = sorted(f for f in needed if _dvcignored(f))
    assert not ignored, f"stage {name!r} ({module}) reads {ignored}, which .dvcignore hides"


@pytest.mark.parametrize(("name", "module", "deps"), STAGES, ids=lambda x: str(x)[:30])
def test_a_stage_declares_no_source_file_it_does_not_read(name, module, deps):
    """Deps by file, not by folder: a folder (or a file outside the closure)
    would rerun the stage for edits it never reads."""
    declared = [d for d in deps if d == "glance" or d.startswith(("glance/", "stages/"))]
    extra = sorted(set(declared) - set(dvc_deps.closure(module)))
    assert not extra, (
        f"stage {name!r} ({module}) declares {extra}, which its imports never reach: "
        "run python -m glance.testing.dvc_deps"
    )


@pytest.mark.parametrize("edited", ["glance/core/budget.py", "glance/decoding/loop.py"])
def test_an_edit_to_the_planner_or_the_loop_retrains_no_head(edited):
    # The target stage scores the target's greedy answers with glance's own
    # greedy decoding, so it reruns; its outputs stay byte-identical when the
    # decoder stays lossless, and DVC then leaves the heads alone.
    training = {"prepare", "seed_data", "corpus", "head", "scorer", "eagle_head", "assistant"}
    for name, module, deps in STAGES:
        if name.split(":")[1] in training:
            assert edited not in dvc_deps.closure(module), (name, edited)
            assert edited not in deps, (name, edited)


def test_the_rewrite_replaces_a_stage_s_source_deps_in_place():
    text = (
        "stages:\n  a:\n    cmd: x\n    deps:\n      - glance/core\n      - data/x\n"
        "      - stages/a.py\n    outs: [y]\n  b:\n    deps:\n      - glance/_io.py\n"
    )
    out = dvc_deps.rewrite(text, {"a": ["glance/core/law.py", "stages/a.py"]})
    assert out == text.replace(
        "      - glance/core\n      - data/x\n      - stages/a.py\n",
        "      - glance/core/law.py\n      - stages/a.py\n      - data/x\n",
    )
    with pytest.raises(ValueError, match="'c'"):
        dvc_deps.rewrite(text, {"c": []})


def test_the_closure_follows_function_level_and_lazy_imports():
    files = dvc_deps.closure("stages.decode")
    assert "glance/decoding/loop.py" in files  # glance.generate, a lazy attribute
    assert "glance/core/_ctree.c" in files  # the kernel behind glance.core.tree
    assert {"stages/__init__.py", "stages/decode.py"} <= set(files)


def _dvcignored(rel: str) -> bool:
    """Whether a ``.dvcignore`` line (a file, or a folder ending in ``/``) hides ``rel``."""
    lines = (ROOT / ".dvcignore").read_text().splitlines()
    patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    return any(rel == p or (p.endswith("/") and "/" in p and rel.startswith(p)) for p in patterns)


def test_dvcignore_hides_only_modules_no_stage_imports():
    read = set()
    for _, module, _ in STAGES:
        read |= set(dvc_deps.closure(module))
    hidden = [p.relative_to(ROOT).as_posix() for p in (ROOT / "glance").rglob("*.py")]
    hidden = [f for f in hidden if _dvcignored(f)]
    assert "glance/testing/__init__.py" in hidden and not set(hidden) & read


@pytest.mark.parametrize("folder", [".", "stages/arms"])
def test_every_lock_entry_names_a_stage_the_pipeline_has(folder):
    """No orphaned ``dvc.lock`` entries (a removed stage or foreach item): DVC
    keeps them until a full repro rewrites the lock, and they mislead readers."""
    import subprocess
    import sys

    import yaml

    dvc = str(Path(sys.executable).parent / "dvc")
    listed = subprocess.run([dvc, "stage", "list", "--name-only"], cwd=ROOT / folder,
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    locked = yaml.safe_load((ROOT / folder / "dvc.lock").read_text())["stages"]
    orphans = sorted(set(locked) - set(listed))
    assert not orphans, f"{folder}/dvc.lock holds stages its dvc.yaml lacks: {orphans}"
    assert set(listed) <= set(locked), "a stage never ran: run dvc repro"


def test_a_decode_recipe_hashes_the_sources_decoding_reads_and_no_others():
    """``outputs.jsonl``'s ``glance`` digest follows the decode closure: an edit
    to training or test helpers, which DVC does not rerun decoding for, must
    not change the recipe a fresh clone writes."""
    from glance._closure import closure

    files = closure("glance.experiments.decode")
    assert "glance/decoding/loop.py" in files and "glance/core/_ctree.c" in files
    assert not [f for f in files if f.startswith(("glance/testing/", "glance/training/"))]
    # decode reruns for each of them; the audit then reruns for decode's outputs
    decode = next(deps for _, name, _, deps in dvc_deps.stages() if name == "decode")
    assert set(files) <= set(decode)
