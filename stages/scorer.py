"""The consistency scorer: trained behind the frozen block head, on its corpus.

    python -m stages.scorer
    torchrun --nproc_per_node=8 -m stages.scorer target=qwen3_vl_8b device=cuda

The scorer (:mod:`glance.heads.scorer`) re-ranks the head's top
``scorer.top_k`` candidates per offset along each path of the tree, with a
state of width ``scorer.rank`` that runs along the path's tokens; it trains
with the project's trainer (:func:`glance.training.scorer.train_scorer`) on
the corpus stage's answers, the head and target frozen. Writes the scorer to
``paths.scorer`` and ``results/scorer.json``: its shape, the training log with
the held-out loss curve, and the same loss under the product of marginals
(the untrained scorer) for comparison. Wall times go to
``results/timing/scorer.json``, metrics through dvclive to
``results/train/scorer``; a killed run resumes from its last checkpoint
(``paths.checkpoints``). Under ``torchrun`` only rank 0 writes.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from glance.pipeline.app import app, load_target, log, numerics_record, setup
from glance.pipeline.files import read_json, refuse_unreplaceable, write_json, write_timing
from glance.pipeline.limits import check_scorer_top_k

#: what the scorer stage writes to ``paths.scorer``
FILES = ("config.json", "model.safetensors")


@record
@app
def main(cfg) -> None:
    from glance._io import replace_dir
    from glance.heads.block import load_block_head
    from glance.heads.scorer import load_scorer
    from glance.pipeline.training import init_distributed, train_consistency_scorer

    setup(cfg)
    if cfg.scorer is None:
        raise SystemExit("scorer: expected the scorer's training run (conf/config.yaml)")
    check_scorer_top_k(cfg)  # from the target's config.json, before any weight loads
    out = Path(cfg.paths.scorer)
    refuse_unreplaceable(out, "paths.scorer", FILES, "scorer", cfg)  # before any training
    rank, _, cfg.device = init_distributed(str(cfg.device), cfg.dist_timeout)
    info = read_json(Path(cfg.paths.head) / "head.json", "run `python -m stages.head` first")
    target, processor = load_target(cfg)
    head = load_block_head(Path(info["path"]), target=target).to(target.device, target.dtype)
    if rank != 0:  # the other ranks train, rank 0 writes
        train_consistency_scorer(cfg, target, processor, head, None)
        return
    train_log = {}

    def fill(tmp: Path) -> None:
        train_log.update(train_consistency_scorer(cfg, target, processor, head, tmp))

    replace_dir(out, fill, "paths.scorer", expect=FILES, kind="scorer")
    scorer = load_scorer(out, head, target)  # raises if it does not fit
    curve, marginal = train_log.get("heldout_curve", []), train_log.get("marginal_heldout_loss")
    write_json(
        Path(cfg.paths.results) / "scorer.json",
        {
            "path": str(out),
            "parameters": sum(p.numel() for p in scorer.parameters()),
            "settings": asdict(cfg.scorer),
            "marginal_heldout_loss": marginal,
            "train": write_timing(cfg, "scorer", train_log),
            "numerics": numerics_record(cfg),
        },
    )
    log.info("scorer: held-out loss, last points %s (the marginals' %s)", curve[-3:], marginal)


if __name__ == "__main__":
    main()
