"""The EAGLE-3-style head of the comparison arms: trained on the block head's corpus.

    dvc repro stages/arms/dvc.yaml     # this stage, then stages.arms

The head (``glance.heads.eagle``) trains on the corpus stage's answers
(``paths.corpus``: the same greedy and sampled answers as the block head), with
the block head's seed (``head.train``), ``arms.train.steps`` steps at learning
rate ``arms.train.lr`` (the block head's where unset), a batch of
``arms.train.rows`` sequences, and EAGLE-3's training-time test
(``arms.train.ttt`` steps over windows of up to ``arms.train.window`` anchors).
Writes the head to ``arms.path`` with ``eagle.json`` beside it: its shape and
the training log, with the held-out loss curve.
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, load_target, log, numerics_record, setup
from glance.pipeline.files import refuse_unreplaceable, write_json, write_timing

#: what the stage writes to ``arms.path``
FILES = ("eagle.json", "config.json", "model.safetensors")


@app
def main(cfg) -> None:
    import torch

    from glance._io import replace_dir
    from glance.heads.eagle import load_eagle_head
    from glance.toy.world import eagle_train
    from glance.training.corpus import Corpus
    from glance.training.eagle import EagleTrainConfig, train_eagle_head

    setup(cfg)
    if cfg.head.source != "train":
        raise SystemExit("stages.eagle_head trains on the block head's corpus: head=train")
    out, settings = Path(cfg.arms.path), eagle_train(cfg.head.train, cfg.arms.train)
    refuse_unreplaceable(out, "arms.path", FILES, "eagle head", cfg)  # before any training
    torch.manual_seed(cfg.head.train.seed)
    target, processor = load_target(cfg)
    rows = {p: Corpus(cfg.paths.corpus, p, processor=processor) for p in ("train", "heldout")}
    train, heldout = ([c.sequence(i) for i in range(len(c))] for c in rows.values())
    head, train_log = train_eagle_head(target, train, EagleTrainConfig(**settings), heldout=heldout)
    train_log["sequences"] = len(train)
    record = {
        "corpus": rows["train"].recipe["corpus"],
        "train": {**settings, **write_timing(cfg, "eagle_head", train_log)},
        "numerics": numerics_record(cfg),
    }

    def fill(tmp: Path) -> None:  # the head and its record, swapped in as one set
        head.save_pretrained(tmp)
        saved = load_eagle_head(tmp, target=target)  # raises if it does not fit
        write_json(
            tmp / "eagle.json",
            {
                "path": str(out),
                "target_layer_ids": saved.target_layer_ids,
                "parameters": sum(p.numel() for p in saved.parameters()),
            }
            | record,
        )

    replace_dir(out, fill, "arms.path", expect=FILES, kind="eagle head")
    curve = train_log.get("heldout_curve", [])
    log.info("eagle head: final loss %.3f, held-out %s", train_log["final_loss"], curve[-3:])


if __name__ == "__main__":
    main()
