"""The speed bench's work: its rows, its header, the cost curves and the tables.

The stage (``stages/bench.py``) runs every row on the same prompts,
interleaved, timed in two windows (:mod:`glance.experiments.timing`), and
aggregates with :func:`glance.experiments.results.bench_summary`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def bench_rows(cfg, extend: int, best: int | None = None) -> dict:
    """The bench's rows (:class:`glance.experiments.rows.Row`) by name;
    ``glance_best`` (GLANCE at ``best``, the task's best fixed budget in its
    sweep) when ``best`` is given."""
    from glance.experiments.rows import Row
    from glance.experiments.settings import decode_settings

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
    if best is not None:
        rows["glance_best"] = Row("glance", options={**tree, "budget": int(best)})
    return rows if extend else {k: v for k, v in rows.items() if k != "glance_extend"}


def best_budget(cfg, task: str) -> int:
    """The fixed budget with the highest speedup in ``task``'s sweep
    (``results/sweep/<task>/summary.json``); exits naming the file when the
    sweep has not run or holds no budget."""
    from glance.pipeline.files import read_json

    path = Path(cfg.paths.results) / "sweep" / task / "summary.json"
    try:
        budgets = read_json(path, f"run the sweep first: dvc repro sweep@{task}").get("budgets")
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(str(err)) from None
    if not budgets:
        raise SystemExit(f"{path}: 'budgets' is empty; expected the sweep's fixed budgets")
    return int(max(budgets, key=lambda b: budgets[b]["speedup"]["estimate"]))


def bench_inputs(cfg) -> list:
    """``(task, prompts)`` of every task file the bench reads."""
    from glance.pipeline.app import task_by_name

    b = cfg.bench
    pairs = [(name, int(b.n) + 1) for name in b.tasks]
    pairs += [(b.length_task, int(b.length_n) + 1), (b.cost_task, int(b.cost_n) + 1)]
    return [(task_by_name(name), n) for name, n in pairs]


def length_curve(session) -> dict:
    """ms per token (decode_only window) at each output length, with no stop token.

    A length the target's ``max_position_embeddings`` cannot hold after the
    prompt is cut to what it can, and ``new_tokens`` records what ran."""
    import glance
    from glance.experiments.settings import decode_settings, verify_costs
    from glance.pipeline.app import task_by_name

    cfg, target, head = session.cfg, session.target, session.head
    task = task_by_name(cfg.bench.length_task)
    prompts = [(p.ids, p.positions) for p in session.prompts(task, int(cfg.bench.length_n) + 1)]
    out = {
        "task": task.name,
        "lengths": list(cfg.bench.lengths),
        "new_tokens": [],
        "glance_tree": [],
        "glance_greedy": [],
        "glance_tree_round_ms": [],
        "glance_tree_tau": [],
    }
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


def budget_curve(session) -> dict:
    """Per budget: mean tree size, verify ms, draft ms, host ms and host share of a round."""
    import glance
    from glance.core.budget import AUTO_SIZES
    from glance.pipeline.app import task_by_name

    cfg, target, head = session.cfg, session.target, session.head
    task = task_by_name(cfg.bench.cost_task)
    prompts = session.prompts(task, int(cfg.bench.cost_n) + 1)
    rows = []
    for budget in AUTO_SIZES:
        rounds = []
        for i, p in enumerate(prompts):
            _, stats = glance.generate(
                head,
                target,
                p.ids,
                p.max_new,
                budget=budget,
                branch_k=int(cfg.branch_k),
                positions=p.positions,
                stop_token_ids=p.stops,
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


#: the context cost curve's rows: greedy, the chain, GLANCE as a user gets it,
#: and GLANCE with the head reading only the latest :data:`DRAFT_WINDOW` positions
CONTEXT_ROWS = ("glance_greedy", "glance_chain", "glance_auto", "glance_auto_window")

#: the draft context window of the ``glance_auto_window`` row: the question and
#: the answer so far on the toy tasks, without the filler before them
DRAFT_WINDOW = 256


def context_cost(session) -> dict:
    """Per context length of ``context_sweep.lengths`` (filler tokens before
    the question, on ``context_sweep.task``): each of :data:`CONTEXT_ROWS`'s
    outputs equal to greedy's (``same_as_greedy``), ms per token
    (``decode_only``, pooled over ``bench.cost_n`` prompts after a warm-up) and
    its round split into draft, verify (the target pass and the walk) and host
    ms per round (a greedy step is all verify), with tau.
    A length whose prompts and answers do not fit the target's positions is
    skipped, and ``skipped`` names it."""
    from glance.experiments.rows import Row, run
    from glance.pipeline.app import task_by_name

    cfg = session.cfg
    task = task_by_name(cfg.context_sweep.task)
    rows = {
        "glance_greedy": Row("ar"),
        "glance_chain": Row("chain"),
        "glance_auto": Row("glance", options={"budget": "auto", "branch_k": int(cfg.branch_k)}),
    }
    rows["glance_auto_window"] = Row(
        "glance", options={**rows["glance_auto"].options, "draft_window": DRAFT_WINDOW}
    )
    room = session.target.config.get_text_config().max_position_embeddings
    out = {"task": task.name, "n": int(cfg.bench.cost_n), "draft_window": DRAFT_WINDOW}
    out |= {"lengths": [], "skipped": [], "rows": {}}
    out["rows"] = {name: [] for name in rows}
    for context in (int(c) for c in cfg.context_sweep.lengths):
        prompts = session.prompts(task, int(cfg.bench.cost_n) + 1, context=context)
        if any(p.ids.shape[1] + p.max_new > room for p in prompts):
            out["skipped"].append(context)
            continue
        out["lengths"].append(context)
        greedy = None
        for name, row in rows.items():
            runs = [run(row, session.models, p) for p in prompts][1:]
            greedy = greedy or [r["ids"] for r in runs]
            stats = [r["stats"] for r in runs]
            rounds = [r for st in stats for r in st.rounds]
            tokens = sum(st.new_tokens for st in stats)
            out["rows"][name].append(
                {
                    "context": context,
                    "same_as_greedy": sum(r["ids"] == g for r, g in zip(runs, greedy, strict=True)),
                    "prompt_tokens": int(np.mean([p.ids.shape[1] for p in prompts[1:]])),
                    "ms_per_token": sum(st.ms_per_token * st.new_tokens for st in stats) / tokens,
                    "tau": sum(r.committed for r in rounds) / len(rounds),
                    "draft_ms": float(np.mean([r.draft_ms for r in rounds])),
                    "verify_ms": float(np.mean([r.verify_ms for r in rounds])),
                    "host_ms": float(np.mean([r.host_ms for r in rounds])),
                }
            )
    return out


def bench_header(cfg, session, rows: dict) -> dict:
    """``bench.json``'s settings and its definitions of the windows."""
    from glance.experiments.settings import decode_settings

    return {
        "target": cfg.target.name,
        "device": str(session.target.device),
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
        "compared_with": "glance_auto",
        "best_budget": {},
        "tasks": {},
    }


