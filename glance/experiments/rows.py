"""The row registry: every kind of row a stage runs, in one table.

A *row* is one decoding setup in a comparison (:class:`Row`): its kind, its
baseline (the row it must equal when the kind is lossless, and is timed
against), its temperature and its options (``budget``, ``branch_k``,
``extend_budget``, ``accept``, ...). :data:`KINDS` maps each kind to the call
that runs it, whether it is lossless (so the gate checks it), and whether it
drafts (so it reports rounds). :func:`run` runs one row on one prompt and
returns the run record every stage and summary reads. A new arm is one entry
in :data:`KINDS`.

The run record: ``ids`` (the new tokens), ``ms`` (the decode-only window of
GLANCE's loop, or the wall time of a foreign loop), ``wall_ms`` (end to end),
``new_tokens``, ``committed`` and ``rounds`` (tau's counts; ``rounds`` is
``None`` for a row that does not draft), ``draft_ms`` (mean per round, or
``None``) and ``stats`` (GLANCE's :class:`~glance.decoding.loop.Stats`, or
``None``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "KINDS",
    "Kind",
    "Models",
    "Prompt",
    "Row",
    "audit_rows",
    "decode_rows",
    "gated",
    "run",
    "sampling_options",
]


@dataclass(frozen=True)
class Models:
    """What rows run with: the target, and the drafters' models where a row
    needs them (the block head, the EAGLE-style head, the assistant model,
    the consistency scorer), and ``budget="auto"``'s book of measured verify costs."""

    target: object
    head: object = None
    eagle: object = None
    assistant: object = None
    costs: object = None
    scorer: object = None


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``(1, n)`` ids, its positions, the cap on new tokens and
    the stop ids."""

    ids: object
    positions: object
    max_new: int
    stops: list


@dataclass(frozen=True)
class Row:
    """A row: ``kind`` (a key of :data:`KINDS`), the ``baseline`` row's name
    (``None`` for a baseline), ``temperature``, and the call's ``options``."""

    kind: str
    baseline: str | None = None
    temperature: float = 0.0
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row kind: expected one of {sorted(KINDS)}; got {self.kind!r}")

    @property
    def lossless(self) -> bool:
        """Whether the gate holds this row to its baseline's output."""
        return KINDS[self.kind].lossless and self.baseline is not None


@dataclass(frozen=True)
class Kind:
    """How to run a kind of row: ``call(models, prompt, options)`` returns
    ``(new ids, stats or None, (committed, rounds) or None)``."""

    call: Callable
    lossless: bool
    drafts: bool


def _glance_kw(prompt: Prompt) -> dict:
    return dict(positions=prompt.positions, stop_token_ids=prompt.stops, return_stats=True)


def _new(out, prompt: Prompt) -> list[int]:
    return out[0, prompt.ids.shape[1] :].tolist()


def _greedy(models: Models, prompt: Prompt, options: dict):
    import glance

    kw = _glance_kw(prompt)
    out, stats = glance.greedy_generate(models.target, prompt.ids, prompt.max_new, **kw, **options)
    return _new(out, prompt), stats, None


def _chain(models: Models, prompt: Prompt, options: dict):
    import glance

    kw = _glance_kw(prompt)
    out, stats = glance.chain_generate(
        models.head, models.target, prompt.ids, prompt.max_new, **kw, **options
    )
    return _new(out, prompt), stats, None


def _tree(drafter, models: Models, prompt: Prompt, options: dict):
    import glance

    kw = _glance_kw(prompt)
    options = {"costs": models.costs, **options}
    out, stats = glance.generate(
        drafter, models.target, prompt.ids, prompt.max_new, **kw, **options
    )
    return _new(out, prompt), stats, None


def _glance(models: Models, prompt: Prompt, options: dict):
    return _tree(models.head, models, prompt, options)


def _scored(models: Models, prompt: Prompt, options: dict):
    options = {k: v for k, v in options.items() if k != "branch_k"}  # the scorer's top_k
    return _tree(models.head, models, prompt, {**options, "scorer": models.scorer})


