"""Each DVC stage's source deps: the files its import closure reaches.

A stage's ``deps`` list exactly the files of its module's closure
(:func:`glance._closure.closure`), and its data, so that an edit to the
decoding loop retrains no head. ``tests/test_dvc_deps.py`` checks both
directions; after moving an import, rewrite the lists with

    python -m glance.testing.dvc_deps            # rewrite dvc.yaml and stages/arms/dvc.yaml
    python -m glance.testing.dvc_deps --check    # exit 1 naming each stage whose list is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from glance._closure import ROOT, closure

PIPELINES = ("dvc.yaml", "stages/arms/dvc.yaml")
_SOURCE_DEP = re.compile(r"^(\s+)- ((?:glance|stages)/\S*)\s*$")


def stages(root: Path = ROOT):
    """``(pipeline, stage name, stage module, declared deps)`` for every stage."""
    for pipeline in PIPELINES:
        for name, stage in yaml.safe_load((root / pipeline).read_text())["stages"].items():
            body = stage.get("do", stage)
            module = re.search(r"\$\{app\}\.(\w+)", body["cmd"]).group(1)
            yield pipeline, name, f"stages.{module}", [str(d) for d in body.get("deps", [])]


def rewrite(text: str, wanted: dict[str, list[str]]) -> str:
    """``text`` (a dvc.yaml) with each stage's glance/ and stages/ deps replaced
    by ``wanted[stage]``, where the stage's first such dep stood."""
    out, stage, done = [], None, set()
    for line in text.splitlines(keepends=True):
        head = re.match(r"^  (\w+):\s*$", line)
        if head:
            stage = head.group(1)
        dep = _SOURCE_DEP.match(line)
        if dep and stage in wanted:
            if stage not in done:
                out += [f"{dep.group(1)}- {f}\n" for f in wanted[stage]]
                done.add(stage)
            continue
        out.append(line)
    missing = sorted(set(wanted) - done)
    if missing:
        raise ValueError(f"stages {missing} list no glance/ or stages/ dep to replace")
    return "".join(out)


def stale(root: Path = ROOT) -> dict[str, tuple[list[str], list[str]]]:
    """Stages whose declared source deps differ from their closure:
    ``"pipeline:stage" -> (declared, wanted)``."""
    out = {}
    for pipeline, name, module, deps in stages(root):
        declared = sorted(d for d in deps if d.startswith(("glance/", "stages/")) or d == "glance")
        wanted = closure(module, root)
        if declared != wanted:
            out[f"{pipeline}:{name}"] = (declared, wanted)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale lists")
    args = parser.parse_args(argv)
    bad = stale()
    for key, (declared, wanted) in bad.items():
        extra, missing = sorted(set(declared) - set(wanted)), sorted(set(wanted) - set(declared))
        print(f"{key}: missing {missing}, not read {extra}")
    if args.check or not bad:
        return 1 if bad else 0
    for pipeline in PIPELINES:
        wanted = {name: closure(module) for p, name, module, _ in stages() if p == pipeline}
        path = ROOT / pipeline
        path.write_text(rewrite(path.read_text(encoding="utf-8"), wanted), encoding="utf-8")
    print(f"rewrote {', '.join(PIPELINES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
