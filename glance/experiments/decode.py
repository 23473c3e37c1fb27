"""The decode stage's work: where a run writes, the prompts' fit, the
summary of a task's rows, and the run's files as one set.

``summary.json`` holds, per row, pooled tau, ms per token, tokens per second,
the speedup over the row's baseline with its paired bootstrap interval, and
how many outputs equal the baseline's; ``tau_by_temperature`` for GLANCE;
``tree_over_chain_by_temperature``, GLANCE's tau over the chain's with a
paired bootstrap interval; and ``regime``: answer length, the tau those lengths
allow, the mean root entropy and the chain's per-offset acceptance.
``rounds.jsonl`` has one record per measured round of the drafting rows
(entropy, accepted, committed, tree size) and, line for line,
``round_ms.jsonl`` the same rounds' timings; ``outputs.jsonl`` each row's token
ids per measured prompt, under the recipe that made them.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

#: the files a decode run writes to its ``out_dir``, as one set
FILES = ("summary.json", "rounds.jsonl", "round_ms.jsonl", "outputs.jsonl")


def output_dir(cfg, task) -> Path:
    """``out_dir``, or ``results/decode/<task>``, or for a ``-m`` sweep
    ``results/sweeps/<task>/<the run's overrides>`` (:func:`sweep_folder`)."""
    if cfg.out_dir:
        return Path(cfg.out_dir)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get() if HydraConfig.initialized() else None  # None: called directly
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        return sweep_folder(Path(cfg.paths.results) / "sweeps" / task.name, hc.job.override_dirname)
    return Path(cfg.paths.results) / "decode" / task.name


#: the longest file name the file systems we run on take, in bytes
NAME_MAX = 255


def sweep_folder(base: Path, overrides: str) -> Path:
    """``base`` / one folder named by a sweep job's ``overrides`` (Hydra's
    ``override_dirname``), with ``/`` and other path characters escaped, so
    no override value (``prepare.split=../../x``, say) leaves ``base``.

    A name past :data:`NAME_MAX` bytes, which no file system would create, is
    shortened rather than refused, so that a long sweep still runs: its first
    237 characters, readable, then ``~`` and 16 hex digits of the SHA-256 of
    the whole name, so that two sweeps that differ only past the cut keep
    apart. The run's ``summary.json`` records every setting in full."""
    import hashlib
    from urllib.parse import quote

    name = quote(overrides or "base", safe="=,+-_.:@[]'\"")
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    if len(name) > NAME_MAX:  # quote leaves only ASCII: characters are bytes
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = f"{name[: NAME_MAX - 18]}~{digest}"
    return base / name


def check_positions(cfg, settings: dict, prompts: list, where: str) -> None:
    """Exit naming ``where`` and the prompt when a prompt (filler included) and
    ``max_new_tokens`` do not fit the target's positions; runs before any
    decoding."""
    from glance.experiments.settings import target_positions

    limit = target_positions(cfg)
    if limit is None:
        return
    max_new = settings["max_new_tokens"]
    for i, p in enumerate(prompts):
        if p.ids.shape[1] + max_new > limit:
            raise SystemExit(
                f"{where}, prompt {i}: {p.ids.shape[1]} prompt tokens "
                f"(context={settings['context']}) and max_new_tokens={max_new} "
                f"exceed the target's {limit} positions"
            )


def measured_rounds(rows: dict, runs: dict) -> list[dict]:
    """Every measured round of the drafting rows, prompt by prompt (the
    warm-up's are not reported), each with its prompt and row."""
    from glance.experiments.rows import KINDS

    drafting = [name for name, row in rows.items() if KINDS[row.kind].drafts]
    count = len(next(iter(runs.values())))
    return [
        {"prompt": i, "system": name, **asdict(r)}
        for i in range(1, count)
        for name in drafting
        for r in runs[name][i]["stats"].rounds
    ]