def _eagle(models: Models, prompt: Prompt, options: dict):
    from glance.drafters.eagle import EagleDrafter

    options = dict(options)
    width, depth = options.pop("width"), options.pop("depth")
    drafter = EagleDrafter(models.eagle, models.target, width, depth)
    return _tree(drafter, models, prompt, options)


def _two_model(models: Models, prompt: Prompt, options: dict):
    from glance.drafters.small import SmallModelDrafter

    options = dict(options)
    depth = options.pop("depth")
    drafter = SmallModelDrafter(models.assistant, prompt.positions, depth)
    return _tree(drafter, models, prompt, {"budget": depth, **options})


def _dflash_chain(models: Models, prompt: Prompt, options: dict):
    from glance.experiments.baselines import dflash_generate

    new, counts = dflash_generate(
        models.head, models.target, prompt.ids, prompt.positions, prompt.max_new, prompt.stops
    )
    return new, None, counts


def _hf(models: Models, prompt: Prompt, options: dict):
    from glance.experiments.baselines import hf_generate

    new = hf_generate(
        models.target, prompt.ids, prompt.positions, prompt.max_new, prompt.stops, **options
    )
    return new, None, None


#: every kind of row: the call, lossless or not, drafts or not
KINDS: dict[str, Kind] = {
    "ar": Kind(_greedy, lossless=True, drafts=False),
    "glance": Kind(_glance, lossless=True, drafts=True),
    "chain": Kind(_chain, lossless=True, drafts=True),
    # the block head's tree ranked by the consistency scorer (a fixed budget)
    "scored": Kind(_scored, lossless=True, drafts=True),
    "eagle": Kind(_eagle, lossless=True, drafts=True),
    "two_model": Kind(_two_model, lossless=True, drafts=True),
    # GLANCE's tree walked with a LOSSY rule (options: accept=<rule>)
    "relaxed": Kind(_glance, lossless=False, drafts=True),
    # foreign loops: timed end to end, not gated here
    "dflash_chain": Kind(_dflash_chain, lossless=False, drafts=True),
    "hf": Kind(_hf, lossless=False, drafts=False),
}


def run(row: Row, models: Models, prompt: Prompt, **extra) -> dict:
    """Run ``row`` on ``prompt``; ``extra`` joins the row's options (sampling
    keywords, ``timing``, a budget override). Returns the run record (see the
    module docstring)."""
    kind = KINDS[row.kind]
    start = time.perf_counter()
    new, stats, counts = kind.call(models, prompt, {**row.options, **extra})
    wall = (time.perf_counter() - start) * 1e3
    if stats is None:  # a foreign loop: its wall time, and its own counts
        committed, rounds = counts if counts is not None else (None, None)
        return {
            "ids": new,
            "ms": wall,
            "wall_ms": wall,
            "new_tokens": len(new),
            "committed": committed,
            "rounds": rounds,
            "draft_ms": None,
            "stats": None,
        }
    drafts = kind.drafts
    rounds = stats.rounds
    return {
        "ids": new,
        "ms": stats.ms_per_token * stats.new_tokens,
        "wall_ms": wall,
        "new_tokens": stats.new_tokens,
        "committed": sum(r.committed for r in rounds),
        "rounds": len(rounds) if drafts else None,
        "draft_ms": sum(r.draft_ms for r in rounds) / len(rounds) if drafts and rounds else None,
        "stats": stats,
    }


def gated(rows: dict) -> dict:
    """``{name: baseline}`` of the lossless rows in ``rows`` (name -> :class:`Row`):
    what :func:`glance.experiments.gate.check_lossless` holds them to."""
    return {name: row.baseline for name, row in rows.items() if row.lossless}


