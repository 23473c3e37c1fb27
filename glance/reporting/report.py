"""The paper's tables and panels, drawn from the stages' JSON outputs.

Tables come back as ``(data, markdown)``; panels are drawn with the
``matplotlib.pyplot`` module the caller passes (with the backend it chose) and
saved atomically. ``stages/figures.py`` reads the inputs and writes the files.
Needs numpy, and matplotlib for the panels.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from glance._io import _umask

__all__ = [
    "arms_markdown",
    "scorer_lines",
    "bench_markdown",
    "heads_markdown",
    "arms_panel",
    "budget_panel",
    "context_panel",
    "cost_curves",
    "law_panel",
    "main_table",
    "regime_table",
    "sampling_table",
    "save_figure",
    "seeds_table",
    "tree_over_chain_panel",
]


def save_figure(fig, path) -> None:
    """Save ``fig`` as a PNG at ``path`` atomically, with the umask's mode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=130, bbox_inches="tight")
        os.chmod(tmp, 0o666 & ~_umask())  # as a plain open() would, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _num(x, digits: int = 2) -> str:
    """A figure for a label; NaN (written to JSON as null) shows as n/a."""
    return "n/a" if x is None else f"{x:.{digits}f}"


def main_table(summaries: dict) -> tuple[dict, str]:
    """Per task: the baseline's ms per token, then tau and speedup over it for
    the chain, GLANCE and GLANCE with ``budget="auto"``, and GLANCE against the
    chain: the tau ratio and the speed ratio of GLANCE and of auto. Every
    comparison carries its paired bootstrap interval over prompts; no
    across-task mean is shown, since none has one."""
    systems = ("chain", "glance", "glance_auto")
    rows = {}
    for task, s in summaries.items():
        row = {"ar": {"tau": 1.0, "ms_per_token": s["systems"]["ar"]["ms_per_token"]}}
        for system in systems:
            if system in s["systems"]:
                x = s["systems"][system]
                row[system] = {"tau": x["tau"], "speedup": x["speedup"]}
        row["tree_over_chain"] = s.get("tree_over_chain_interval")
        row["speed_over_chain"] = s.get("speed_over_chain", {})
        rows[task] = row

    def cell(row, system):
        if system not in row:
            return "n/a | n/a"
        return f"{row[system]['tau']:.2f} | {_interval(row[system]['speedup'])}"

    def ratio(x):
        return _interval(x) if x else "n/a"

    first = next(iter(summaries.values()))
    window = {"decode_only": "decode (prefill excluded)", "legacy": "prefill included"}
    lines = [
        f"Measured by the decode stage on `{first['target']}` ({first['device']}, "
        f"{first['dtype']}), budget {first['budget']}, branch_k {first['branch_k']}, "
        f"{first['n']} prompts per task after a warm-up. One window, "
        f"{window.get(first['timing'], first['timing'])}; every speedup divides the task's "
        "own AR run's time (on the same prompts, in the same process) by the row's, with a "
        "95% paired bootstrap interval over prompts.",
        "",
        "| task | AR ms/token | chain tau | chain speedup | GLANCE tau | GLANCE speedup | "
        "auto tau | auto speedup | GLANCE over chain, tau | GLANCE over chain, speed | "
        "auto over chain, speed |",
        "|---" * 11 + "|",
    ]
    for task, row in rows.items():
        over = row["speed_over_chain"]
        lines.append(
            f"| {task} | {row['ar']['ms_per_token']:.2f} | {cell(row, 'chain')} | "
            f"{cell(row, 'glance')} | {cell(row, 'glance_auto')} | "
            f"{ratio(row['tree_over_chain'])} | {ratio(over.get('glance'))} | "
            f"{ratio(over.get('glance_auto'))} |"
        )
    return {"tasks": rows}, "\n".join(lines) + "\n"


