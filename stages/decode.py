"""Decode one task: the autoregressive baseline, GLANCE and (with ``chain``) the
width-1 chain ablation, back to back on each prompt, in one process.

    python -m stages.decode +task=chartqa budget=63
    python -m stages.decode -m +task=docvqa budget=15,31,63,127

``n + 1`` prompts run; the first is the warm-up and is dropped
(``glance.core.metrics``). All systems run at ``temperature`` (0: greedy). Two more
kinds of row: ``glance_extend`` (GLANCE with
``extend_budget=decode.extend_row``, for a head trained with a variable mask
span) and, for each of ``decode.sampled``, ``ar@T`` and ``glance@T``, sampled
at temperature ``T`` with seeds from ``seed`` and the prompt's index. A sampled
row's outputs are compared with its own baseline's: with equal seeds the
decoders draw the same text (``glance.decoding.sampling``), so ``matches_baseline``
stays a check there too; with ``chain``, ``chain@T`` runs beside them. With
``decode.auto_row``, ``glance_auto`` runs GLANCE with ``budget="auto"``, and
``speed_over_chain`` gives each tree row's speed over the chain's with a
paired bootstrap interval.

The stage gates: every row must give its baseline's tokens on every prompt
(``glance.experiments.gate.check_lossless``). A row that differs fails the stage, naming
the task, prompt, row and first differing token, unless a second run of the
baseline on that prompt differs from the first as well (then it is logged).
Writes ``summary.json`` (per system: pooled tau, ms per token, tokens per
second, the speedup over the baseline with its paired bootstrap interval, and
how many outputs equal the baseline's; ``tau_by_temperature`` for GLANCE;
``tree_over_chain_by_temperature``, GLANCE's tau over the chain's with a paired
bootstrap interval; and ``regime``: answer length, the tau those lengths allow,
the mean root entropy and the chain's per-offset acceptance), ``rounds.jsonl``
(one record per measured round of GLANCE and the chain: entropy, accepted,
committed, tree size) and, line for line, ``round_ms.jsonl`` (the same rounds'
timings), and ``outputs.jsonl`` (each row's token ids per measured prompt,
under the recipe that made them; the audit reuses them) to ``out_dir``: by
default ``results/decode/<task>``, and for a ``-m`` sweep
``results/sweeps/<task>/<the run's overrides>``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from glance.pipeline.app import app, load_target, log, numerics_record, setup, task_config
from glance.pipeline.files import write_json
from glance.targets.vl import stop_ids
from stages.inputs import filler, prompt_inputs, task_records
from stages.prompts import (
    check_context,
    decode_settings,
    extend_row,
    gate,
    load_head,
    sampling_kwargs,
    token_recipe,
    verify_costs,
    write_outputs,
)


def inputs_digest(cfg, task) -> dict:
    """SHA-256 of what a row's ids are made from beyond the config: the task
    file, the target's record (its weights' hash, or hub name and revision),
    the head's files and ``glance``'s sources. Part of the audit's reuse recipe
    (:func:`stages.prompts.token_recipe`), so the recipe goes stale when any of
    them changes, also when a stage is run by hand outside DVC."""
    import hashlib

    def digest(paths) -> str:
        h = hashlib.sha256()
        for p in sorted(paths):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
        return h.hexdigest()

    root = Path(__file__).resolve().parent.parent
    head = json.loads((Path(cfg.paths.head) / "head.json").read_text(encoding="utf-8"))
    head_dir = Path(head["path"])
    return {
        "task_file": digest([Path(cfg.paths.data) / task.file]),
        "target": digest([Path(cfg.paths.target) / "target.json"]),
        "head": digest([*head_dir.glob("*.safetensors"), head_dir / "config.json"]),
        "glance": digest(p for p in (root / "glance").rglob("*") if p.suffix in (".py", ".c")),
    }


#: the files a decode run writes to its ``out_dir``, as one set
FILES = ("summary.json", "rounds.jsonl", "round_ms.jsonl", "outputs.jsonl")


def output_dir(cfg, task) -> Path:
    """``out_dir``, or ``results/decode/<task>``, or for a ``-m`` sweep
    ``results/sweeps/<task>/<the run's overrides>`` (:func:`sweep_folder`)."""
    if cfg.out_dir:
        return Path(cfg.out_dir)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return sweep_folder(Path(cfg.paths.results) / "sweeps" / task.name, hc.job.override_dirname)
    return Path(cfg.paths.results) / "decode" / task.name