def bench_task(session, rows: dict, task, n: int) -> dict:
    """Every row on ``n`` + 1 prompts of ``task``, interleaved (every row on a
    prompt, then the next prompt), with each prompt's prefill time; returns
    the task's :func:`~glance.experiments.results.bench_summary`."""
    from tqdm import tqdm

    from glance.experiments.results import bench_summary
    from glance.experiments.timing import prefill_ms, timed_run

    runs, prefill = {row: [] for row in rows}, []
    for p in tqdm(session.prompts(task, n + 1), desc=f"bench {task.name}", unit="prompt"):
        prefill.append(prefill_ms(session.target, p.ids, p.positions, p.stops))
        for row in rows:
            runs[row].append(timed_run(rows[row], session.models, p))
    cfg = session.cfg
    return bench_summary(runs, prefill, int(cfg.seed), int(cfg.decode.bootstrap))


def bench_tables(result: dict) -> dict:
    """``bench.md`` and the cost curves as CSV tables, for ``dvc plots``."""
    from glance.reporting.report import bench_markdown

    cost = ["tree_size,verify_ms,draft_ms,host_ms,host_share"] + [
        f"{r['tree_size']:.6g},{r['verify_ms']:.6g},{r['draft_ms']:.6g},{r['host_ms']:.6g},"
        f"{r['host_share']:.6g}"
        for r in result["budget_curve"]["rows"]
    ]
    lc = result["length_curve"]
    keys = ("new_tokens", "glance_tree", "glance_greedy", "glance_tree_round_ms")
    length = ["new_tokens,glance_tree_ms_per_token,glance_greedy_ms_per_token,glance_tree_round_ms"]
    length += [
        f"{n},{t:.6g},{g:.6g},{r:.6g}" for n, t, g, r in zip(*(lc[k] for k in keys), strict=True)
    ]
    context = ["context,row,ms_per_token,tau,draft_ms,verify_ms,host_ms"]
    for row, points in result["context_cost"]["rows"].items():
        context += [
            f"{x['context']},{row},{x['ms_per_token']:.6g},{x['tau']:.6g},{x['draft_ms']:.6g},"
            f"{x['verify_ms']:.6g},{x['host_ms']:.6g}"
            for x in points
        ]
    return {
        "bench.md": bench_markdown(result),
        "verify_cost.csv": "\n".join(cost) + "\n",
        "length_curve.csv": "\n".join(length) + "\n",
        "context_cost.csv": "\n".join(context) + "\n",
    }
