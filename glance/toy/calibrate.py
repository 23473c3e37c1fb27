"""Predict where a setting of the world's knobs puts each task, in minutes.

``python -m glance.toy calibrate`` trains a short soft-labelled target
(:mod:`glance.toy.soft`), answers a small corpus with it, trains a short
DFlash head on that corpus, and decodes a few prompts a task with the chain
and GLANCE at budget 63, checking both against greedy decoding. It prints each
task's chain and GLANCE tau, the spread of the rounds' root entropy, and the
minutes each part took. Not used by any stage (issue 43); its tries are
recorded in ``docs/world.md``.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from glance.toy.config import TrainConfig
from glance.toy.writer import Knobs, using

__all__ = ["Short", "calibrate"]


@dataclass(frozen=True)
class Short:
    """The short run's sizes: target steps (from the reader ``target.init``),
    corpus prompts (greedy and sampled), head steps, and prompts decoded a task."""

    target: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=300,
            batch=16,
            lr=2e-3,
            warmup=30,
            long_every=4,
            context=1536,
            eval_every=0,
            init="models/toy-reader",
        )
    )
    greedy: int = 160
    sampled: int = 160
    heldout: int = 16
    head_steps: int = 2000
    n: int = 20
    budget: int = 63
    context: int = 1536
    context_share: float = 0.25
    seed: int = 0


def _root_spread(entropies) -> dict:
    """Mean root entropy and its IQR as the pipeline's regime table has them
    (0.0 where no round is above the floor)."""
    from glance.experiments.results import root_entropy_iqr

    h = np.asarray(entropies, dtype=np.float64)
    return {"root_entropy": float(h.mean()), "root_iqr": root_entropy_iqr(h) or 0.0}


def _law(rounds) -> dict:
    """The law fitted to tree rounds ``(entropy, accepted, cap, censored)``
    as :mod:`glance.toy.__main__`'s ``evaluate`` fits it."""
    from glance.core.law import DraftabilityLaw

    entropy, accepted, cap, censored = np.array(rounds, dtype=np.float64).T
    accepted = np.minimum(accepted, cap)
    law = DraftabilityLaw.fit(
        entropy, accepted.astype(int), cap=cap.astype(int), censored=censored.astype(bool)
    )
    return {
        "b0": round(law.b0, 3),
        "b1": round(law.b1, 3),
        "holds": bool(law.holds()[0]),
        "r2_decile": round(law.r2_decile, 3),
    }


def _context_tau(target, processor, head, data, *, n: int, contexts, budget: int) -> dict:
    """GLANCE's tau on textvqa's first ``n`` prompts with each of ``contexts``
    filler tokens before the question, checked against greedy decoding."""
    from PIL import Image

    import glance
    from glance.data.tasks import read_task
    from glance.targets.vl import chat_inputs, filler

    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    records = read_task(Path(data) / "textvqa.jsonl")[:n]
    out = {}
    for context in contexts:
        committed = rounds = 0
        for r in records:
            text = filler(context, processor.tokenizer) + r["prompt"]
            ids, pos = chat_inputs(processor, text, Image.open(Path(data) / r["image"]))
            kw = dict(positions=pos, stop_token_ids=[end])
            want = glance.greedy_generate(target, ids, 160, **kw)
            got, stats = glance.generate(
                head, target, ids, 160, budget=budget, branch_k=8, return_stats=True, **kw
            )
            if got.tolist() != want.tolist():
                raise AssertionError(f"context {context}: GLANCE differs from greedy")
            committed += sum(x.committed for x in stats.rounds)
            rounds += len(stats.rounds)
        out[str(context)] = round(committed / rounds, 3)
    return out


def calibrate(
    knobs: Knobs | None = None, short: Short | None = None, progress=True, keep=None
) -> dict:
    """One calibration try: returns the knobs, per task ``chain_tau``,
    ``glance_tau``, their ratio, ``lossless`` and the root-entropy spread,
    the target's entropy agreement, and the seconds of each part. With
    ``keep``, a folder, the try's target and head are saved there (``target/``,
    ``head/``) for a closer look."""
    knobs, short = knobs or Knobs(), short or Short()
    with using(knobs):
        return _calibrate(knobs, short, progress, keep)


