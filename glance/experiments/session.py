"""A decoding stage's working set: the target, its processor, the head, the
task prompts, and the loop that runs a set of rows on them with the gate.

:func:`open_session` loads what ``target.json`` and ``head.json`` name;
:meth:`Session.prompts` reads a task's records into :class:`Prompt` s;
:meth:`Session.decode` runs rows on every prompt, interleaved prompt by prompt,
and gates every lossless row against its baseline after each prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glance.experiments.rows import Models, Prompt, gated, run
from glance.experiments.settings import gate, load_head, load_scorer, sampling_kwargs, verify_costs


@dataclass
class Session:
    cfg: object
    target: object
    processor: object
    models: Models
    stops: list[int] = field(default_factory=list)

    @property
    def head(self):
        return self.models.head

    def prompts(self, task, count: int, context: int = 0, max_new: int | None = None) -> list:
        """The first ``count`` prompts of ``task`` (the first is the warm-up),
        after ``context`` filler tokens, each to decode ``max_new`` tokens
        (the task's own, or the config's ``max_new_tokens``, when ``None``)."""
        from glance.data.inputs import filler, prompt_inputs, task_records

        cfg = self.cfg
        if max_new is None:
            max_new = int(cfg.max_new_tokens or task.max_new_tokens)
        preamble = filler(context, getattr(self.processor, "tokenizer", self.processor))
        records = task_records(cfg.paths.data, task, count)
        return [
            Prompt(*prompt_inputs(self.processor, r, cfg.paths.data, preamble), max_new, self.stops)
            for r in records
        ]

    def run(self, row, prompt: Prompt, i: int, **extra) -> dict:
        """``row`` on ``prompt`` number ``i`` (its sampling seed), with ``extra`` options."""
        cfg = self.cfg
        return run(row, self.models, prompt, **sampling_kwargs(cfg, row.temperature, i), **extra)

    def decode(self, rows: dict, prompts: list, where: str, after=None, **extra) -> dict:
        """Every row on every prompt, interleaved; after each prompt the
        lossless rows are gated against their baselines (a second baseline run
        is the control), then ``after(prompt, runs)`` runs. Returns row -> run
        records, the warm-up first."""
        from tqdm import tqdm

        runs = {name: [] for name in rows}
        for i, prompt in enumerate(tqdm(prompts, desc=where, unit="prompt")):
            for name, row in rows.items():
                runs[name].append(self.run(row, prompt, i, **extra))

            def control(base, i=i, prompt=prompt):
                return self.run(rows[base], prompt, i, **extra)["ids"]

            gate(gated(rows), runs, f"{where}, prompt {i}", control)
            if after is not None:
                after(prompt, runs)
        return runs


def open_session(cfg, models=None, inputs=(), scorer: bool = False) -> Session:
    """The target and processor the target stage resolved, the head the head
    stage made (with ``scorer``, the scorer stage's consistency scorer too),
    and the verify costs ``budget="auto"`` plans with;
    ``models(target)``, when given, builds the :class:`Models` instead, for
    stages that run more drafters. ``inputs`` are the ``(task, count)`` pairs
    the stage will read: each task file and its images are checked first, so a
    missing file or image fails, naming it, before any model loads."""
    from glance.data.inputs import task_records
    from glance.pipeline.app import load_target
    from glance.targets.vl import stop_ids

    for task, count in inputs:
        task_records(cfg.paths.data, task, count)
    target, processor = load_target(cfg)
    if models is None:
        head = load_head(cfg, target)
        extra = {"scorer": load_scorer(cfg, head, target)} if scorer else {}
        models = Models(target, head, costs=verify_costs(cfg), **extra)
    else:
        models = models(target)
    return Session(cfg, target, processor, models, stop_ids(processor, target))
