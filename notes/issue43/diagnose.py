"""Where a kept calibration try's target misses the writer, and what filler
does to its answers (issue 43's tries 12 and 13; scratch, not a stage):

    python notes/issue43/diagnose.py KEPT_DIR KNOBS_JSON OUT_JSON

``KEPT_DIR`` is a ``calibrate --keep`` folder, ``KNOBS_JSON`` the try's knobs.
Writes, on 40 held-out pages a task: the Pearson r of the target's entropy at
free characters against the writer's, and against the entropy the writer
would have without ``spread``; the mean entropies and how often the target's
favourite is the writer's, where a word break is possible and where not; and
on 8 textvqa pages, how many characters of the target's greedy answer with
512 and 1536 filler tokens agree with its answer without.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from glance.toy.writer import SPACE, Knobs, Voice, row_entropy, sharpen, using


def main(keep: Path, knobs_json: str, out: Path) -> dict:
    import glance
    from glance.targets.vl import chat_inputs, filler, load_target
    from glance.toy.soft import soft_batch
    from glance.toy.tasks import ALPHABET, TASKS, make_example, render
    from glance.toy.world import Encoder, glyph_table

    torch.set_num_threads(2)
    given = json.loads(knobs_json)
    if "voices" in given:
        voices = {
            t: Voice(**v) if isinstance(v, dict) else Voice(*v) for t, v in given["voices"].items()
        }
        given["voices"] = Knobs().voices | voices
    given.pop("tilt", None)
    target, processor = load_target(keep / "target", dtype=torch.float32)
    encoder, table = Encoder(processor.tokenizer), glyph_table()
    rng, rows = np.random.default_rng([7, 3]), []
    with using(Knobs(**given)) as world, torch.no_grad():
        for task in TASKS:
            base = sharpen(world.base, world.voice(task).beta)
            for _ in range(5):
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
                        a, b = (ALPHABET.index(c) for c in text[max(0, i - 2) : i].rjust(2))
                        plain = base.probs[a, b]
                        space = SPACE in list(ids)
                        if space:
                            plain = np.append(plain * (1 - probs[-1]), probs[-1])
                        t = start + i
                        top = int(logits[r, t].argmax() == batch["soft"][r, t].argmax())
                        rows.append((float(ent[r, t]), float(row_entropy(probs)),
                                     float(row_entropy(plain)), int(space), top))  # fmt: skip
        x = np.array(rows)
        out_d = {"r": float(np.corrcoef(x[:, 0], x[:, 1])[0, 1])}
        for s, name in ((0, "no_break"), (1, "break")):
            m = x[:, 3] == s
            out_d[name] = {
                "n": int(m.sum()),
                "r": float(np.corrcoef(x[m, 0], x[m, 1])[0, 1]),
                "r_without_spread": float(np.corrcoef(x[m, 0], x[m, 2])[0, 1]),
                "target_entropy": float(x[m, 0].mean()),
                "writer_entropy": float(x[m, 1].mean()),
                "favourite_agrees": float(x[m, 4].mean()),
            }
        end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
        pages = [make_example("textvqa", np.random.default_rng([1000, i])) for i in range(8)]
        answers = {}
        for context in (0, 512, 1536):
            answers[context] = []
            for ex in pages:
                text = filler(context, processor.tokenizer) + ex.prompt
                ids, pos = chat_inputs(processor, text, render(ex.lines))
                got = glance.greedy_generate(target, ids, 160, positions=pos, stop_token_ids=[end])
                answers[context].append(processor.tokenizer.decode(got[0, ids.shape[1] :]))
        out_d["filler_char_agreement"] = {
            str(c): float(
                np.mean(
                    [
                        np.mean([p == q for p, q in zip(a, b, strict=False)])
                        for a, b in zip(answers[0], answers[c], strict=True)
                    ]
                )
            )  # fmt: skip
            for c in (512, 1536)
        }
    out.write_text(json.dumps(out_d, indent=1) + "\n")
    return out_d


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])), indent=1))
