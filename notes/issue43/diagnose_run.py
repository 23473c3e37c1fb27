"""Where a target's entropy misses the writer's, by task and by position in
a free run (issue 43, session 13; scratch, not a stage):

    python notes/issue43/diagnose_run.py TARGET_DIR [PAGES] [CONTEXT]

On ``PAGES`` held-out pages a task (teacher-forced on the writer's answers,
drawn from ``[7, 3]``): per task, per task's first free letter and the rest,
and per position in the run (first, middle, last), the Pearson r of the
target's entropy against the writer's, both means, the target's mass on the
characters the writer allows (``inside``), KL(writer || target) over them,
and how often the favourites agree. ``CONTEXT`` (default 0): filler tokens
before every question, as the context sweep puts them. Per task,
``grounded_top1`` is the share of grounded answer tokens the target's
favourite gets right (a misread under filler shows there).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from glance.toy.writer import SPACE, SYMBOLS, row_entropy


def _rows(target_dir, pages, context=0):
    from glance.targets.vl import load_target
    from glance.toy.soft import soft_batch
    from glance.toy.tasks import TASKS, make_example
    from glance.toy.world import Encoder, glyph_table

    target, processor = load_target(Path(target_dir), dtype=torch.float32)
    encoder, table = Encoder(processor.tokenizer), glyph_table()
    symbol_ids = torch.tensor(encoder.tokenizer.convert_tokens_to_ids(list(SYMBOLS)))
    rng, rows, grounded = np.random.default_rng([7, 3]), [], {}
    with torch.no_grad():
        for ti, task in enumerate(TASKS):
            for _ in range(pages // 8):
                examples = [make_example(task, rng) for _ in range(8)]
                items = [(ex, ex.answer, ex.marks) for ex in examples]
                batch = soft_batch(encoder, items, table, [context] * 8 if context else None)
                inputs = {k: v for k, v in batch.items() if k not in ("loss_mask", "soft")}
                logp = torch.log_softmax(target(**inputs).logits.float(), -1)
                ent = -(logp.exp() * logp).sum(-1)
                mask = batch["loss_mask"]
                nxt = torch.roll(batch["input_ids"], -1, dims=1)
                hit = (logp.argmax(-1) == nxt) & mask.bool()
                for r, (_, _, marks) in enumerate(items):
                    start = int(mask[r].nonzero()[0])
                    free = torch.zeros_like(mask[r], dtype=torch.bool)
                    free[[start + i for i, _, _ in marks]] = True
                    keep = mask[r].bool() & ~free
                    g = grounded.setdefault(task, [0, 0])
                    g[0], g[1] = g[0] + int(hit[r][keep].sum()), g[1] + int(keep.sum())
                    prev, k = -2, 0
                    for n, (i, ids, probs) in enumerate(marks):
                        k = k + 1 if i == prev + 1 else 0
                        last = n + 1 == len(marks) or marks[n + 1][0] != i + 1
                        prev = i
                        lp = logp[r, start + i]
                        allowed = symbol_ids[torch.as_tensor(list(ids))]
                        q = torch.as_tensor(probs, dtype=torch.float32)
                        kl = float((q * (q.clamp_min(1e-12).log() - lp[allowed])).sum())
                        fav = int(lp.argmax()) == int(allowed[int(q.argmax())])
                        rows.append(
                            (
                                ti,
                                k,
                                int(last),
                                int(SPACE in list(ids)),
                                float(ent[r, start + i]),
                                float(row_entropy(probs)),
                                float(lp[allowed].exp().sum()),
                                kl,
                                int(fav),
                            )
                        )
    return TASKS, np.array(rows), {t: round(a / b, 4) for t, (a, b) in grounded.items()}


def main(target_dir, pages=32, context=0):
    torch.set_num_threads(2)
    tasks, x, grounded = _rows(target_dir, pages, context)

    def summary(m):
        return {
            "n": int(m.sum()),
            "r": round(float(np.corrcoef(x[m, 4], x[m, 5])[0, 1]), 3),
            "target_h": round(float(x[m, 4].mean()), 3),
            "writer_h": round(float(x[m, 5].mean()), 3),
            "inside": round(float(x[m, 6].mean()), 3),
            "kl": round(float(x[m, 7].mean()), 3),
            "favourite_agrees": round(float(x[m, 8].mean()), 3),
        }

    out = {"all": summary(np.ones(len(x), bool))}
    for ti, task in enumerate(tasks):
        out[task] = summary(x[:, 0] == ti) | {"grounded_top1": grounded[task]}
        out[task + " first"] = summary((x[:, 0] == ti) & (x[:, 1] == 0))
        out[task + " rest"] = summary((x[:, 0] == ti) & (x[:, 1] > 0))
    first, last = x[:, 1] == 0, x[:, 2] == 1
    out["first"], out["middle"], out["last"] = (
        summary(first),
        summary(~first & ~last),
        summary(last),
    )
    out["break allowed"], out["no break"] = summary(x[:, 3] == 1), summary(x[:, 3] == 0)
    return out


if __name__ == "__main__":
    pages = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    context = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    print(json.dumps(main(sys.argv[1], pages, context), indent=1))
