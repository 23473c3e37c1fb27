"""The training corpus: the target answers the corpus recipe (``conf/corpus/``).

    python -m stages.corpus                                   # the toy world's
    python -m stages.corpus target=qwen3_vl_8b corpus=cauldron_localized_narratives device=cuda

Writes ``paths.corpus`` as ``datasets`` Arrow shards (see
:mod:`glance.training.corpus`), one shard at a time: a killed run started
again continues after its last finished shard, and a shard made by another
target or recipe is made again, never reused. The run's wall time goes to
``results/timing/corpus.json`` (a rerun that reuses every shard is quick).
"""

from __future__ import annotations

import time
from pathlib import Path

from glance.pipeline.app import app, load_target, log, setup
from glance.pipeline.files import read_json, refuse_unreplaceable, write_timing
from glance.pipeline.limits import check_corpus_positions


@app
def main(cfg) -> None:
    from glance.pipeline.training import make_corpus, target_dir
    from glance.training.corpus import NAMES, CorpusError, check_corpus_folder

    check_corpus_positions(cfg)  # from the target's config.json, before any weight loads
    setup(cfg)
    refuse_unreplaceable(cfg.paths.corpus, "paths.corpus", NAMES, "corpus", cfg)
    try:  # before any model loads: nothing of the user's is ever removed
        check_corpus_folder(cfg.paths.corpus, "paths.corpus")
    except CorpusError as err:
        raise SystemExit(str(err)) from None
    info = read_json(Path(cfg.paths.target) / "target.json", "run the target stage first")
    if cfg.corpus.source == "toy" and info["source"] != "toy":
        raise SystemExit("corpus.source: toy prompts need the toy target; pick a datasets corpus")
    target, processor = load_target(cfg)
    start = time.perf_counter()
    index = make_corpus(cfg, target, processor, target_dir(info))
    write_timing(cfg, "corpus", {"answer_seconds": time.perf_counter() - start})
    log.info("corpus %s: %s answers", cfg.corpus.name, index["rows"])


if __name__ == "__main__":
    main()
