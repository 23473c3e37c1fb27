"""Speed side by side: GLANCE against what a user would otherwise run.

Rows, all on the same prompts in one process, interleaved prompt by prompt
(A B C ... A B C ...) so that machine drift falls on every row alike:

* ``hf_greedy``: ``target.generate(do_sample=False)``, the baseline;
* ``hf_prompt_lookup``: ``target.generate(prompt_lookup_num_tokens=...)``, the
  strongest draft-free method (it copies from the text prompt, never the image);
* ``dflash_chain``: ``dflash.model.dflash_generate``, the package's own chain,
  with the same head (its target calls get the image inputs and M-RoPE rows);
* ``glance_greedy``, ``glance_chain``, ``glance_tree`` (``budget``),
  ``glance_auto`` (``budget="auto"``) and ``glance_extend`` (``budget`` plus
  ``extend_budget=decode.extend_row``; only for a head trained with a variable
  mask span).

Every row is timed the same way, with the device synchronised, in two windows:
``end_to_end`` (wall clock around the whole call, prefill included) and
``decode_only`` (that minus the prompt's time to first token, measured once per
prompt with ``target.generate`` for one token, so every row loses the same
prefill). One aggregation throughout: pooled time over pooled tokens, after
the warm-up prompt. Per task and row: tau where it applies, ms per token and
tokens per second in each window, the speedup over ``hf_greedy`` and
``glance_tree``'s speedup over the row, each a ratio of pooled times with a
paired bootstrap interval over prompts, and peak memory (the CUDA allocator's
peak; nothing off CUDA). Then the cost curves: verify-pass time against tree
size, ms per token against output length (``decode_only``, pooled), and the
host share of a round against the budget. Writes ``results/bench.json`` and
``results/bench.md``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from glance.experiments.timing import prefill_ms, timed_run
from glance.pipeline.app import app, load_target, log, numerics_record, setup, task_by_name
from glance.pipeline.files import write_set
from glance.targets.vl import stop_ids
from stages.inputs import prompt_inputs, task_records
from stages.prompts import decode_settings, extend_row, load_head, verify_costs


def bench_rows(cfg, extend: int) -> dict:
    """The bench's rows (:class:`glance.experiments.rows.Row`) by name."""
    from glance.experiments.rows import Row

    tree = {"budget": decode_settings(cfg)["budget"], "branch_k": int(cfg.branch_k)}
    rows = {
        "hf_greedy": Row("hf"),
        "hf_prompt_lookup": Row(
            "hf", options={"prompt_lookup_num_tokens": int(cfg.bench.lookup_tokens)}
        ),
        "dflash_chain": Row("dflash_chain"),
        "glance_greedy": Row("ar"),
        "glance_chain": Row("chain"),
        "glance_tree": Row("glance", options=tree),
        "glance_auto": Row("glance", options={**tree, "budget": "auto"}),
        "glance_extend": Row("glance", options={**tree, "extend_budget": extend}),
    }
    return rows if extend else {k: v for k, v in rows.items() if k != "glance_extend"}


def length_curve(cfg, target, head, processor) -> dict:
    """ms per token (decode_only window) at each output length, with no stop token.

    A length the target's ``max_position_embeddings`` cannot hold after the
    prompt is cut to what it can, and ``new_tokens`` records what ran."""
    import glance

    task = task_by_name(cfg.bench.length_task)
    records = task_records(cfg, task, int(cfg.bench.length_n) + 1)
    out = {
        "task": task.name,
        "lengths": list(cfg.bench.lengths),
        "new_tokens": [],
        "glance_tree": [],
        "glance_greedy": [],
        "glance_tree_round_ms": [],
        "glance_tree_tau": [],
    }
    prompts = [prompt_inputs(processor, r, cfg.paths.data) for r in records]
    room = target.config.get_text_config().max_position_embeddings
    room -= max(ids.shape[1] for ids, _ in prompts)
    for asked in cfg.bench.lengths:
        length = min(int(asked), room)
        out["new_tokens"].append(length)
        per = {"glance_tree": [], "glance_greedy": []}
        for ids, positions in prompts:
            for row in per:
                if row == "glance_tree":
                    _, stats = glance.generate(
                        head,
                        target,
                        ids,
                        int(length),
                        budget=decode_settings(cfg)["budget"],
                        branch_k=int(cfg.branch_k),
                        positions=positions,
                        return_stats=True,
                        costs=verify_costs(cfg),
                    )
                else:
                    _, stats = glance.greedy_generate(
                        target, ids, int(length), positions=positions, return_stats=True
                    )
                per[row].append(stats)
        for row, values in per.items():  # the first prompt is the warm-up; pooled
            ms = sum(st.ms_per_token * st.new_tokens for st in values[1:])
            out[row].append(ms / sum(st.new_tokens for st in values[1:]))
        # Separates cost from acceptance: a round's time, and tokens per round.
        rounds = [r for st in per["glance_tree"][1:] for r in st.rounds]
        out["glance_tree_round_ms"].append(
            float(np.mean([r.draft_ms + r.verify_ms + r.host_ms for r in rounds]))
        )
        out["glance_tree_tau"].append(sum(r.committed for r in rounds) / len(rounds))
    return out


