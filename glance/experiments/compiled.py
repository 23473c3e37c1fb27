"""``torch.compile``, measured: each decoder eager and compiled, on the same prompts.

The target's text decoder and the head's forward are compiled with inductor
and dynamic shapes (the cache grows every round, and ``budget="auto"`` trees
change size). transformers' ``generate`` gets the same help its own way: a
static cache and its ``CompileConfig``. Rows run interleaved prompt by prompt,
the compiled ones by swapping the compiled modules in and out, so machine
drift falls on every row alike. Every row's output must equal eager greedy's;
the compiled rows are also held to compiled greedy's.

Nothing here changes how GLANCE decodes by default: it answers whether
compiling should become an option, with its gain and its compile time.
"""

from __future__ import annotations

import contextlib
import time

__all__ = ["COMPILE_ROWS", "compile_bench", "compiled"]

#: each row's decoder; every one runs eager and compiled
COMPILE_ROWS = ("hf_greedy", "glance_greedy", "glance_auto")


class Compiled:
    """The compiled text decoder of ``target`` and forward of ``head``, swapped
    in by :meth:`on` and out by :meth:`off` (the eager modules are untouched)."""

    def __init__(self, target, head):
        import torch

        self.model, self.head = target.model, head
        self.eager_lm = target.model.language_model
        self.lm = torch.compile(self.eager_lm, dynamic=True)
        self.forward = torch.compile(head.forward, dynamic=True)

    def on(self) -> None:
        self.model.language_model = self.lm
        self.head.forward = self.forward

    def off(self) -> None:
        self.model.language_model = self.eager_lm
        self.head.__dict__.pop("forward", None)


@contextlib.contextmanager
def compiled(swap: Compiled, on: bool):
    """``swap``'s compiled modules in place while the block runs (when ``on``)."""
    if on:
        swap.on()
    try:
        yield
    finally:
        swap.off()


def _hf_static(target, prompt):
    """transformers' greedy ``generate`` with a static cache, compiled by its
    own ``CompileConfig`` (``_compile_all_devices`` lets it compile off CUDA)."""
    from transformers import CompileConfig

    from glance.experiments.baselines import hf_generate

    config = CompileConfig(dynamic=None, mode="default")
    config._compile_all_devices = True
    return hf_generate(
        target,
        prompt.ids,
        prompt.positions,
        prompt.max_new,
        prompt.stops,
        cache_implementation="static",
        compile_config=config,
    )


def _call(session, row: str, prompt, on: bool) -> list[int]:
    """One decoder's new ids on ``prompt``."""
    from glance.experiments.baselines import hf_generate
    from glance.experiments.rows import Row, run

    if row == "hf_greedy":
        if on:
            return _hf_static(session.target, prompt)
        return hf_generate(
            session.target, prompt.ids, prompt.positions, prompt.max_new, prompt.stops
        )
    spec = Row("ar") if row == "glance_greedy" else Row("glance", options={"budget": "auto"})
    return run(spec, session.models, prompt)["ids"]


