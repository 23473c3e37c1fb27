"""Where a training step's time goes, for every trainer the pipelines run.

    python -m glance.testing.train_profile --steps 40            # after dvc repro corpus
    python -m glance.testing.train_profile --steps 40 --out profile.json
    python -m glance.testing.train_profile --timing results/timing  # a whole run's, as recorded

Runs each training stage (block head, consistency scorer, EAGLE-style head,
the two-model arm's assistant) for ``--steps`` steps with the run's own config,
into a scratch folder, and prints milliseconds per step by phase, from the
``phase_seconds`` that :func:`glance.training.loop.fit` (and the assistant's
loop) record: ``loss`` (drawing the batch, its features, the forward pass),
``backward``, ``optimizer``, ``heldout``, ``checkpoint`` and ``other``. The
features' one-off pass is reported apart, in seconds. The scorer trains
behind the scratch head, which changes its loss, not its cost. Run it with
nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from glance.reporting.readme import (
    PHASES,
    phase_seconds,
    phase_table,
    run_params,
    training_table,
)

ROOT = Path(__file__).resolve().parents[2]


def _stages(steps: int, tmp: Path) -> list[tuple[str, str, list[str]]]:
    """``(trainer, stage module, overrides)``, in the order they must run."""
    return [
        ("block head", "head", [f"head.train.steps={steps}", f"paths.head={tmp}/head"]),
        (
            "scorer",
            "scorer",
            [f"scorer.steps={steps}", f"paths.head={tmp}/head", f"paths.scorer={tmp}/scorer"],
        ),  # fmt: skip
        ("EAGLE-style head", "eagle_head", [f"head.train.steps={steps}", f"arms.path={tmp}/eagle"]),
        (
            "assistant",
            "assistant",
            [
                f"arms.assistant.train.steps={steps}",
                "arms.assistant.train.phases=1",
                f"arms.assistant.path={tmp}/assistant",
            ],
        ),  # fmt: skip
    ]


def profile(steps: int, only=()) -> dict:
    """``trainer -> {"ms_per_step": {phase: ms}, "feature_seconds": s,
    "gauge_seconds": s}``."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for trainer, stage, overrides in _stages(steps, Path(tmp)):
            if only and stage not in only:
                continue
            paths = [f"paths.results={tmp}/results", f"paths.checkpoints={tmp}/checkpoints"]
            cmd = [sys.executable, "-m", f"stages.{stage}", "--config-name", "from_params", *paths]
            subprocess.run(cmd + overrides, cwd=ROOT, check=True)
            timing = json.loads((Path(tmp) / "results" / "timing" / f"{stage}.json").read_text())
            phases, features = phase_seconds(timing)
            ms = {k: round(1000 * phases[k] / steps, 1) for k in PHASES}
            ms["total"] = round(sum(ms.values()), 1)
            out[trainer] = {"ms_per_step": ms, "feature_seconds": round(features, 1),
                            "gauge_seconds": timing.get("gauge_seconds")}  # fmt: skip
    return out


def markdown(result: dict) -> str:
    """The profile as a table: one row per trainer, ms per step by phase."""
    return phase_table(
        {
            t: (r["ms_per_step"], r["feature_seconds"], r.get("gauge_seconds"))
            for t, r in result.items()
        }
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--only", nargs="*", default=(), help="stage names (head, scorer, ...)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--timing", type=Path, help="read a finished run's timing folder instead")
    args = parser.parse_args(argv)
    if args.timing:  # the docs' generated table, from a finished run
        print(training_table(args.timing, run_params(ROOT / "results")), end="")
        return
    result = profile(args.steps, args.only)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result), end="")


if __name__ == "__main__":
    main()
