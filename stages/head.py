"""The draft head: train one on the corpus, or check a given checkpoint against the target.

    python -m stages.head                                      # the toy head
    python -m stages.head target=qwen3_vl_8b head=train device=cuda
    torchrun --nproc_per_node=8 -m stages.head target=qwen3_vl_8b head=train device=cuda

Writes ``<paths.head>/head.json``: where the head is, its block size, layers,
the target layers it reads, its parameter count, and for a trained head its
training log (its wall times go to ``results/timing/head.json``, its metrics
through dvclive to ``results/train/head``). A trained head is saved in the same
folder; under ``torchrun`` (DDP: gloo on CPU, NCCL on GPU) only rank 0 writes.
A checkpoint is loaded with :func:`glance.load_block_head`, which refuses a
head that does not fit the target (hidden size, vocabulary, layer ids).
"""

from __future__ import annotations

from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from glance.pipeline.app import app, load_target, log, numerics_record, setup
from glance.pipeline.files import read_json, refuse_unreplaceable, write_json, write_timing

#: what the head stage writes to ``paths.head``: the record, and a trained head's files
FILES = ("head.json", "config.json", "model.safetensors")


@record
@app
def main(cfg) -> None:
    from glance._io import replace_dir
    from glance.heads.block import describe_head
    from glance.pipeline.training import init_distributed, target_dir, train_block_head

    setup(cfg)
    out, h = Path(cfg.paths.head), cfg.head
    refuse_unreplaceable(out, "paths.head", FILES, "head", cfg)  # before any training
    if h.source == "checkpoint" and Path(str(h.path)).resolve() == out.resolve():
        raise SystemExit(f"paths.head {out}: is head.path itself; give the record its own folder")
    rank, _, cfg.device = init_distributed(str(cfg.device), cfg.dist_timeout)
    info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
    target, processor = load_target(cfg)
    if h.source == "train" and rank != 0:  # the other ranks train, rank 0 writes
        train_block_head(cfg, target, processor, target_dir(info), None)
        return

    def fill(tmp: Path) -> None:  # the head and its record, swapped in as one set
        extra, load_from, path = {}, Path(str(h.path)), Path(str(h.path))
        if h.source == "train":
            train_log = train_block_head(cfg, target, processor, target_dir(info), tmp)
            load_from, path, extra = tmp, out, {"train": write_timing(cfg, "head", train_log)}
        else:
            write_timing(cfg, "head", {})
        summary = describe_head(load_from, target, name=h.name, source=h.source, path=path)
        write_json(tmp / "head.json", summary | extra | {"numerics": numerics_record(cfg)})
        log.info("head %s: block %d, reads layers %s", h.name, *map(summary.get, LOGGED))

    replace_dir(out, fill, "paths.head", expect=FILES, kind="head")


LOGGED = ("block_size", "target_layer_ids")

if __name__ == "__main__":
    main()
