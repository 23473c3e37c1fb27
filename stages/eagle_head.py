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

from stages.common import (
    app,
    load_target,
    log,
    numerics_record,
    plain,
    read_json,
    setup,
    write_json,
    write_timing,
)

CORPUS = ("greedy", "sampled", "seed", "max_new_tokens", "long_share", "context", "heldout")


@app
def main(cfg) -> None:
    from glance.heads.eagle import load_eagle_head
    from glance.toy.world import train_toy_eagle_head

    setup(cfg)
    info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
    if info["source"] != "toy" or cfg.head.source != "toy":
        raise SystemExit("stages.eagle_head trains on the toy target's corpus only")
    h = plain(cfg.head.train)
    corpus = {key: h[key] for key in CORPUS}
    train = {**plain(cfg.arms.train), "steps": h["steps"], "lr": h["lr"], "seed": h["seed"]}
    out = Path(cfg.arms.path)
    train_log = train_toy_eagle_head(info["path"], out, corpus, train)
    target, _ = load_target(cfg)
    head = load_eagle_head(out, target=target)  # raises if it does not fit
    write_json(
        out / "eagle.json",
        {
            "path": str(out),
            "target_layer_ids": head.target_layer_ids,
            "parameters": sum(p.numel() for p in head.parameters()),
            "corpus": corpus,
            "train": {**train, **write_timing(cfg, "eagle_head", train_log)},
            "numerics": numerics_record(cfg),
        },
    )
    curve = train_log.get("heldout_curve", [])
    log.info("eagle head: final loss %.3f, held-out %s", train_log["final_loss"], curve[-3:])


if __name__ == "__main__":
    main()
