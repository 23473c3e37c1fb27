"""The EAGLE-3-style head of the comparison arms: trained on the block head's corpus.

    dvc repro stages/arms/dvc.yaml     # this stage, then stages.arms

The head (``glance.heads.eagle``) trains on the same regenerated answers as the toy
block head (``head.train``: the same greedy and sampled prompts, seeds,
steps, learning rate and batch of ``arms.train.rows`` sequences), with
EAGLE-3's training-time test (``arms.train.ttt`` steps over windows of
``arms.train.window`` anchors). Writes the head to ``arms.path`` with
``eagle.json`` beside it: its shape and the training log, with the held-out
loss curve.
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, load_target, log, numerics_record, setup
from glance.pipeline.files import read_json, write_json, write_timing


@app
def main(cfg) -> None:
    from glance.heads.eagle import load_eagle_head
    from glance.toy.world import eagle_train, train_toy_eagle_head

    setup(cfg)
    info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
    if info["source"] != "toy" or cfg.head.source != "toy":
        raise SystemExit("stages.eagle_head trains on the toy target's corpus only")
    h, out = cfg.head.train, Path(cfg.arms.path)
    train_log = train_toy_eagle_head(info["path"], out, h, cfg.arms.train)
    target, _ = load_target(cfg)
    head = load_eagle_head(out, target=target)  # raises if it does not fit
    write_json(
        out / "eagle.json",
        {
            "path": str(out),
            "target_layer_ids": head.target_layer_ids,
            "parameters": sum(p.numel() for p in head.parameters()),
            "corpus": h.corpus(),
            "train": {
                **eagle_train(h, cfg.arms.train),
                **write_timing(cfg, "eagle_head", train_log),
            },
            "numerics": numerics_record(cfg),
        },
    )
    curve = train_log.get("heldout_curve", [])
    log.info("eagle head: final loss %.3f, held-out %s", train_log["final_loss"], curve[-3:])


if __name__ == "__main__":
    main()
