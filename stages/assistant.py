"""The two-model arm's drafter: a smaller toy VLM trained on the same tasks.

    dvc repro stages/arms/dvc.yaml

It is the toy target's recipe (``glance.toy.soft.train_target``: the same
task mix, tokenizer and processor) at a smaller size (``arms.assistant.size``)
and for ``arms.assistant.train`` steps; the arms stage runs it as
``transformers``' assisted generation (``generate(assistant_model=...)``), the
usual way to pair a small model with a large one. Writes the model to
``arms.assistant.path`` with ``assistant.json`` (size, parameters, training
log).
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, log, numerics_record, setup
from glance.pipeline.files import read_json, write_json, write_timing


@app
def main(cfg) -> None:
    from dataclasses import asdict

    from glance.targets.vl import load_target
    from glance.toy.soft import train_target

    setup(cfg)
    info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
    if info["source"] != "toy":
        raise SystemExit("stages.assistant trains a toy assistant for the toy target only")
    a, out = cfg.arms.assistant, Path(cfg.arms.assistant.path)
    train_log = train_target(out, a.train, a.size)
    model, _ = load_target(out)
    params = sum(p.numel() for p in model.parameters())
    write_json(
        out / "assistant.json",
        {
            "size": asdict(a.size),
            "parameters": params,
            "train": write_timing(cfg, "assistant", train_log),
            "numerics": numerics_record(cfg),
        },
    )
    log.info("assistant: %d parameters, final loss %.3f", params, train_log["final_loss"])


if __name__ == "__main__":
    main()
