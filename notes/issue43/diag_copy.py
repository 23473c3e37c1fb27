"""Where a toy target's teacher-forced copies fail: per task, top-1 on grounded
characters by distance since the last free character (4: four or more, or
before any free character), on 30 held-out pages.

    python notes/issue43/diag_copy.py TARGET_DIR [TASK ...]
"""

import collections
import sys

import numpy as np
import torch

from glance.targets.vl import load_target
from glance.toy.tasks import TASKS, make_example
from glance.toy.world import Encoder, glyph_table, make_batch


def main(folder, tasks):
    torch.set_num_threads(2)
    model, processor = load_target(folder, dtype=torch.float32)
    model.eval()
    encoder, table = Encoder(processor.tokenizer), glyph_table()
    rng = np.random.default_rng([7, 3])
    for task in tasks or TASKS:
        stats = collections.defaultdict(lambda: [0, 0])
        for _ in range(30):
            ex = make_example(task, rng)
            free = {m[0] for m in ex.marks}
            batch = make_batch(encoder, [(ex, ex.answer)], table)
            with torch.no_grad():
                inputs = {k: v for k, v in batch.items() if k != "loss_mask"}
                logits = model(**inputs).logits[0]
            start = int(batch["loss_mask"][0].nonzero()[0])
            pred = logits[start : start + len(ex.answer)].argmax(-1)
            ids = batch["input_ids"][0, start + 1 : start + 1 + len(ex.answer)]
            since = 99
            for i in range(len(ex.answer)):
                if i in free:
                    since = 0
                    continue
                since += 1
                count = stats[min(since, 4)]
                count[0] += int(pred[i] == ids[i])
                count[1] += 1
        print(task, {k: (round(a / n, 3), n) for k, (a, n) in sorted(stats.items())}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