def compile_bench(session, task, n: int, seed: int, resamples: int) -> dict:
    """Every row of :data:`COMPILE_ROWS`, eager and compiled, on ``n`` + 1
    prompts of ``task`` (the first warms up and compiles). Per row and mode:
    ms per token (end to end, pooled) and outputs equal to eager greedy's;
    per row, compiled over eager speed with a paired bootstrap interval; per
    compiled row, the seconds its warm-up call took (compiling included) and
    outputs equal to compiled greedy's; and compiled GLANCE over compiled
    greedy."""
    import numpy as np
    import torch
    import torch._inductor.config as inductor

    from glance.core.metrics import paired_bootstrap
    from glance.experiments.timing import sync

    limit, simdlen = torch._dynamo.config.recompile_limit, inductor.cpp.simdlen
    torch._dynamo.config.recompile_limit = 64  # prefill, steps and trees: a few graphs each
    # 256-bit vectors, as the pinned numerics allow (AVX2); with ATEN_CPU_CAPABILITY
    # pinned to default, inductor's own pick emits AVX-512 code its headers lack
    inductor.cpp.simdlen = 8 if session.target.device.type == "cpu" else simdlen
    swap = Compiled(session.target, session.head)
    modes = {
        f"{row}{'_compiled' if on else ''}": (row, on)
        for on in (False, True)
        for row in COMPILE_ROWS
    }
    runs = {name: [] for name in modes}
    try:
        for prompt in session.prompts(task, n + 1):
            for name, (row, on) in modes.items():
                with torch.inference_mode(), compiled(swap, on):
                    sync(session.target.device)
                    start = time.perf_counter()
                    ids = _call(session, row, prompt, on)
                    sync(session.target.device)
                    runs[name].append({"ids": ids, "ms": (time.perf_counter() - start) * 1e3})
    finally:
        swap.off()
        torch._dynamo.config.recompile_limit, inductor.cpp.simdlen = limit, simdlen

    def interval(base, method):
        est = paired_bootstrap(base, method, seed=seed, n_resamples=resamples)
        return {"estimate": est.estimate, "low": est.low, "high": est.high}

    measured = {name: r[1:] for name, r in runs.items()}
    out = {"task": task.name, "n": n, "window": "end_to_end", "rows": {}}
    for name, (row, on) in modes.items():
        calls = measured[name]
        tokens = sum(len(c["ids"]) for c in calls)
        x = {
            "ms_per_token": float(np.sum([c["ms"] for c in calls])) / tokens,
            "same_as_eager_greedy": sum(
                c["ids"] == g["ids"] for c, g in zip(calls, measured["glance_greedy"], strict=True)
            ),
        }
        if on:
            base = measured[row]
            x["warmup_s"] = runs[name][0]["ms"] / 1e3
            x["eager_warmup_s"] = runs[row][0]["ms"] / 1e3
            x["speed_over_eager"] = interval([c["ms"] for c in base], [c["ms"] for c in calls])
            x["same_as_compiled_greedy"] = sum(
                c["ids"] == g["ids"]
                for c, g in zip(calls, measured["glance_greedy_compiled"], strict=True)
            )
        out["rows"][name] = x
    ms = {name: [c["ms"] for c in calls] for name, calls in measured.items()}
    out["glance_auto_over_greedy"] = {
        "eager": interval(ms["glance_greedy"], ms["glance_auto"]),
        "compiled": interval(ms["glance_greedy_compiled"], ms["glance_auto_compiled"]),
        "compiled_over_hf_static_compiled": interval(
            ms["hf_greedy_compiled"], ms["glance_auto_compiled"]
        ),
    }
    return out


def compile_markdown(result: dict) -> str:
    """``results/compile.md``: each row eager and compiled."""
    lines = [
        f"torch.compile on {result['task']} ({result['n']} prompts after a warm-up that "
        "compiles; end-to-end window, pooled; intervals: 95% paired bootstrap over prompts). "
        "The target's text decoder and the head's forward are compiled (inductor, dynamic "
        "shapes); `hf_greedy_compiled` is transformers' `generate` with a static cache and "
        "its own compile config.",
        "",
        "| row | ms/token | compiled over eager | warm-up s (eager) | = eager greedy "
        "| = compiled greedy |",
        "|---|---|---|---|---|---|",
    ]
    for name, x in result["rows"].items():
        sp = x.get("speed_over_eager")
        cell = f"{sp['estimate']:.2f}x [{sp['low']:.2f}, {sp['high']:.2f}]" if sp else ""
        warm = f"{x['warmup_s']:.1f} ({x['eager_warmup_s']:.2f})" if "warmup_s" in x else ""
        lines.append(
            f"| {name} | {x['ms_per_token']:.3f} | {cell} | {warm} | "
            f"{x['same_as_eager_greedy']}/{result['n']} | {x.get('same_as_compiled_greedy', '')} |"
        )
    r = result["glance_auto_over_greedy"]
    lines += [
        "",
        "glance_auto over greedy: "
        + "; ".join(
            f"{k.replace('_', ' ')} {v['estimate']:.2f}x [{v['low']:.2f}, {v['high']:.2f}]"
            for k, v in r.items()
        ),
    ]
    return "\n".join(lines) + "\n"