def budget_curve(cfg, target, head, processor) -> dict:
    """Per budget: mean tree size, verify ms, draft ms, host ms and host share of a round."""
    import glance
    from glance.core.budget import AUTO_SIZES

    task = task_by_name(cfg.bench.cost_task)
    records = task_records(cfg, task, int(cfg.bench.cost_n) + 1)
    max_new = int(cfg.max_new_tokens or task.max_new_tokens)
    stops = stop_ids(processor, target)
    inputs = [prompt_inputs(processor, r, cfg.paths.data) for r in records]
    rows = []
    for budget in AUTO_SIZES:
        rounds = []
        for i, (ids, positions) in enumerate(inputs):
            _, stats = glance.generate(
                head,
                target,
                ids,
                max_new,
                budget=budget,
                branch_k=int(cfg.branch_k),
                positions=positions,
                stop_token_ids=stops,
                return_stats=True,
            )
            if i > 0:
                rounds += stats.rounds
        draft = float(np.mean([r.draft_ms for r in rounds]))
        verify = float(np.mean([r.verify_ms for r in rounds]))
        host = float(np.mean([r.host_ms for r in rounds]))
        rows.append(
            {
                "budget": budget,
                "tree_size": float(np.mean([r.tree_size for r in rounds])),
                "tau": sum(r.committed for r in rounds) / len(rounds),
                "draft_ms": draft,
                "verify_ms": verify,
                "host_ms": host,
                "tree_ms": float(np.mean([r.tree_ms for r in rounds])),
                "host_share": host / (draft + verify + host),
            }
        )
    return {"task": task.name, "rows": rows}


@app
def main(cfg) -> None:
    from tqdm import tqdm

    from glance.experiments.results import bench_summary
    from glance.experiments.rows import Models, Prompt
    from glance.reporting.report import bench_markdown

    setup(cfg)
    decode_settings(cfg)  # bad settings fail before any model loads
    target, processor = load_target(cfg)
    head = load_head(cfg, target)
    stops = stop_ids(processor, target)
    rows = bench_rows(cfg, extend_row(cfg, head))
    models = Models(target, head, costs=verify_costs(cfg))
    result = {
        "target": cfg.target.name,
        "device": str(target.device),
        "dtype": str(cfg.dtype),
        "budget": decode_settings(cfg)["budget"],
        "branch_k": int(cfg.branch_k),
        "extend_budget": int(cfg.decode.extend_row) if "glance_extend" in rows else 0,
        "n": int(cfg.bench.n),
        "aggregation": "pooled time over pooled tokens, after the warm-up prompt",
        "windows": {
            "end_to_end": "wall clock around the whole call, prefill included",
            "decode_only": "end_to_end minus the prompt's time to first token "
            "(median of 3 target.generate calls for one token)",
        },
        "peak_memory": "CUDA allocator peak above the call's start; null off CUDA",
        "tasks": {},
    }
    for name in cfg.bench.tasks:
        task = task_by_name(name)
        max_new = int(cfg.max_new_tokens or task.max_new_tokens)
        runs, prefill = {row: [] for row in rows}, []
        records = task_records(cfg, task, int(cfg.bench.n) + 1)
        for record in tqdm(records, desc=f"bench {name}", unit="prompt"):
            ids, positions = prompt_inputs(processor, record, cfg.paths.data)
            prefill.append(prefill_ms(target, ids, positions, stops))
            prompt = Prompt(ids, positions, max_new, stops)
            for row in rows:  # interleaved: every row on this prompt, then the next prompt
                runs[row].append(timed_run(rows[row], models, prompt))
        result["tasks"][name] = bench_summary(
            runs, prefill, int(cfg.seed), int(cfg.decode.bootstrap)
        )
    result["length_curve"] = length_curve(cfg, target, head, processor)
    result["budget_curve"] = budget_curve(cfg, target, head, processor)
    results = Path(cfg.paths.results)
    # the cost curves as tables, for `dvc plots`
    cost = ["tree_size,verify_ms,draft_ms,host_ms,host_share"] + [
        f"{r['tree_size']:.6g},{r['verify_ms']:.6g},{r['draft_ms']:.6g},{r['host_ms']:.6g},"
        f"{r['host_share']:.6g}"
        for r in result["budget_curve"]["rows"]
    ]
    lc = result["length_curve"]
    length = ["new_tokens,glance_tree_ms_per_token,glance_greedy_ms_per_token,glance_tree_round_ms"]
    length += [
        f"{n},{t:.6g},{g:.6g},{r:.6g}"
        for n, t, g, r in zip(
            lc["new_tokens"],
            lc["glance_tree"],
            lc["glance_greedy"],
            lc["glance_tree_round_ms"],
            strict=True,
        )
    ]
    others = {
        "bench.md": bench_markdown(result),
        "verify_cost.csv": "\n".join(cost) + "\n",
        "length_curve.csv": "\n".join(length) + "\n",
    }
    write_set(results, "bench.json", result | {"numerics": numerics_record(cfg)}, others)
    log.info("bench:\n%s", bench_markdown(result))


if __name__ == "__main__":
    main()
