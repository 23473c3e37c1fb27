"""What the decoding stages read from the config: the decode settings, the
verify costs, the head, the token recipe, the sampling seeds, and the
lossless gate as a stage's exit.

The stages that train heads (``head``, ``eagle_head``, ``assistant``) never
import this module, so a change to the decoder retrains no head.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from glance.experiments.gate import NotLossless, check_lossless
from glance.pipeline.app import log, numerics_record
from glance.pipeline.config import (
    MAX_BUDGET,
    MIN_PROMPTS,
    TIMINGS,
    Config,
    auto_cost,
    budget,
    integer,
    number,
)
from glance.pipeline.files import read_json


def gate(bases: dict, runs: dict, where: str, control) -> None:
    """:func:`glance.experiments.gate.check_lossless`, exiting the stage with
    its message when a lossless row left its baseline."""
    try:
        check_lossless(bases, runs, where, control)
    except NotLossless as err:
        raise SystemExit(str(err)) from None


def decode_settings(cfg: Config, task=None) -> dict:
    """The decode settings that run: ``budget`` (an integer in 1..MAX_BUDGET,
    or ``"auto"``), ``branch_k``, ``n``, ``context``, ``max_new_tokens`` (the
    task's own when null), ``timing``, ``temperature`` and ``extend_budget``.
    :func:`glance.pipeline.app.app` has checked them already; a bad value here exits naming the
    key, the value and what is allowed. Nothing is coerced."""
    out = {
        "budget": budget("budget", cfg.budget),
        "branch_k": integer("branch_k", cfg.branch_k, 1),
        "n": integer("n", cfg.n, MIN_PROMPTS),
        "context": integer("context", cfg.context, 0),
        "extend_budget": integer("extend_budget", cfg.extend_budget, 0, MAX_BUDGET),
    }
    if cfg.max_new_tokens is not None:
        out["max_new_tokens"] = integer("max_new_tokens", cfg.max_new_tokens, 1)
    elif task is not None:
        out["max_new_tokens"] = integer("task.max_new_tokens", task.max_new_tokens, 1)
    if cfg.timing not in TIMINGS:
        raise SystemExit(f"timing: expected one of {TIMINGS}; got {cfg.timing!r}")
    out["timing"] = str(cfg.timing)
    out["temperature"] = number("temperature", cfg.temperature, 0)
    return out


def verify_costs(cfg: Config):
    """The run's :class:`glance.core.budget.VerifyCosts`: ``target.auto_cost`` when
    the config fixes it (the auto rows then reproduce bit for bit), else a
    book that measures a target's verify cost once per stage process."""
    global _measured
    from glance.core.budget import VerifyCost, VerifyCosts

    fixed = auto_cost(cfg)
    if fixed is not None:
        return VerifyCosts(fixed=VerifyCost(*fixed))
    if _measured is None:
        _measured = VerifyCosts()
    return _measured


_measured = None  # the process's book of measured costs


def target_positions(cfg: Config) -> int | None:
    """The target's positions (its text model's ``max_position_embeddings``),
    read from its config alone; ``None`` when the config is out of reach (the
    target stage has not run yet: the stage then fails at loading, naming it)."""
    from transformers import AutoConfig

    record = Path(cfg.paths.target) / "target.json"
    if not record.is_file():
        return None
    info = read_json(record, "run `python -m stages.target` first")
    try:
        config = AutoConfig.from_pretrained(str(info["path"]), revision=info.get("revision"))
    except (OSError, ValueError):
        return None
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def check_context(cfg: Config, settings: dict) -> None:
    """Exit naming ``context`` when its filler and ``max_new_tokens`` cannot fit
    the target's positions, before any model loads or text is tokenised."""
    limit = target_positions(cfg)
    need = settings["context"] + settings.get("max_new_tokens", 0) + 1
    if limit is not None and need > limit:
        raise SystemExit(
            f"context: {settings['context']} filler tokens and max_new_tokens="
            f"{settings.get('max_new_tokens', 0)} exceed the target's {limit} positions"
        )


def load_head(cfg: Config, target):
    """The head that the head stage trained or checked (``head.json``), fitted to ``target``."""
    import glance

    info = read_json(Path(cfg.paths.head) / "head.json", "run `python -m stages.head` first")
    head = glance.load_block_head(Path(info["path"]), target=target)
    return head.to(device=target.device, dtype=target.dtype)


def load_scorer(cfg: Config, head, target):
    """The consistency scorer the scorer stage trained (``paths.scorer``),
    fitted to ``head`` and ``target``."""
    from glance.heads.scorer import load_scorer as load

    path = Path(cfg.paths.scorer)
    if not (path / "config.json").is_file():
        raise SystemExit(
            f"paths.scorer {path}: no scorer there; run `python -m stages.scorer` first"
        )
    return load(path, head, target)


def extend_row(cfg: Config, head) -> int:
    """``decode.extend_row`` when the head can extend (variable mask span), else 0."""
    from glance.heads.block import check_head_extends

    n = int(cfg.decode.extend_row)
    if n <= 0:
        return 0
    try:
        check_head_extends(head)
    except ValueError as err:
        log.warning("decode.extend_row=%d skipped: %s", n, err)
        return 0
    return n


def token_recipe(cfg: Config, settings: dict, extend: int) -> dict:
    """Everything a decode row's token ids depend on, beyond the prompt's index
    and the row's name: two runs with equal recipes give the same ids on the
    same prompts, so the audit can take the decode stage's instead of decoding
    again (``outputs.jsonl``)."""
    cost = cfg.target.auto_cost
    return {
        "target": str(cfg.target.name),
        "head": str(cfg.head.name),
        "data": str(cfg.paths.data),
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "seed": int(cfg.seed),
        "top_p": float(cfg.decode.top_p),
        "top_k": int(cfg.decode.top_k),
        "auto_cost": None if cost is None else asdict(cost),
        "extend_row": int(extend),
        "numerics": numerics_record(cfg),
        **{k: settings[k] for k in ("budget", "branch_k", "context", "extend_budget")},
        **{k: settings[k] for k in ("max_new_tokens", "temperature")},
    }


def greedy_recipe(cfg: Config, settings: dict, extend: int, task) -> dict:
    """The recipe of a task's greedy rows without filler at the task's answer
    length (:func:`token_recipe`, with the inputs' digests): what the audit
    checks, so the stages that decode such rows (decode, sweep) record their
    ids under it and the audit reuses them."""
    from glance.experiments.outputs import inputs_digest

    max_new = int(cfg.max_new_tokens or task.max_new_tokens)
    greedy = {"context": 0, "extend_budget": 0, "temperature": 0.0, "max_new_tokens": max_new}
    return token_recipe(cfg, settings | greedy, extend) | inputs_digest(cfg, task)


def sampling_kwargs(cfg: Config, temperature: float, prompt: int) -> dict:
    """:func:`glance.experiments.rows.sampling_options` from the config's
    ``seed``, ``decode.top_p`` and ``decode.top_k``."""
    from glance.experiments.rows import sampling_options

    d = cfg.decode
    return sampling_options(int(cfg.seed), prompt, temperature, d.top_p, d.top_k)
