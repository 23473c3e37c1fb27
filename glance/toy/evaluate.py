"""How well the toy world's target and heads do: the target's greedy answers
scored against each task's rules, and chain and tree decoding checked against
greedy decoding. It runs GLANCE's decoder, so it lives apart from the world's
building and training code, which heads depend on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from glance.toy.tasks import TASKS
from glance.toy.world import (
    Encoder,
    answer_loss,
    conversations,
    glyph_table,
    make_batch,
    make_example_from_record,
)

__all__ = ["evaluate_decoding", "evaluate_target"]


def evaluate_target(model, processor, data_dir, n: int | None = None, tasks=TASKS) -> dict:
    """Per task (``tasks``, by default every toy task) on held-out JSONL files:
    how the target's greedy answer follows the task, and its mean answer
    entropy.

    ``copy_rate`` is the share of the answers' grounded parts (copied off the
    page) that the greedy answer reproduces exactly; ``free_legal`` the share of
    its free characters that the writer allows in their context
    (:meth:`glance.toy.writer.World.score`). Greedy decoding runs through
    :func:`glance.greedy_generate` from the processor's inputs (the real path).
    ``entropy`` is the target's mean next-token entropy over the reference
    answer's characters, teacher-forced.
    """
    from PIL import Image

    import glance
    from glance.data.tasks import read_task
    from glance.targets.vl import chat_inputs
    from glance.toy.writer import default_world

    data_dir = Path(data_dir)
    encoder = Encoder(processor.tokenizer)
    table = glyph_table()
    out = {}
    for task in tasks:
        records = read_task(data_dir / f"{task}.jsonl")[:n]
        totals = dict.fromkeys(("copied", "grounded", "allowed", "free"), 0)
        entropies, lengths = [], []
        for r in records:
            prompt, positions = chat_inputs(
                processor, r["prompt"], Image.open(data_dir / r["image"])
            )
            ids = glance.greedy_generate(
                model,
                prompt,
                len(r["answer"]) + 8,
                positions=positions,
                stop_token_ids=[encoder.end],
            )
            text = processor.tokenizer.decode(ids[0, prompt.shape[1] :], skip_special_tokens=True)
            lengths.append(len(text))
            for key, value in default_world().score(task, r["parts"], text).items():
                totals[key] += value
            example = make_example_from_record(task, r)
            with torch.no_grad():
                _, ent = answer_loss(model, make_batch(encoder, [(example, r["answer"])], table))
            entropies.append(ent[:-1].mean().item())  # answer characters, not the end token
        out[task] = {
            "n": len(records),
            "copy_rate": totals["copied"] / max(1, totals["grounded"]),
            "free_legal": totals["allowed"] / max(1, totals["free"]),
            "greedy_chars": float(np.mean(lengths)),
            "entropy": float(np.mean(entropies)),
        }
    return out


def evaluate_decoding(
    target,
    processor,
    head,
    data_dir,
    *,
    n: int,
    budget: int = 63,
    branch_k: int = 8,
    max_new_tokens: int = 160,
) -> dict:
    """Chain and tree decoding per task on held-out prompts, checked against greedy.

    Returns per task: pooled ``tau`` of the chain and of the tree, their ratio,
    the chain's per-offset acceptance (share of rounds accepting at least k
    drafted tokens), whether every output equalled greedy decoding, and the
    tree's per-round ``(entropy, accepted)`` pairs for fitting the law.
    """
    import glance
    from glance.data.tasks import read_task
    from glance.targets.vl import positions_from

    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    block = int(head.block_size)
    out = {}
    for task in TASKS:
        records = read_task(Path(data_dir) / f"{task}.jsonl")[:n]
        chain_rounds, tree_rounds, lossless = [], [], True
        for conv in conversations(records, data_dir):
            inputs = processor.apply_chat_template(
                conv,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                return_tensors="pt",
            )
            pos = positions_from(inputs)
            ids = inputs["input_ids"]
            kw = dict(positions=pos, stop_token_ids=[end], return_stats=True)
            want = glance.greedy_generate(
                target, ids, max_new_tokens, positions=pos, stop_token_ids=[end]
            )
            chain, cs = glance.chain_generate(head, target, ids, max_new_tokens, **kw)
            tree, ts = glance.generate(
                head, target, ids, max_new_tokens, budget=budget, branch_k=branch_k, **kw
            )
            lossless &= chain.tolist() == want.tolist() == tree.tolist()
            chain_rounds += cs.rounds
            tree_rounds += ts.rounds
        chain_tau = sum(r.committed for r in chain_rounds) / len(chain_rounds)
        tree_tau = sum(r.committed for r in tree_rounds) / len(tree_rounds)
        accepted = np.array([r.accepted for r in chain_rounds])
        out[task] = {
            "n": len(records),
            "chain_tau": chain_tau,
            "tree_tau": tree_tau,
            "tree_over_chain": tree_tau / chain_tau,
            "lossless": bool(lossless),
            "chain_offset_acceptance": [float((accepted >= k).mean()) for k in range(1, block)],
            # entropy, accepted, effective cap, and whether it ended without a rejection
            "rounds": [(r.entropy, r.accepted, r.cap, r.stop != "rejection") for r in tree_rounds],
        }
    return out
