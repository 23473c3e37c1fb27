"""Issue 30's study: train a consistency scorer behind a finished run's head,
then decode with and without it, and with the EAGLE-style head, at one budget.

    python notes/issue30/scorer_study.py RUN STEPS RANK TOP_K PROMPTS OUT.json

RUN is a folder holding a finished pipeline run (models/, data/). The scorer
is saved next to OUT and reused when it is there. Every output is checked
against greedy. Single runs, no intervals: the pipeline's arms stage gives
those; this picks the scorer's settings.
"""

import json
import sys
import time
from pathlib import Path

from glance.core.numerics import Numerics, pin

pin(Numerics(threads=2), reexec=True)

import torch  # noqa: E402
from PIL import Image  # noqa: E402

import glance  # noqa: E402
import glance.toy.processor  # noqa: E402, F401
from glance.drafters.eagle import EagleDrafter  # noqa: E402
from glance.heads.eagle import load_eagle_head  # noqa: E402
from glance.heads.scorer import load_scorer  # noqa: E402
from glance.targets.vl import chat_inputs, load_target, stop_ids  # noqa: E402
from glance.training.corpus import Corpus  # noqa: E402
from glance.training.scorer import ScorerTrain, train_scorer  # noqa: E402

TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa")


def main(run: Path, steps: int, rank: int, top_k: int, n: int, out: Path, budget: int = 32):
    torch.set_num_threads(2)
    target, processor = load_target(run / "models/toy-target", dtype=torch.float32)
    head = glance.load_block_head(run / "models/head", target=target)
    eagle = load_eagle_head(run / "models/eagle-head", target=target)
    saved = out.with_suffix(".scorer")
    if saved.is_dir():
        scorer, log = load_scorer(saved, head, target), json.loads((saved / "log.json").read_text())
    else:
        vocab = target.config.get_text_config().vocab_size
        train, held = (
            Corpus(run / "data/corpus", part, processor=processor, vocab_size=vocab)
            for part in ("train", "heldout")
        )
        start = time.time()
        cfg = ScorerTrain(rank=rank, top_k=top_k, steps=steps)
        scorer, log = train_scorer(
            head, target, train, cfg, heldout=held, eval_every=max(1, steps // 10), progress=False
        )
        log["seconds"] = time.time() - start
        scorer.save_pretrained(saved)
        (saved / "log.json").write_text(json.dumps(log))
    keys = ("marginal_heldout_loss", "heldout_curve", "seconds")
    print("trained", json.dumps({k: log.get(k) for k in keys}), flush=True)
    stops = stop_ids(processor, target)
    result = {"train": log, "budget": budget, "tasks": {}}
    for task in TASKS:
        lines = (run / f"data/tasks/{task}.jsonl").read_text().splitlines()[1 : n + 1]
        tokens = dict.fromkeys(("plain", "scored", "eagle"), 0)
        rounds, ms, equal = dict(tokens), dict.fromkeys(tokens, 0.0), 0
        for line in lines:
            rec = json.loads(line)
            with Image.open(run / "data/tasks" / rec["image"]) as im:
                ids, pos = chat_inputs(processor, rec["prompt"], im.convert("RGB"))
            kw = dict(positions=pos, stop_token_ids=stops, return_stats=True)
            ref, _ = glance.greedy_generate(target, ids, 256, **kw)  # before kw takes a budget
            kw |= {"budget": budget}
            outs = {
                "plain": glance.generate(head, target, ids, 256, **kw),
                "scored": glance.generate(head, target, ids, 256, scorer=scorer, **kw),
                "eagle": glance.generate(
                    EagleDrafter(eagle, target, 8, 16), target, ids, 256, **kw
                ),
            }
            equal += all(torch.equal(o, ref) for o, _ in outs.values())
            for key, (_, stats) in outs.items():
                tokens[key] += stats.new_tokens
                rounds[key] += len(stats.rounds)
                ms[key] += stats.ms_per_token * stats.new_tokens
        tau = {k: tokens[k] / rounds[k] for k in tokens}
        row = {f"tau_{k}": v for k, v in tau.items()}
        row |= {f"ms_{k}": ms[k] / tokens[k] for k in tokens}
        row |= {"scored_over_plain": tau["scored"] / tau["plain"]}
        row |= {"scored_over_eagle": tau["scored"] / tau["eagle"], "equal": equal, "n": len(lines)}
        result["tasks"][task] = row
        print(task, json.dumps(row), flush=True)
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(Path(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]), Path(a[5]))
