"""What the decoding stages share: a task's prompts and their inputs, the
decode settings and the verify costs, the head, the token recipe and the
outputs file, the sampling seeds, and the lossless gate as a stage's exit.

The stages that train or build (``target``, ``head``, ``eagle_head``) never
import this module, so a change to the decoder leaves them up to date.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from glance._io import atomic_write_text
from glance.experiments.gate import NotLossless, check_lossless
from glance.pipeline.app import log, numerics_record
from glance.pipeline.config import (
    MAX_BUDGET,
    MIN_PROMPTS,
    TIMINGS,
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


def decode_settings(cfg: DictConfig, task: DictConfig | None = None) -> dict:
    """The decode settings that run: ``budget`` (an integer in 1..MAX_BUDGET,
    or ``"auto"``), ``branch_k``, ``n``, ``context``, ``max_new_tokens`` (the
    task's own when null), ``timing``, ``temperature`` and ``extend_budget``.
    :func:`app` has checked them already; a bad value here exits naming the
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


def verify_costs(cfg: DictConfig):
    """The run's :class:`glance.core.budget.VerifyCosts`: ``target.auto_cost`` when
    the config fixes it (the auto rows then reproduce bit for bit), else a
    book that measures a target's verify cost once per stage process."""
    global _measured
    from glance.core.budget import VerifyCosts

    fixed = auto_cost(cfg)
    if fixed is not None:
        return VerifyCosts(fixed=fixed)
    if _measured is None:
        _measured = VerifyCosts()
    return _measured


_measured = None  # the process's book of measured costs


def target_positions(cfg: DictConfig) -> int | None:
    """The target's positions (its text model's ``max_position_embeddings``),
    read from its config alone; ``None`` when the config is out of reach."""
    from transformers import AutoConfig

    info = read_json(Path(cfg.paths.target) / "target.json", "run `python -m stages.target` first")
    try:
        config = AutoConfig.from_pretrained(str(info["path"]), revision=info.get("revision"))
    except (OSError, ValueError):
        return None
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def check_context(cfg: DictConfig, settings: dict) -> None:
    """Exit naming ``context`` when its filler and ``max_new_tokens`` cannot fit
    the target's positions, before any model loads or text is tokenised."""
    limit = target_positions(cfg)
    need = settings["context"] + settings.get("max_new_tokens", 0) + 1
    if limit is not None and need > limit:
        raise SystemExit(
            f"context: {settings['context']} filler tokens and max_new_tokens="
            f"{settings.get('max_new_tokens', 0)} exceed the target's {limit} positions"
        )


def load_head(cfg: DictConfig, target):
    """The head that the head stage trained or checked (``head.json``), fitted to ``target``."""
    import glance

    info = read_json(Path(cfg.paths.head) / "head.json", "run `python -m stages.head` first")
    head = glance.load_block_head(Path(info["path"]), target=target)
    return head.to(device=target.device, dtype=target.dtype)


def extend_row(cfg: DictConfig, head) -> int:
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


def token_recipe(cfg: DictConfig, settings: dict, extend: int) -> dict:
    """Everything a decode row's token ids depend on, beyond the prompt's index
    and the row's name: two runs with equal recipes give the same ids on the
    same prompts, so the audit can take the decode stage's instead of decoding
    again (``outputs.jsonl``)."""
    cost = cfg.target.get("auto_cost")
    return {
        "target": str(cfg.target.name),
        "head": str(cfg.head.name),
        "data": str(cfg.paths.data),
        "dtype": str(cfg.dtype),
        "device": str(cfg.device),
        "seed": int(cfg.seed),
        "top_p": float(cfg.decode.top_p),
        "top_k": int(cfg.decode.top_k),
        "auto_cost": None if cost is None else OmegaConf.to_container(cost),
        "extend_row": int(extend),
        "numerics": numerics_record(cfg),
        **{k: settings[k] for k in ("budget", "branch_k", "context", "extend_budget")},
        **{k: settings[k] for k in ("max_new_tokens", "temperature")},
    }


def outputs_text(recipe: dict, ids: dict) -> str:
    """``outputs.jsonl``'s text: the recipe, then one line per row and prompt
    (``ids``: row -> one token list per measured prompt, prompts numbered from 1)."""
    lines = [json.dumps({"recipe": recipe})]
    for row, prompts in ids.items():
        lines += [json.dumps({"row": row, "prompt": i, "ids": t}) for i, t in enumerate(prompts, 1)]
    return "\n".join(lines) + "\n"


def write_outputs(path, recipe: dict, ids: dict) -> None:
    """Write :func:`outputs_text` to ``path``, atomically."""
    atomic_write_text(path, outputs_text(recipe, ids))


def read_outputs(path, recipe: dict) -> dict:
    """``{(row, prompt): ids}`` from an ``outputs.jsonl`` written under
    ``recipe``; empty when the file is missing or its recipe differs."""
    from glance._io import check_set

    path = Path(path)
    if not path.is_file():
        return {}
    try:  # one decode run's set, not a file left beside another run's
        check_set(path.parent, names=(path.name,))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    with path.open(encoding="utf-8") as f:
        try:
            head = json.loads(f.readline() or "{}")
        except ValueError as err:
            raise SystemExit(f"{path}, line 1: not a recipe record ({err})") from None
        if not isinstance(head, dict):
            raise SystemExit(f"{path}, line 1: expected a recipe record; got {head!r:.60}")
        if head.get("recipe") != recipe:
            return {}
        found = {}
        for number, line in enumerate(f, 2):
            try:
                r = json.loads(line)
                ids = r["ids"]
                if not isinstance(ids, list) or any(
                    isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids
                ):
                    raise ValueError(f"ids: expected a list of token ids >= 0; got {ids!r:.60}")
                found[(str(r["row"]), int(r["prompt"]))] = ids
            except (ValueError, KeyError, TypeError) as err:
                raise SystemExit(f"{path}, line {number}: not a row record ({err})") from None
    return found


def sampling_kwargs(cfg: DictConfig, temperature: float, prompt: int) -> dict:
    """:func:`glance.experiments.rows.sampling_options` from the config's
    ``seed``, ``decode.top_p`` and ``decode.top_k``."""
    from glance.experiments.rows import sampling_options

    d = cfg.decode
    return sampling_options(int(cfg.seed), prompt, temperature, d.top_p, d.top_k)
