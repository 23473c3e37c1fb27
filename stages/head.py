"""The draft head: train the toy one, or check a given checkpoint against the target.

Writes ``<paths.head>/head.json``: where the head is, its block size, layers,
the target layers it reads, its parameter count, and for the toy head its
training log (its wall times go to ``results/timing/head.json``). A trained
toy head is saved in the same folder. A checkpoint is
loaded with :func:`glance.load_block_head`, which refuses a head that does not
fit the target (hidden size, vocabulary, layer ids) and names the field.
"""

from __future__ import annotations

import json
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


@app
def main(cfg) -> None:
    import glance
    from glance._io import check_replaceable, replace_dir

    setup(cfg)
    out = Path(cfg.paths.head)
    h = cfg.head
    if h.source not in ("toy", "checkpoint"):
        raise SystemExit(f"head.source: expected toy or checkpoint; got {h.source!r}")
    try:  # before any training: never replace a folder GLANCE did not write
        check_replaceable(out, "paths.head", expect=FILES)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if h.source == "checkpoint" and Path(str(h.path)).resolve() == out.resolve():
        raise SystemExit(f"paths.head {out}: is head.path itself; give the record its own folder")
    target, _ = load_target(cfg)

    def fill(tmp: Path) -> None:  # the head and its record, swapped in as one set
        if h.source == "toy":
            from glance.toy.world import train_toy_head

            info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
            if info["source"] != "toy":
                raise SystemExit("head=toy trains on the toy target only; use head=checkpoint")
            train_log = train_toy_head(info["path"], tmp, **plain(h.train))
            load_from, path, extra = tmp, out, {"train": write_timing(cfg, "head", train_log)}
        else:
            load_from = path = Path(str(h.path))
            extra = {}
            write_timing(cfg, "head", {})
        head = glance.load_block_head(load_from, target=target)  # raises if it does not fit
        config = json.loads((Path(load_from) / "config.json").read_text(encoding="utf-8"))
        summary = {
            "name": h.name,
            "source": h.source,
            "path": str(path),
            "block_size": int(head.block_size),
            "layers": int(config.get("num_hidden_layers", 0)),
            "target_layer_ids": list(head.target_layer_ids),
            "parameters": sum(p.numel() for p in head.parameters()),
            **extra,
            "numerics": numerics_record(cfg),
        }
        write_json(tmp / "head.json", summary)
        log.info(
            "head %s: block %d, reads layers %s", h.name, head.block_size, head.target_layer_ids
        )

    replace_dir(out, fill, "paths.head", expect=FILES)


#: what the head stage writes to ``paths.head``: the record, and a toy head's files
FILES = ("head.json", "config.json", "model.safetensors")


if __name__ == "__main__":
    main()