def decode_summary(cfg, task, settings: dict, rows: dict, measured: dict, *, rounds, head) -> dict:
    """``summary.json`` of one task (see the module docstring)."""
    from glance.experiments.results import regime, system_summary

    stat = (int(cfg.seed), int(cfg.decode.bootstrap))  # paired-bootstrap seed and resamples
    summary = {
        "task": task.name,
        "target": cfg.target.name,
        "head": cfg.head.name,
        "n": settings["n"],
        "budget": settings["budget"],
        "branch_k": settings["branch_k"],
        "temperature": settings["temperature"],
        "top_p": float(cfg.decode.top_p),
        "top_k": int(cfg.decode.top_k),
        "extend_budget": settings["extend_budget"],
        "extend_row": settings["extend_row"] if "glance_extend" in rows else 0,
        "timing": settings["timing"],
        "context": settings["context"],
        "max_new_tokens": settings["max_new_tokens"],
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "cap": int(head.block_size) - 1,
        "regime": regime(measured, rounds, int(head.block_size)),
        "systems": {
            s: system_summary(
                measured[s], None if r.baseline is None else measured[r.baseline], *stat
            )
            for s, r in rows.items()
        },
    }
    return summary | temperature_ratios(cfg, settings, rows, measured, summary, stat)


def temperature_ratios(cfg, settings, rows, measured, summary, stat) -> dict:
    """GLANCE's tau at each temperature, its tau over the decode temperature's,
    the extend row over plain GLANCE, and the tree over the chain."""
    from glance.experiments.results import speed_ratio, tau_ratio

    glance_rows = {f"{r.temperature:g}": s for s, r in rows.items() if s.split("@")[0] == "glance"}
    out = {
        "glance_by_temperature": glance_rows,
        "tau_by_temperature": {t: summary["systems"][s]["tau"] for t, s in glance_rows.items()},
        "tau_over_base_temperature": {
            t: tau_ratio(measured[name], measured["glance"], *stat)
            for t, name in glance_rows.items()
            if name != "glance"
        },
    }
    if "glance_extend" in measured:
        out["extend_over_plain"] = {
            "tau": tau_ratio(measured["glance_extend"], measured["glance"], *stat),
            "speed": speed_ratio(measured["glance"], measured["glance_extend"], *stat),
        }
    if cfg.chain:
        ratios = {
            t: tau_ratio(measured[name], measured[name.replace("glance", "chain", 1)], *stat)
            for t, name in glance_rows.items()
        }
        here = ratios[f"{settings['temperature']:g}"]
        out["tree_over_chain"] = here["estimate"]
        out["tree_over_chain_interval"] = here
        out["tree_over_chain_by_temperature"] = ratios
        out["speed_over_chain"] = {
            name: speed_ratio(measured["chain"], measured[name], *stat)
            for name in ("glance", "glance_auto")
            if name in measured
        }
    return out


def write_decode(out_dir, cfg, task, settings, summary, *, measured, rounds) -> None:
    """The run's four files into ``out_dir`` as one set: a killed run leaves
    the old folder or the new. Timings sit apart from ``rounds.jsonl`` (the
    law's input), so that it reproduces bit for bit."""
    from glance._io import replace_dir
    from glance.experiments.outputs import inputs_digest, write_outputs
    from glance.experiments.results import write_rounds
    from glance.experiments.settings import token_recipe
    from glance.pipeline.app import numerics_record
    from glance.pipeline.files import write_json

    timed = [k for k in (rounds[0] if rounds else {}) if k.endswith("_ms")]
    keep = ("prompt", "system")
    untimed = [{k: v for k, v in r.items() if k not in timed} for r in rounds]
    recipe = token_recipe(cfg, settings, summary["extend_row"]) | inputs_digest(cfg, task)
    ids = {s: [r["ids"] for r in runs] for s, runs in measured.items()}

    def fill(tmp: Path) -> None:
        write_rounds(tmp / "rounds.jsonl", untimed)
        write_rounds(tmp / "round_ms.jsonl", [{k: r[k] for k in (*keep, *timed)} for r in rounds])
        write_outputs(tmp / "outputs.jsonl", recipe, ids)
        write_json(tmp / "summary.json", summary | {"numerics": numerics_record(cfg)})

    replace_dir(out_dir, fill, "out_dir", expect=FILES, kind="decode")
