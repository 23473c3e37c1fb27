"""The target: check the shipped toy one (or retrain it), or resolve a given
checkpoint, and record it.

Writes ``<paths.target>/target.json``: where the weights are (``path``,
``revision``), the architecture, layer count, hidden size, vocabulary, dtype,
and for the toy target its weights' SHA-256 and held-out exact match. The toy
target ships in the repository (``target.path``); its hash is checked against
``target.sha256``. With ``target.retrain=true`` a new one is trained into this
folder instead, and its training log is recorded too (its wall times in
``results/timing/target.json``).
"""

from __future__ import annotations

from pathlib import Path

from glance.experiments.target import FILES, describe, shipped_toy, toy_record, vision_language
from glance.pipeline.app import app, log, numerics_record, setup
from glance.pipeline.files import refuse_unreplaceable, write_json, write_timing


@app
def main(cfg) -> None:
    from glance._io import replace_dir

    setup(cfg)
    out, t = Path(cfg.paths.target), cfg.target
    refuse_unreplaceable(out, "paths.target", FILES, "target", cfg)  # before any work
    if t.source == "pretrained" or not t.retrain:
        source = t.path if t.source == "pretrained" else shipped_toy(t)
        if Path(str(source)).resolve() == out.resolve():
            raise SystemExit(f"paths.target {out}: is target.path itself; give it its own folder")
        vision_language(describe(source, t.revision), source)

    def fill(tmp: Path) -> None:  # the record (and a retrained target), swapped in as one set
        info = toy_record(cfg, tmp, out) if t.source == "toy" else describe(t.path, t.revision)
        info |= {"name": t.name, "source": t.source, "dtype": str(cfg.dtype)}
        if "train" not in info:
            write_timing(cfg, "target", {})  # nothing trained, nothing timed
        info["numerics"] = numerics_record(cfg)
        write_json(tmp / "target.json", info)
        log.info("target %s: %s, %d layers", t.name, info["architecture"], info["layers"])

    replace_dir(out, fill, "paths.target", expect=FILES, kind="target")


if __name__ == "__main__":
    main()