def sweep_folder(base: Path, overrides: str) -> Path:
    """``base`` / one folder named by a sweep job's ``overrides`` (Hydra's
    ``override_dirname``), with ``/`` and other path characters escaped, so
    no override value (``prepare.split=../../x``, say) leaves ``base``."""
    from urllib.parse import quote

    name = quote(overrides or "base", safe="=,+-_.:@[]'\"")
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    return base / name


def check_positions(cfg, settings: dict, processor, prompts: list, where: str) -> None:
    """Exit naming ``where`` and the prompt when a prompt (filler included) and
    ``max_new_tokens`` do not fit the target's positions; runs before any
    decoding. ``prompts`` are the prompts' input ids."""
    from stages.prompts import target_positions

    limit = target_positions(cfg)
    if limit is None:
        return
    max_new = settings["max_new_tokens"]
    for i, ids in enumerate(prompts):
        if ids.shape[1] + max_new > limit:
            raise SystemExit(
                f"{where}, prompt {i}: {ids.shape[1]} prompt tokens "
                f"(context={settings['context']}) and max_new_tokens={max_new} "
                f"exceed the target's {limit} positions"
            )


@app
def main(cfg) -> None:
    from tqdm import tqdm

    from glance._io import check_replaceable, replace_dir
    from glance.core.metrics import drop_warmup
    from glance.experiments.results import (
        regime,
        speed_ratio,
        system_summary,
        tau_ratio,
        write_rounds,
    )
    from glance.experiments.rows import KINDS, Models, Prompt, decode_rows, gated, run

    setup(cfg)
    task = task_config(cfg)
    settings = decode_settings(cfg, task)  # before any model loads
    out_dir = output_dir(cfg, task)
    try:
        check_replaceable(out_dir, "out_dir", expect=FILES)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    check_context(cfg, settings)
    records = task_records(cfg, task, settings["n"] + 1)
    target, processor = load_target(cfg)
    head = load_head(cfg, target)
    max_new = settings["max_new_tokens"]
    tokenizer = getattr(processor, "tokenizer", processor)
    preamble = filler(settings["context"], tokenizer)
    inputs = [prompt_inputs(processor, r, cfg.paths.data, preamble) for r in records]
    check_positions(cfg, settings, processor, [ids for ids, _ in inputs], f"decode {task.name}")
    stops = stop_ids(processor, target)
    temperature, extend = settings["temperature"], extend_row(cfg, head)
    budget, branch_k = settings["budget"], settings["branch_k"]
    systems = decode_rows(
        budget,
        branch_k,
        temperature,
        extend_budget=settings["extend_budget"],
        chain=bool(cfg.chain),
        auto=bool(cfg.decode.auto_row),
        extend=extend,
        sampled=cfg.decode.sampled,
    )
    models = Models(target, head, costs=verify_costs(cfg))
    runs = {s: [] for s in systems}
    rounds = []

    def decode_one(system: str, i: int, prompt: Prompt) -> dict:
        row = systems[system]
        t = sampling_kwargs(cfg, row.temperature, i)
        return run(row, models, prompt, timing=settings["timing"], **t)

    for i, (ids, positions) in enumerate(tqdm(inputs, desc=f"decode {task.name}", unit="prompt")):
        prompt = Prompt(ids, positions, max_new, stops)
        for system, row in systems.items():
            record = decode_one(system, i, prompt)
            runs[system].append(record)
            if KINDS[row.kind].drafts and i > 0:  # the warm-up's rounds are not reported
                rounds += [
                    {"prompt": i, "system": system, **asdict(r)} for r in record["stats"].rounds
                ]
        gate(
            gated(systems),
            runs,
            f"decode {task.name}, prompt {i}",
            lambda base, i=i, prompt=prompt: decode_one(base, i, prompt)["ids"],
        )
    measured = {s: list(drop_warmup(runs[s])) for s in systems}
    stat = (int(cfg.seed), int(cfg.decode.bootstrap))  # paired-bootstrap seed and resamples
    summary = {
        "task": task.name,
        "target": cfg.target.name,
        "head": cfg.head.name,
        "n": settings["n"],
        "budget": budget,
        "branch_k": branch_k,
        "temperature": temperature,
        "top_p": float(cfg.decode.top_p),
        "top_k": int(cfg.decode.top_k),
        "extend_budget": settings["extend_budget"],
        "extend_row": extend if "glance_extend" in systems else 0,
        "timing": settings["timing"],
        "context": settings["context"],
        "max_new_tokens": max_new,
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "cap": int(head.block_size) - 1,
        "regime": regime(measured, rounds, int(head.block_size)),
        "systems": {
            s: system_summary(
                measured[s], None if r.baseline is None else measured[r.baseline], *stat
            )
            for s, r in systems.items()
        },
    }
    # GLANCE's tau at each temperature run, side by side (keys: temperatures)
    glance_rows = {
        f"{r.temperature:g}": s for s, r in systems.items() if s.split("@")[0] == "glance"
    }
    summary["glance_by_temperature"] = glance_rows
    summary["tau_by_temperature"] = {
        t: summary["systems"][name]["tau"] for t, name in glance_rows.items()
    }
    # each sampled GLANCE row's tau over the decode temperature's, paired over prompts
    summary["tau_over_base_temperature"] = {
        t: tau_ratio(measured[name], measured["glance"], *stat)
        for t, name in glance_rows.items()
        if name != "glance"
    }
    if "glance_extend" in measured:
        summary["extend_over_plain"] = {
            "tau": tau_ratio(measured["glance_extend"], measured["glance"], *stat),
            "speed": speed_ratio(measured["glance"], measured["glance_extend"], *stat),
        }
    if cfg.chain:
        ratios = {
            t: tau_ratio(measured[name], measured[name.replace("glance", "chain", 1)], *stat)
            for t, name in glance_rows.items()
        }
        summary["tree_over_chain"] = ratios[f"{temperature:g}"]["estimate"]
        summary["tree_over_chain_interval"] = ratios[f"{temperature:g}"]
        summary["tree_over_chain_by_temperature"] = ratios
        summary["speed_over_chain"] = {
            name: speed_ratio(measured["chain"], measured[name], *stat)
            for name in ("glance", "glance_auto")
            if name in measured
        }
    # timings apart, so that rounds.jsonl (the law's input) reproduces bit for bit
    timed = [k for k in (rounds[0] if rounds else {}) if k.endswith("_ms")]
    keep = ("prompt", "system")
    untimed = [{k: v for k, v in r.items() if k not in timed} for r in rounds]
    recipe = token_recipe(cfg, settings, summary["extend_row"]) | inputs_digest(cfg, task)
    ids = {s: [r["ids"] for r in measured[s]] for s in systems}

    def fill(tmp: Path) -> None:  # one set: a killed run leaves the old folder or the new
        write_rounds(tmp / "rounds.jsonl", untimed)
        write_rounds(tmp / "round_ms.jsonl", [{k: r[k] for k in (*keep, *timed)} for r in rounds])
        write_outputs(tmp / "outputs.jsonl", recipe, ids)
        write_json(tmp / "summary.json", summary | {"numerics": numerics_record(cfg)})

    replace_dir(out_dir, fill, "out_dir", expect=FILES)
    g = summary["systems"]["glance"]
    log.info(
        "%s: tau %.2f, %.2fx [%.2f, %.2f] over greedy, %d/%d outputs equal -> %s",
        task.name,
        g["tau"],
        g["speedup"]["estimate"],
        g["speedup"]["low"],
        g["speedup"]["high"],
        g["matches_baseline"],
        cfg.n,
        out_dir,
    )


if __name__ == "__main__":
    main()