def regime_table(summaries: dict) -> tuple[dict, str]:
    """Where each task sits (issue: a world where drafting is the bottleneck):
    answer length, the highest tau those lengths allow, the target's mean root
    entropy and its interquartile range over rounds above 0.05 nats, the
    chain's and GLANCE's tau, GLANCE's share of the ceiling, the
    tree/chain tau ratio with its paired interval, and the chain's per-offset
    acceptance at offsets 1, 2, 4, 8 and 15."""
    rows = {}
    for task, s in summaries.items():
        reg = s.get("regime", {})
        ratio = s.get("tree_over_chain_interval")
        glance_tau = s["systems"]["glance"]["tau"]
        rows[task] = {
            "new_tokens_per_answer": reg.get("new_tokens_per_answer"),
            "tau_ceiling": reg.get("tau_ceiling"),
            "root_entropy": reg.get("root_entropy"),
            "root_entropy_iqr": reg.get("root_entropy_iqr"),
            "chain_tau": s["systems"].get("chain", {}).get("tau"),
            "glance_tau": glance_tau,
            "glance_share_of_ceiling": glance_tau / reg["tau_ceiling"] if reg else None,
            "tree_over_chain": ratio,
            "chain_offset_acceptance": reg.get("chain_offset_acceptance"),
        }
    lines = [
        "| task | new tokens / answer | tau ceiling | root entropy (nats) | root entropy IQR | "
        "chain tau | GLANCE tau | GLANCE / ceiling | tree / chain [95%] | "
        "chain P(accept k), k=1,2,4,8,15 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, r in rows.items():
        ratio_txt = _interval(r["tree_over_chain"])
        acc = r["chain_offset_acceptance"] or []
        picks = " / ".join(_num(acc[k - 1]) if k <= len(acc) else "n/a" for k in (1, 2, 4, 8, 15))
        lines.append(
            f"| {task} | {_num(r['new_tokens_per_answer'])} | {_num(r['tau_ceiling'])} | "
            f"{r['root_entropy']:.3f} | {_num(r['root_entropy_iqr'], 3)} | "
            f"{_num(r['chain_tau'])} | {_num(r['glance_tau'])} | "
            f"{_num(r['glance_share_of_ceiling'])} | {ratio_txt} | {picks} |"
        )
    return {"tasks": rows}, "\n".join(lines) + "\n"


def _interval(ratio) -> str:
    """A ratio and its 95% interval, ``1.23 [1.10, 1.35]``, or ``n/a``."""
    if not ratio:
        return "n/a"
    return f"{ratio['estimate']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]"


def seeds_table(draws: dict) -> tuple[dict, str]:
    """The regime rows of each task-set draw side by side: answer length, root
    entropy and its interquartile range, chain and GLANCE tau, and the
    tree/chain ratio with its interval."""
    lines = [
        "| draw | task | new tokens / answer | root entropy | root entropy IQR | chain tau | "
        "GLANCE tau | tree / chain [95%] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for draw, rows in draws.items():
        for task, r in rows.items():
            ratio_txt = _interval(r["tree_over_chain"])
            lines.append(
                f"| {draw} | {task} | {_num(r['new_tokens_per_answer'])} | "
                f"{r['root_entropy']:.3f} | {_num(r.get('root_entropy_iqr'), 3)} | "
                f"{_num(r['chain_tau'])} | {_num(r['glance_tau'])} | {ratio_txt} |"
            )
    return {"draws": draws}, "\n".join(lines) + "\n"


def sampling_table(summaries: dict) -> tuple[dict, str]:
    """Per task, GLANCE's tau at each temperature run, and with ``extend_budget``
    against without (both at the decode temperature), with the speedups."""
    temps = {t for s in summaries.values() for t in s.get("glance_by_temperature", {})}
    temps = sorted(temps, key=float)
    rows = {}
    for task, s in summaries.items():
        names = s.get("glance_by_temperature", {})
        row = {
            "tau_by_temperature": {t: s["systems"][n]["tau"] for t, n in names.items()},
            "speedup_by_temperature": {
                t: s["systems"][n]["speedup"]["estimate"] for t, n in names.items()
            },
            "tree_over_chain_by_temperature": s.get("tree_over_chain_by_temperature", {}),
        }
        row["tau_over_base_temperature"] = s.get("tau_over_base_temperature", {})
        if "extend_over_plain" in s:
            x = s["systems"]["glance_extend"]
            row["extend"] = {
                "extend_budget": s["extend_row"],
                "tau": x["tau"],
                "tau_without": s["systems"]["glance"]["tau"],
                "tau_ratio": s["extend_over_plain"]["tau"],
                "speed": s["extend_over_plain"]["speed"],
            }
        rows[task] = row
    head = " | ".join(f"T={t}: tau, tree over chain, over T={temps[0]}" for t in temps)
    lines = [
        f"| task | {head} | extend_budget: tau on / off, tau ratio | speed on over off |",
        "|---|" + "---|" * len(temps) + "---|---|",
    ]
    for task, row in rows.items():
        ratios, warm = row["tree_over_chain_by_temperature"], row["tau_over_base_temperature"]
        cells = []
        for t in temps:
            cell = _num(row["tau_by_temperature"].get(t))
            cell += f", {_interval(ratios[t])}" if t in ratios else ""
            cell += f", {_interval(warm[t])}" if t in warm else ""
            cells.append(cell)
        e = row.get("extend")
        if e:
            ext = (
                f"{e['tau']:.2f} / {e['tau_without']:.2f}, {_interval(e['tau_ratio'])} | "
                f"{_interval(e['speed'])}"
            )
        else:
            ext = "n/a | n/a"
        lines.append(f"| {task} | {' | '.join(cells)} | {ext} |")
    return {"temperatures": temps, "tasks": rows}, "\n".join(lines) + "\n"


def cost_curves(plt, bench: dict, figures, meta: dict | None = None) -> None:
    """The bench's cost curves: ``verify_cost.png`` (pass time against tree
    size), ``length.png`` (ms per token against output length) and
    ``host_share.png`` (the host's share of a round against the budget)."""
    figures = Path(figures)
    rows = bench["budget_curve"]["rows"]
    size = [r["tree_size"] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(size, [r["verify_ms"] for r in rows], "o-", label="verify pass")
    ax.plot(size, [r["draft_ms"] for r in rows], "s--", label="draft pass")
    ax.set_xscale("log", base=2)
    ax.set_xticks(size, [f"{n:g}" for n in size])
    ax.minorticks_off()
    ax.set_xlabel("tree size N (mean nodes verified per round)")
    ax.set_ylabel("ms per pass (mean over rounds)")
    line = caption({**(meta or {}), "device": bench["device"], "dtype": bench["dtype"]})
    ax.set_title(
        f"verify cost against tree size ({bench['budget_curve']['task']})\n{line}", fontsize=8
    )
    ax.legend(fontsize=7)
    save_figure(fig, figures / "verify_cost.png")
    plt.close(fig)

    lc = bench["length_curve"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for row in ("glance_tree", "glance_greedy"):
        ax.plot(lc["new_tokens"], lc[row], "o-", label=f"{row}, ms per token (left)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lc["new_tokens"], [str(n) for n in lc["new_tokens"]])
    ax.minorticks_off()
    ax.set_xlabel("new tokens")
    ax.set_ylabel("ms per token (decode_only, pooled)")
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    twin.plot(
        lc["new_tokens"],
        lc["glance_tree_round_ms"],
        "s:",
        color="0.4",
        label="glance_tree, ms per round (right)",
    )
    twin.set_ylabel("ms per round", color="0.4")
    twin.set_ylim(bottom=0)
    ax.set_title(f"cost against output length ({lc['task']})\n{line}", fontsize=8)
    handles = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="lower left")
    save_figure(fig, figures / "length.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    budgets = [r["budget"] for r in rows]
    share = [100 * r["host_share"] for r in rows]
    ax.plot(budgets, share, "o-")
    ax.set_ylim(0, 1.25 * max(share))  # scaled to the data: the share is a few percent
    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.set_xlabel("budget N")
    ax.set_ylabel("host share of a round (%)")
    ax.set_title(
        f"host share of a round (tree, mask, walk, compaction) against budget\n{line}", fontsize=8
    )
    save_figure(fig, figures / "host_share.png")
    plt.close(fig)
    if bench.get("context_cost", {}).get("lengths"):
        context_cost_figure(plt, bench["context_cost"], figures / "context_cost.png", line)


def context_cost_figure(plt, cost: dict, path, line: str) -> None:
    """``context_cost.png``: ms per token of each row against context length
    (left), and each drafting row's round split into draft, verify and host ms
    (right, stacked)."""
    lengths = cost["lengths"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for row, points in cost["rows"].items():
        left.plot(lengths, [x["ms_per_token"] for x in points], "o-", label=row)
    left.set_xlabel("extra context tokens")
    left.set_ylabel("ms per token (decode_only, pooled)")
    left.set_ylim(bottom=0)
    left.legend(fontsize=7)
    drafting = [row for row in cost["rows"] if row != "glance_greedy"]
    width = 0.8 / max(len(drafting), 1)
    x = np.arange(len(lengths))
    for j, row in enumerate(drafting):
        points = cost["rows"][row]
        bottom = np.zeros(len(lengths))
        for part, color in (
            ("draft_ms", "tab:orange"),
            ("verify_ms", "tab:blue"),
            ("host_ms", "0.6"),
        ):
            values = np.array([p[part] for p in points])
            right.bar(
                x + j * width,
                values,
                width,
                bottom=bottom,
                color=color,
                edgecolor="k",
                lw=0.4,
                label=part.removesuffix("_ms") if j == 0 else None,
            )
            bottom += values
        for i in range(len(lengths)):
            right.text(
                x[i] + j * width,
                bottom[i],
                row.removeprefix("glance_"),
                ha="center",
                va="bottom",
                fontsize=6,
            )
    right.set_xticks(x + width * (len(drafting) - 1) / 2, [str(n) for n in lengths])
    right.set_xlabel("extra context tokens")
    right.set_ylabel("ms per round (mean)")
    right.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"cost against context ({cost['task']})\n{line}", fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


def law_panel(plt, law: dict, cap: int, path, meta: dict | None = None) -> None:
    """Panel (a): per task, the mean accepted length in each entropy decile with
    a normal interval (mean +- 1.96 standard errors, rounds taken as
    independent: rounds of one prompt are correlated, so it is narrower than a
    prompt-level interval would be), the task's own fitted law over its
    entropy range at the full cap, and (x) the law's mean over each decile's
    own rounds, each capped where it could stop (a leaf, the output's end);
    the pooled law dashed. Entropy on a linear axis from 0, so a round at H = 0
    sits at 0; deciles are points, never joined, so an empty stretch of
    entropy shows as a gap. The legend sits outside the axes."""
    from glance.core.law import DraftabilityLaw

    def model(fit):
        fields = DraftabilityLaw.__dataclass_fields__
        return DraftabilityLaw.from_dict({k: v for k, v in fit.items() if k in fields})

    fig, ax = plt.subplots(figsize=(6, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (task, fit) in enumerate(law["tasks"].items()):
        if "error" in fit:
            continue
        colour = colours[i % len(colours)]
        h, a = np.array(fit["decile_entropy"]), np.array(fit["decile_accepted"])
        se = np.array(fit.get("decile_se") or np.zeros_like(a))
        iv = fit.get("b1_interval") or {}
        b1 = _num(fit["b1"])
        if iv.get("low") is not None:
            b1 += f" [{_num(iv['low'])}, {_num(iv['high'])}]"
        verdict = "holds" if fit["holds"] else "fails"
        ax.errorbar(h, a, yerr=1.96 * se, fmt="o", ms=3.5, capsize=2, color=colour,
                    label=f"{task}: b1 {b1}, {verdict}")  # fmt: skip
        grid = np.linspace(h.min(), h.max(), 100)
        ax.plot(grid, model(fit).expected(grid, cap=cap), "-", lw=1.2, color=colour)
        # the law's mean for the same rounds, each at its own cap (a leaf's depth)
        ax.plot(h, fit["decile_fitted"], "x", ms=5, color=colour)
    pooled = law["pooled"]
    if "error" not in pooled:
        top = max(max(f["decile_entropy"]) for f in law["tasks"].values() if "error" not in f)
        grid = np.linspace(0.0, top, 200)
        ax.plot(
            grid,
            model(pooled).expected(grid, cap=cap),
            "k--",
            lw=1,
            label=f"pooled law: b0 {_num(pooled['b0'])}, b1 {_num(pooled['b1'])}, "
            f"decile R² {_num(pooled['r2_decile'])}; holds() "
            f"{'passed' if pooled['holds'] else 'failed'}",
        )
    where = f"a leaf of its tree path, the output's end, or {cap}"
    label = "x: the law's decile mean over the same rounds, each capped"
    label += f"\nwhere it could stop ({where})"
    ax.plot([], [], "kx", label=f"{label}; curves: capped at {cap}")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("target entropy H at the round's root (nats)")
    ax.set_ylabel(f"mean accepted length a (drafted tokens, cap {cap})")
    ax.set_title(
        "(a) accepted length against entropy: decile means +- 1.96 SE (rounds as "
        "independent),\n"
        f"each task's fitted law (solid) and the pooled one (dashed)\n{caption(meta or {})}",
        fontsize=8,
    )
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    save_figure(fig, path)
    plt.close(fig)


def tree_over_chain_panel(plt, summaries: dict, budget, path) -> None:
    """Panel (b): GLANCE's tau over the chain's per task, with its paired
    interval, one bar per temperature."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(len(summaries))
    temps = sorted(
        {t for s in summaries.values() for t in s.get("tree_over_chain_by_temperature", {})},
        key=float,
    )
    width = 0.8 / max(1, len(temps))
    for j, t in enumerate(temps):
        rows = [s.get("tree_over_chain_by_temperature", {}).get(t) for s in summaries.values()]
        est = np.array([r["estimate"] if r else np.nan for r in rows])
        low = np.array([r["low"] if r else np.nan for r in rows])
        high = np.array([r["high"] if r else np.nan for r in rows])
        err = np.clip(np.array([est - low, high - est]), 0, None)
        ax.bar(
            x + (j - (len(temps) - 1) / 2) * width,
            est,
            width,
            yerr=err,
            capsize=2,
            label=f"T = {t}",
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, list(summaries))
    ax.set_ylabel("GLANCE tau / chain tau")
    first = next(iter(summaries.values()))
    ax.set_title(
        f"(b) what width buys (N={budget}, 95% paired intervals)\n{caption(first)}", fontsize=8
    )
    ax.legend(fontsize=7)
    save_figure(fig, path)
    plt.close(fig)


def caption(meta: dict) -> str:
    """The line every figure carries: target, device, dtype and timing mode."""
    keys = ("target", "device", "dtype", "timing")
    return " · ".join(f"{k} {meta[k]}" for k in keys if meta.get(k) is not None)


def context_panel(plt, context: dict, task: str, path) -> None:
    """The tree/chain tau ratio at each context length, with its
    paired bootstrap interval."""
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    lengths = list(context)
    iv = [context[n]["tree_over_chain_interval"] for n in lengths]
    est = np.array([r["estimate"] for r in iv])
    err = np.clip([est - [r["low"] for r in iv], [r["high"] for r in iv] - est], 0, None)
    ax.bar([str(n) for n in lengths], est, yerr=err, capsize=4, color="tab:green")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("extra context tokens")
    ax.set_ylabel("GLANCE tau / chain tau (ratio)")
    ax.set_title(
        f"tree over chain at each context length ({task}, 95% paired intervals)\n"
        f"{caption(context[lengths[0]])}",
        fontsize=8,
    )
    save_figure(fig, path)
    plt.close(fig)


def budget_panel(plt, sweeps: dict, path) -> None:
    """Panel (d), one small multiple per task: GLANCE's speedup over greedy
    against the verifier budget with its paired interval, tau on a second axis,
    the configured budget (dashed) and ``budget="auto"``'s mean verified tree
    size (dotted) marked."""
    tasks = list(sweeps)
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.2 * cols, 3.1 * rows), squeeze=False, layout="constrained"
    )
    for ax, task in zip(axes.flat, tasks, strict=False):
        s = sweeps[task]
        budgets = [int(b) for b in s["budgets"]]
        sp = [s["budgets"][str(b)]["speedup"] for b in budgets]
        est = np.array([x["estimate"] for x in sp])
        err = np.clip([est - [x["low"] for x in sp], [x["high"] for x in sp] - est], 0, None)
        ax.errorbar(budgets, est, yerr=err, fmt="o-", ms=3, capsize=2, label="speedup")
        ax.axhline(1.0, color="k", lw=0.6)
        if isinstance(s["budget"], int):
            ax.axvline(
                s["budget"], color="tab:red", ls="--", lw=0.8, label=f"default N={s['budget']}"
            )
        auto = s["auto"]
        ax.axvline(
            auto["mean_tree_size"],
            color="tab:purple",
            ls=":",
            lw=1,
            label=f"auto: mean N {auto['mean_tree_size']:.0f}, {auto['speedup']['estimate']:.2f}x",
        )
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets], fontsize=6)
        ax.minorticks_off()
        ax.set_xlabel("verifier budget N (tree nodes)", fontsize=7)
        ax.set_ylabel("speedup over greedy (x)", fontsize=7)
        ax.set_title(task, fontsize=8)
        twin = ax.twinx()
        twin.plot(budgets, [s["budgets"][str(b)]["tau"] for b in budgets], "s:", color="0.5", ms=3)
        twin.set_ylabel("tau (tokens per round)", fontsize=7, color="0.4")
        twin.tick_params(labelsize=6, colors="0.4")
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5, loc="lower center")
    for ax in list(axes.flat)[len(tasks) :]:
        ax.set_visible(False)
    first = sweeps[tasks[0]]
    fig.suptitle(
        f"(d) speedup (left, 95% paired intervals) and tau (right, grey) against "
        f"budget\n{caption(first)}, {first['n']} prompts per task",
        fontsize=8,
    )
    save_figure(fig, path)
    plt.close(fig)


def _gap(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _interval(x: dict) -> str:
    return f"{x['estimate']:.2f}x [{x['low']:.2f}, {x['high']:.2f}]"


def scorer_lines(cases: dict) -> list[str]:
    """The consistency scorer's table: per case, GLANCE with the scorer
    (``glance_scored``) over GLANCE without it and over the EAGLE-style head,
    tau and speed in both windows with intervals, and each tree's draft time a
    round (the scorer's cost a round is the difference)."""
    lines = [
        "GLANCE with the consistency scorer (`glance_scored`) over GLANCE without it and "
        "over the EAGLE-style head, all at the same verified budget (above 1: the scorer "
        "ahead); draft ms/round is the head pass and tree search, without and with the "
        "scorer:",
        "",
        "| case | tau / GLANCE | speed / GLANCE, decode | speed / GLANCE, end to end | "
        "tau / EAGLE-style | speed / EAGLE-style, decode | speed / EAGLE-style, end to end | "
        "draft ms/round, GLANCE -> scored |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, c in cases.items():
        g, e, rows = c["scored_vs_glance"], c["scored_vs_eagle_tree"], c["rows"]
        draft = [rows[r].get("draft_ms_per_round") for r in ("glance", "glance_scored")]
        cost = " -> ".join(f"{d:.2f}" for d in draft) if None not in draft else ""
        lines.append(
            f"| {case} | {_interval(g['tau'])} | {_interval(g['speed'])} | "
            f"{_interval(g['speed_end_to_end'])} | {_interval(e['tau'])} | "
            f"{_interval(e['speed'])} | {_interval(e['speed_end_to_end'])} | {cost} |"
        )
    return lines


def arms_markdown(result: dict) -> str:
    """The arms' two tables: every row per case (lossy rows marked), then
    GLANCE against the EAGLE-style head, dflash's chain and the two-model
    chain, with intervals. Each time and ratio names its window; the greedy
    row is the one baseline of every speedup in its case."""
    head = (
        f"Target {result['target']} on {result['device']} ({result['dtype']}); both heads "
        f"verify {result['budget']} draft tokens a round (GLANCE: branch_k "
        f"{result['branch_k']}, one head pass; EAGLE-style: top-{result['width']} per depth, "
        f"depth {result['depth']}, {result['depth']} head passes); {result['n']} prompts per "
        "task after a warm-up. Two windows: decode (prefill excluded) and end to end (the "
        "whole call); a speedup divides the case's greedy row's time by the row's, both in "
        "the same window, with a 95% paired bootstrap interval over prompts. dflash's "
        "chain runs its own loop, timed end to end only.\n"
    )
    lines = [
        head,
        "| case | row | tau | ms/token, decode | speedup, decode | ms/token, end to end | "
        "speedup, end to end | = greedy | draft ms/round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cases = {**result["cases"], "pooled": result["pooled"]}
    for case, c in cases.items():
        for row, x in c["rows"].items():
            e = x["end_to_end"]
            tau = f"{x['tau']:.2f}" if "tau" in x else ""
            ms = f"{x['ms_per_token']:.3f}" if "ms_per_token" in x else ""
            sp = _interval(x["speedup"]) if "speedup" in x else ""
            sp_e = _interval(e["speedup"]) if "speedup" in e else ""
            same = f"{x['matches_baseline']}" if "matches_baseline" in x else ""
            draft = f"{x['draft_ms_per_round']:.2f}" if "draft_ms_per_round" in x else ""
            name = f"{row} (lossy)" if x.get("lossy") else row
            lines.append(
                f"| {case} | {name} | {tau} | {ms} | {sp} | {e['ms_per_token']:.3f} | {sp_e} | "
                f"{same} | {draft} |"
            )
    lines += [
        "",
        "GLANCE over the others on the same prompts (above 1: GLANCE ahead; speed in "
        "the window named):",
        "",
        "| case | tau / EAGLE-style | speed / EAGLE-style, decode | speed / EAGLE-style, "
        "end to end | speed / dflash chain, end to end | speed / two-model, decode | "
        "speed / two-model, end to end |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, c in cases.items():
        e, d, t = c["vs_eagle_tree"], c["vs_dflash_chain"], c["vs_two_model"]
        lines.append(
            f"| {case} | {_interval(e['tau'])} | {_interval(e['speed'])} | "
            f"{_interval(e['speed_end_to_end'])} | {_interval(d['speed_end_to_end'])} | "
            f"{_interval(t['speed'])} | {_interval(t['speed_end_to_end'])} |"
        )
    if all("auto_vs_eagle_best" in c for c in cases.values()):
        best = result.get("budget_sweep", {}).get("eagle", {}).get("best_budget")
        lines += [
            "",
            'Each system at its best: GLANCE\'s default (`glance_auto`, budget="auto") over '
            f"the EAGLE-style head at its own fastest budget (`eagle_best`, N={best}), at the "
            "equal budget, and over dflash's chain (above 1: GLANCE ahead):",
            "",
            "| case | tau / EAGLE best | speed / EAGLE best, decode | speed / EAGLE best, end "
            "to end | speed / EAGLE equal budget, decode | speed / EAGLE equal budget, end to "
            "end | speed / dflash chain, end to end |",
            "|---|---|---|---|---|---|---|",
        ]
        for case, c in cases.items():
            b, e, d = c["auto_vs_eagle_best"], c["auto_vs_eagle_tree"], c["auto_vs_dflash_chain"]
            lines.append(
                f"| {case} | {_interval(b['tau'])} | {_interval(b['speed'])} | "
                f"{_interval(b['speed_end_to_end'])} | {_interval(e['speed'])} | "
                f"{_interval(e['speed_end_to_end'])} | {_interval(d['speed_end_to_end'])} |"
            )
    if all("scored_vs_glance" in c for c in cases.values()):
        lines += ["", *scorer_lines(cases)]
    lines += [
        "",
        "Lossy rules, pooled: outputs that left greedy, and at the first token where each "
        "did, the target's logit gap between its own argmax and the token the rule took "
        "(float32 rounding is about 1e-6; a larger gap means the rule, not arithmetic, "
        "made the difference):",
        "",
        "| rule | left greedy | took a lower-ranked token | min logit gap | median logit gap |",
        "|---|---|---|---|---|",
    ]
    for row, x in result["pooled"]["rows"].items():
        if x.get("lossy"):
            dv = x["divergence"]
            lines.append(
                f"| {row} | {dv['diverged']}/{dv['prompts']} | {dv['took_a_lower_ranked_token']}"
                f" | {_gap(dv['min_logit_gap'])} | {_gap(dv['median_logit_gap'])} |"
            )
    sweep = result.get("budget_sweep")
    if sweep:
        budgets = list(sweep["glance"]["tokens_per_s"])
        lines += [
            "",
            f"Each head at its own best budget ({sweep['task']}, {sweep['n']} prompts, "
            "tokens/s, decode-only):",
            "",
            "| head | " + " | ".join(f"N={b}" for b in budgets) + " | best N |",
            "|---|" + "---|" * (len(budgets) + 1),
        ]
        for row in ("glance", "eagle"):
            speeds = sweep[row]["tokens_per_s"]
            lines.append(
                f"| {row} | "
                + " | ".join(f"{speeds[b]:.0f}" for b in budgets)
                + f" | {sweep[row]['best_budget']} |"
            )
    return "\n".join(lines) + "\n"


#: the paper's controlled-heads figures: GLANCE's tau over the EAGLE-3 head's
PAPER_TAU_RATIO = {"pooled": 2.7, "chartqa": 4.0}


def heads_markdown(result: dict) -> str:
    """The controlled head comparison: per task and pooled, each head's tau at
    the same verified budget, the EAGLE-style head's share of the most it can
    commit a round (its depth plus the bonus; the lower it is, the less its
    depth limit shapes its tau), and GLANCE's ratio with its paired interval,
    beside the paper's figure where it gives one; then, where the run has
    them, GLANCE's tau with the consistency scorer and its ratio to the
    EAGLE-style head's."""
    top = result["depth"] + 1  # the EAGLE-style head's most tokens a round
    cases = {k: c for k, c in result["cases"].items() if c["context"] == 0}
    cases = {**cases, "pooled": result["pooled"]}
    scored = all("scored_vs_eagle_tree" in c for c in cases.values())
    extra = " GLANCE + scorer tau | GLANCE + scorer / EAGLE-style |" if scored else ""
    lines = [
        "| task | GLANCE tau | EAGLE-style tau | EAGLE-style tau / its most "
        f"({top}) | GLANCE / EAGLE-style | paper |{extra}",
        "|---|---|---|---|---|---|" + ("---|---|" if scored else ""),
    ]
    for case, c in cases.items():
        rows = c["rows"]
        paper = PAPER_TAU_RATIO.get(case)
        line = (
            f"| {case} | {rows['glance']['tau']:.2f} | {rows['eagle']['tau']:.2f} | "
            f"{rows['eagle']['tau'] / top:.2f} | "
            f"{_interval(c['vs_eagle_tree']['tau'])} | {f'{paper}x' if paper else ''} |"
        )
        if scored:
            line += (
                f" {rows['glance_scored']['tau']:.2f} | "
                f"{_interval(c['scored_vs_eagle_tree']['tau'])} |"
            )
        lines.append(line)
    return "\n".join(lines) + "\n"


def arms_figure(result: dict, task: str, path) -> None:
    """:func:`arms_panel` drawn with matplotlib's file backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms_panel(plt, result, task, path)


def arms_panel(plt, result: dict, task: str, path) -> None:
    """Panel (c) of the paper: GLANCE's tau and speed over the EAGLE-style
    head's on ``task`` at each context length, with paired intervals."""
    cases = {c["context"]: c for c in result["cases"].values() if c["task"] == task}
    lengths = sorted(cases)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    x = np.arange(len(lengths))
    for j, (key, label) in enumerate((("tau", "tau ratio"), ("speed", "speed ratio"))):
        rows = [cases[n]["vs_eagle_tree"][key] for n in lengths]
        est = np.array([r["estimate"] for r in rows])
        err = np.clip(
            np.array([est - [r["low"] for r in rows], [r["high"] for r in rows] - est]), 0, None
        )
        ax.bar(x + (j - 0.5) * 0.38, est, 0.38, yerr=err, capsize=3, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [str(n) for n in lengths])
    ax.set_xlabel("extra context tokens before the question")
    ax.set_ylabel("GLANCE / EAGLE-style (ratio)")
    ax.set_title(
        f"(c) GLANCE against the EAGLE-style head ({task}, N={result['budget']}, "
        f"{result['device']}, {result['dtype']}, decode-only)",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    save_figure(fig, path)
    plt.close(fig)


def _x(sp: dict) -> str:
    return f"{sp['estimate']:.2f}x [{sp['low']:.2f}, {sp['high']:.2f}]"


def bench_markdown(result: dict) -> str:
    """The bench's tables (``results/bench.md``): one row per task and system,
    then the context cost curve. Pooled over prompts (total time over total
    tokens); ``e2e``: the whole call, prefill included; ``decode``: minus the
    prompt's time to first token. ``auto over row``: ``glance_auto``'s speedup
    over the row. ``efficiency``: the row's speedup over ``glance_greedy``
    over its round-cost limit (decode window). Intervals: 95% paired BCa
    bootstrap over prompts."""
    memory = any(
        x["peak_mib"] is not None for rows in result["tasks"].values() for x in rows.values()
    )
    head = "| task | row | tau | tokens/s e2e | ms/token e2e | ms/token decode "
    head += "| over hf_greedy, e2e | over hf_greedy, decode "
    head += "| auto over row, e2e | auto over row, decode | efficiency |"
    lines = [head + (" peak MiB |" if memory else ""), "|---" * (11 + memory) + "|"]
    for task, rows in result["tasks"].items():
        for row, x in rows.items():
            e2e, dec = x["end_to_end"], x["decode_only"]
            tau = f"{x['tau']:.2f}" if x["tau"] is not None else ""
            name = row
            if row == "glance_best" and task in result.get("best_budget", {}):
                name = f"glance_best (N={result['best_budget'][task]})"
            eff = f"{x['efficiency']['value']:.2f}" if x.get("efficiency") else ""
            line = (
                f"| {task} | {name} | {tau} | {e2e['tokens_per_s']:.1f} "
                f"| {e2e['ms_per_token']:.3f} | {dec['ms_per_token']:.3f} "
                f"| {_x(e2e['speedup'])} | {_x(dec['speedup'])} "
                f"| {_x(e2e['auto_over'])} | {_x(dec['auto_over'])} "
                f"| {eff} |"
            )
            if memory:
                line += f" {x['peak_mib']:.1f} |" if x["peak_mib"] is not None else " |"
            lines.append(line)
    return "\n".join(lines) + "\n" + context_cost_markdown(result.get("context_cost"))


def context_cost_markdown(cost: dict | None) -> str:
    """The context cost curve as a table: per context length and row, ms per
    token (decode window), tau, and the round's draft, verify and host ms."""
    if not cost or not cost.get("lengths"):
        return ""
    lines = [
        "",
        f"Cost against context ({cost['task']}, {cost['n']} prompts after a warm-up, "
        "decode window; verify: the target pass and the walk; a greedy step is all verify; "
        f"`glance_auto_window`: the head reads only the latest {cost.get('draft_window')} "
        "context positions; = greedy: outputs equal to greedy's):",
        "",
        "| context | prompt tokens | row | tau | ms/token | draft ms | verify ms | host ms "
        "| = greedy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, context in enumerate(cost["lengths"]):
        for row, points in cost["rows"].items():
            x = points[i]
            lines.append(
                f"| {context} | {x['prompt_tokens']} | {row} | {x['tau']:.2f} "
                f"| {x['ms_per_token']:.3f} | {x['draft_ms']:.3f} | {x['verify_ms']:.3f} "
                f"| {x['host_ms']:.3f} | {x.get('same_as_greedy', '')} |"
            )
    if cost.get("skipped"):
        lines += ["", f"Skipped (prompt and answer past the target's positions): {cost['skipped']}"]
    return "\n".join(lines) + "\n"
