"""torch.compile, measured: greedy, transformers' ``generate`` and GLANCE's
default, each eager and compiled, on ``bench.cost_task``.

    dvc repro stages/arms/dvc.yaml:compile
    python -m stages.compile bench.cost_n=3

Rows run interleaved on ``bench.n`` prompts after a warm-up that compiles
(:mod:`glance.experiments.compiled`). Writes ``results/compile.json`` and
``results/compile.md``.
"""

from __future__ import annotations

from pathlib import Path

from glance.pipeline.app import app, log, setup, task_by_name, timing_record
from glance.pipeline.files import write_set


@app
def main(cfg) -> None:
    from glance.experiments.compiled import compile_bench, compile_markdown
    from glance.experiments.session import open_session

    setup(cfg)
    task, n = task_by_name(cfg.bench.cost_task), int(cfg.bench.n)
    s = open_session(cfg, inputs=[(task, n + 1)])
    result = compile_bench(s, task, n, int(cfg.seed), int(cfg.decode.bootstrap))
    machine, line = timing_record(cfg)
    tables = {"compile.md": f"{line}\n\n{compile_markdown(result)}"}
    write_set(Path(cfg.paths.results), "compile.json", result | {"numerics": machine}, tables)
    log.info("compile:\n%s", tables["compile.md"])


if __name__ == "__main__":
    main()