def decode_rows(
    budget,
    branch_k: int,
    temperature: float,
    *,
    extend_budget: int = 0,
    chain: bool = True,
    auto: bool = False,
    extend: int = 0,
    sampled=(),
    scored: bool = False,
) -> dict:
    """The decode stage's rows by name: ``ar`` (greedy, or sampled at
    ``temperature``) and ``glance`` at ``budget``; ``chain`` with ``chain``;
    ``glance_auto`` with ``auto`` (unless ``budget`` is already ``"auto"``);
    ``glance_scored`` (the consistency scorer's tree) with ``scored`` at a
    fixed ``budget``;
    ``glance_extend`` at ``extend`` extra nodes (unless ``extend_budget``
    already extends ``glance``); and ``ar@t``, ``glance@t`` (and ``chain@t``)
    for each other temperature ``t`` of ``sampled``."""
    tree = {"budget": budget, "branch_k": branch_k, "extend_budget": extend_budget}
    rows = {"ar": Row("ar", None, temperature), "glance": Row("glance", "ar", temperature, tree)}
    if chain:
        rows["chain"] = Row("chain", "ar", temperature)
    if auto and budget != "auto":
        rows["glance_auto"] = Row("glance", "ar", temperature, {**tree, "budget": "auto"})
    if extend and not extend_budget:
        rows["glance_extend"] = Row("glance", "ar", temperature, {**tree, "extend_budget": extend})
    if scored and budget != "auto":
        rows["glance_scored"] = Row("scored", "ar", temperature, {"budget": budget})
    for t in (float(t) for t in sampled):
        if f"{t:g}" != f"{temperature:g}":
            rows[f"ar@{t:g}"] = Row("ar", None, t)
            rows[f"glance@{t:g}"] = Row("glance", f"ar@{t:g}", t, tree)
            if chain:
                rows[f"chain@{t:g}"] = Row("chain", f"ar@{t:g}", t)
    return rows


def audit_rows(
    budget,
    branch_k: int,
    sweep_budgets=(),
    temperatures=(),
    extend=0,
    auto=False,
    *,
    scored=(),
):
    """The audit's rows by name, all at float32 against a baseline run twice:
    greedy ``ar``; ``glance`` at ``budget``, ``glance_auto`` (with ``auto``,
    unless ``budget`` is ``"auto"``), ``chain``, ``glance_extend`` (with
    ``extend`` extra nodes), ``glance@N=n`` for each of ``sweep_budgets``;
    ``glance_scored`` at each budget of ``scored`` (the first named plainly,
    the others ``glance_scored@N=n``); and ``ar@t``, ``glance@t``,
    ``chain@t`` for each sampled temperature."""
    tree = {"budget": budget, "branch_k": branch_k}
    rows = {"ar": Row("ar"), "glance": Row("glance", "ar", options=tree)}
    if auto and budget != "auto":
        rows["glance_auto"] = Row("glance", "ar", options={**tree, "budget": "auto"})
    rows["chain"] = Row("chain", "ar")
    if extend:
        rows["glance_extend"] = Row("glance", "ar", options={**tree, "extend_budget": extend})
    for n in sweep_budgets:
        rows[f"glance@N={n}"] = Row("glance", "ar", options={**tree, "budget": n})
    for i, n in enumerate(scored):
        name = "glance_scored" if i == 0 else f"glance_scored@N={n}"
        rows[name] = Row("scored", "ar", options={"budget": int(n)})
    for t in temperatures:
        rows[f"ar@{t:g}"] = Row("ar", None, t)
        rows[f"glance@{t:g}"] = Row("glance", f"ar@{t:g}", t, tree)
        rows[f"chain@{t:g}"] = Row("chain", f"ar@{t:g}", t)
    return rows


def sampling_options(seed: int, prompt: int, temperature: float, top_p=1.0, top_k=0) -> dict:
    """A row's sampling keywords on prompt number ``prompt``: none at
    temperature 0; otherwise ``top_p``, ``top_k`` and a CPU generator seeded
    from ``seed`` and ``prompt``, so a rerun draws the same text and every row
    at one temperature draws the same uniforms on a prompt."""
    if float(temperature) == 0:
        return {}
    import torch

    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(prompt))
    return dict(temperature=float(temperature), top_p=float(top_p), top_k=int(top_k), generator=g)
