"""The losslessness audit: GLANCE (and the chain) against greedy decoding,
bitwise, at float32.

On ``audit.n`` prompts per task the target decodes greedily twice (the control:
does greedy agree with itself on this machine?), then with GLANCE, with the
chain, and (for a head trained with a variable mask span) with GLANCE plus
``extend_budget=decode.extend_row``. A prompt's verdict is ``equal`` when every
output equals the first greedy one, ``control_differs`` when greedy already
disagrees with itself (so a mismatch there says nothing about GLANCE), and
``MISMATCH`` otherwise. Writes ``results/audit.json`` with every verdict, then
fails (exit 1) if any prompt is a ``MISMATCH``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import open_dict

from glance.metrics import audit_verdict
from glance.vl import stop_ids
from stages.common import (
    app,
    decode_settings,
    extend_row,
    load_head,
    load_target,
    log,
    prompt_inputs,
    setup,
    task_by_name,
    task_records,
    verify_costs,
    write_json,
)


@app
def main(cfg) -> None:
    import glance

    setup(cfg)
    settings = decode_settings(cfg)  # before any model loads
    with open_dict(cfg):
        cfg.dtype = "float32"  # the audit's contract: bitwise at fp32, whatever decode used
    target, processor = load_target(cfg)
    head = load_head(cfg, target)
    stops = stop_ids(processor, target)
    extend = extend_row(cfg, head)
    prompts, tasks = [], {}
    for name in cfg.tasks:
        task = task_by_name(name)
        records = task_records(cfg, task, int(cfg.audit.n))
        rows = []
        for i, record in enumerate(records):
            ids, positions = prompt_inputs(processor, record, cfg.paths.data)
            max_new = int(cfg.max_new_tokens or task.max_new_tokens)
            kw = dict(positions=positions, stop_token_ids=stops)

            def new(out, n=ids.shape[1]):
                return out[0, n:].tolist()

            greedy = new(glance.greedy_generate(target, ids, max_new, **kw))
            control = new(glance.greedy_generate(target, ids, max_new, **kw))
            tree = dict(
                budget=settings["budget"], branch_k=settings["branch_k"], costs=verify_costs(), **kw
            )
            others = {
                "glance": new(glance.generate(head, target, ids, max_new, **tree)),
                "chain": new(glance.chain_generate(head, target, ids, max_new, **kw)),
            }
            if extend:
                others["glance_extend"] = new(
                    glance.generate(head, target, ids, max_new, extend_budget=extend, **tree)
                )
            v = audit_verdict(greedy, control, others)
            rows.append(
                {
                    "prompt": i,
                    "verdict": v,
                    "new_tokens": len(greedy),
                    "control_equal": control == greedy,
                    **{f"{k}_equal": o == greedy for k, o in others.items()},
                }
            )
            prompts.append(v)
        tasks[name] = rows
    summary = {
        "dtype": "float32",
        "budget": settings["budget"],
        "branch_k": settings["branch_k"],
        "extend_budget": extend,
        "prompts": len(prompts),
        "equal": prompts.count("equal"),
        "control_differs": prompts.count("control_differs"),
        "mismatch": prompts.count("MISMATCH"),
        "tasks": tasks,
    }
    write_json(Path(cfg.paths.results) / "audit.json", summary)
    log.info(
        "audit: %d prompts, %d equal, %d control differs, %d mismatches",
        summary["prompts"],
        summary["equal"],
        summary["control_differs"],
        summary["mismatch"],
    )
    if summary["mismatch"]:
        bad = [
            f"{t}#{r['prompt']}"
            for t, rows in tasks.items()
            for r in rows
            if r["verdict"] == "MISMATCH"
        ]
        log.error("LOSSLESSNESS BROKEN: output differs from greedy at %s", ", ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
