"""The draft head: train the toy one, or check a given checkpoint against the target.

Writes ``<paths.head>/head.json``: where the head is, its block size, layers,
the target layers it reads, its parameter count, and for the toy head its
training log (its wall times go to ``results/timing/head.json``). A trained
toy head is saved in the same folder. A checkpoint is loaded with
:func:`glance.load_block_head`, which refuses a head that does not fit the
target (hidden size, vocabulary, layer ids) and names the field.
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, load_target, log, numerics_record, setup
from glance.pipeline.files import read_json, refuse_unreplaceable, write_json, write_timing

#: what the head stage writes to ``paths.head``: the record, and a toy head's files
FILES = ("head.json", "config.json", "model.safetensors")


@app
def main(cfg) -> None:
    from glance._io import replace_dir
    from glance.heads.block import describe_head

    setup(cfg)
    out, h = Path(cfg.paths.head), cfg.head
    refuse_unreplaceable(out, "paths.head", FILES)  # before any training
    if h.source == "checkpoint" and Path(str(h.path)).resolve() == out.resolve():
        raise SystemExit(f"paths.head {out}: is head.path itself; give the record its own folder")
    target, _ = load_target(cfg)

    def fill(tmp: Path) -> None:  # the head and its record, swapped in as one set
        extra, load_from, path = {}, Path(str(h.path)), Path(str(h.path))
        if h.source == "toy":
            from glance.toy.world import train_toy_head

            info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
            if info["source"] != "toy":
                raise SystemExit("head=toy trains on the toy target only; use head=checkpoint")
            train_log = train_toy_head(info["path"], tmp, h.train)
            load_from, path, extra = tmp, out, {"train": write_timing(cfg, "head", train_log)}
        else:
            write_timing(cfg, "head", {})
        summary = describe_head(load_from, target, name=h.name, source=h.source, path=path)
        write_json(tmp / "head.json", summary | extra | {"numerics": numerics_record(cfg)})
        log.info("head %s: block %d, reads layers %s", h.name, *map(summary.get, LOGGED))

    replace_dir(out, fill, "paths.head", expect=FILES)


LOGGED = ("block_size", "target_layer_ids")

if __name__ == "__main__":
    main()
