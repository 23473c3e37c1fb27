"""Where a kept calibration try's target misses the writer, by position in
the word (issue 43, session 12; scratch, not a stage):

    python notes/issue43/diagnose_skip.py KEPT_DIR KNOBS_JSON

On 24 held-out pages a task, per word position (first letter, second, later)
and whether a break was possible: the Pearson r of the target's entropy
against the writer's, both means, and how often the favourites agree.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from glance.toy.writer import SPACE, Knobs, Voice, row_entropy, using


def main(keep, knobs_json):
    from glance.targets.vl import load_target
    from glance.toy.soft import soft_batch
    from glance.toy.tasks import TASKS, make_example
    from glance.toy.world import Encoder, glyph_table

    torch.set_num_threads(2)
    given = json.loads(knobs_json)
    if "voices" in given:
        given["voices"] = Knobs().voices | {t: Voice(*v) for t, v in given["voices"].items()}
    target, processor = load_target(Path(keep) / "target", dtype=torch.float32)
    encoder, table = Encoder(processor.tokenizer), glyph_table()
    rng, rows = np.random.default_rng([7, 3]), []
    with using(Knobs(**given)), torch.no_grad():
        for task in TASKS:
            for _ in range(3):
                items = [
                    (ex, ex.answer, ex.marks) for ex in (make_example(task, rng) for _ in range(8))
                ]
                batch = soft_batch(encoder, items, table)
                inputs = {k: v for k, v in batch.items() if k not in ("loss_mask", "soft")}
                logits = target(**inputs).logits.float()
                logp = torch.log_softmax(logits, -1)
                ent = -(logp.exp() * logp).sum(-1)
                mask = batch["loss_mask"]
                for r, (_, text, marks) in enumerate(items):
                    start = int(mask[r].nonzero()[0])
                    for i, ids, probs in marks:
                        word = len(text[:i]) - len(text[:i].rstrip("abcdefghijklmnopqrstuvwxyz"))
                        t = start + i
                        top = int(logits[r, t].argmax() == batch["soft"][r, t].argmax())
                        rows.append(
                            (
                                float(ent[r, t]),
                                float(row_entropy(probs)),
                                min(word, 2),
                                int(SPACE in list(ids)),
                                top,
                            )
                        )
    x = np.array(rows)
    out = {"r": float(np.corrcoef(x[:, 0], x[:, 1])[0, 1])}
    for w in (0, 1, 2):
        for s in (0, 1):
            m = (x[:, 2] == w) & (x[:, 3] == s)
            if m.sum() > 10:
                out[f"word{w}_break{s}"] = {
                    "n": int(m.sum()),
                    "r": round(float(np.corrcoef(x[m, 0], x[m, 1])[0, 1]), 3),
                    "target_h": round(float(x[m, 0].mean()), 3),
                    "writer_h": round(float(x[m, 1].mean()), 3),
                    "fav": round(float(x[m, 4].mean()), 3),
                }
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2]), indent=1))