def _calibrate(knobs: Knobs, short: Short, progress, keep) -> dict:
    from glance.toy.config import HeadTrain
    from glance.toy.evaluate import evaluate_decoding
    from glance.toy.processor import save_processor
    from glance.toy.soft import fit_target
    from glance.toy.tasks import TASKS, write_task
    from glance.toy.world import toy_corpus
    from glance.training.block import HeadConfig, train_head

    seconds, clock = {}, time.perf_counter()
    target, processor, tlog = fit_target(short.target, progress=progress)
    seconds["target"] = time.perf_counter() - clock

    clock = time.perf_counter()
    train = HeadTrain(
        block_size=16,
        layers=1,
        steps=short.head_steps,
        mask_span="variable",
        lr=2e-3,
        greedy=short.greedy,
        sampled=short.sampled,
        long_share=0.05,
        context=short.context,
        context_share=short.context_share,
        heldout=short.heldout,
        max_new_tokens=704,
        seed=short.seed,
    )
    sequences, probe, _ = toy_corpus(target, processor, **train.corpus())
    seconds["corpus"] = time.perf_counter() - clock

    clock = time.perf_counter()
    mask = processor.tokenizer.convert_tokens_to_ids("<|mask|>")
    with tempfile.TemporaryDirectory() as work:
        head, hlog = train_head(
            *(target, sequences, mask, HeadConfig.from_run(train)),
            heldout=probe,
            progress=progress,
            features="offline",
            work_dir=work,
        )
    seconds["head"] = time.perf_counter() - clock

    clock = time.perf_counter()
    with tempfile.TemporaryDirectory() as data:
        for task in TASKS:
            write_task(task, short.n, data, seed=1000 + short.seed)
        decoding = evaluate_decoding(target, processor, head, data, n=short.n, budget=short.budget)
        contexts = (0, 512, short.context) if short.context else ()
        textvqa = _context_tau(
            target, processor, head, data, n=8, contexts=contexts, budget=short.budget
        )
    seconds["decode"] = time.perf_counter() - clock
    if keep is not None:
        target.save_pretrained(Path(keep) / "target")
        save_processor(processor, Path(keep) / "target")
        head.save_pretrained(Path(keep) / "head")
    tasks, pooled = {}, []
    for task, d in decoding.items():
        rounds = d.pop("rounds")
        pooled += rounds
        tasks[task] = {
            "chain_tau": round(d["chain_tau"], 3),
            "glance_tau": round(d["tree_tau"], 3),
            "glance_over_chain": round(d["tree_over_chain"], 3),
            "lossless": d["lossless"],
        } | {k: round(v, 3) for k, v in _root_spread([r[0] for r in rounds]).items()}
        tasks[task]["law"] = _law(rounds)
        tasks[task]["rounds"] = [
            [round(float(h), 4), int(a), int(c), bool(s)] for h, a, c, s in rounds
        ]
    curve = hlog.get("heldout_curve") or []
    return {
        "knobs": asdict(knobs),
        "tasks": tasks,
        "law": _law(pooled),
        "context_tau": textvqa,
        "entropy_r": round(tlog["agreement"]["r"], 4),
        "head_heldout": curve[-3:],
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "minutes": round(sum(seconds.values()) / 60, 2),
    }


def main(
    knobs_json: str | None,
    out: Path | None,
    sizes_json: str | None = None,
    progress=True,
    keep: Path | None = None,
) -> dict:
    """The command's body: knobs from a JSON object (``Knobs``' fields, voices
    as ``{"task": [words, letters, beta]}``), sizes from another (``Short``'s
    fields, ``target_steps`` for the target's, ``target`` for any of its
    :class:`~glance.toy.config.TrainConfig` fields), the result printed and written."""
    from dataclasses import replace

    from glance.toy.writer import Voice

    given = json.loads(knobs_json) if knobs_json else {}
    if "voices" in given:
        base = Knobs().voices
        given["voices"] = base | {t: Voice(*v) for t, v in given["voices"].items()}
    sizes = json.loads(sizes_json) if sizes_json else {}
    short = Short()
    for key, name in (("target_steps", "steps"), ("init", "init")):
        if key in sizes:
            short = replace(short, target=replace(short.target, **{name: sizes.pop(key)}))
    if "target" in sizes:  # any TrainConfig field of the short target
        short = replace(short, target=replace(short.target, **sizes.pop("target")))
    short = replace(short, **sizes)
    torch.set_num_threads(2)
    result = calibrate(Knobs(**given), short, progress=progress, keep=keep)
    result["sizes"] = asdict(short)
    if out:
        from glance._io import atomic_write_text

        rounds = {t: v.pop("rounds") for t, v in result["tasks"].items()}
        atomic_write_text(out, json.dumps(result, indent=2) + "\n")
        atomic_write_text(Path(out).with_suffix(".rounds.json"), json.dumps(rounds) + "\n")
    else:
        for v in result["tasks"].values():
            v.pop("rounds")
    return result
