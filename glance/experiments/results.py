"""What a decoding run writes, and how it is read back.

A *run* is one call of a decoder on one prompt, recorded as a dict with
``ids`` (the new tokens), ``ms`` (wall time), ``new_tokens``, ``committed``
and ``rounds`` (``None`` for a decoder that does not draft). The stages pool
runs per system into the summary's schema (:func:`system_summary`), compare
systems with paired bootstrap intervals over prompts (:func:`tau_ratio`,
:func:`speed_ratio`), and log every round to ``rounds.jsonl``
(:func:`write_rounds`, :func:`read_rounds`).
"""

from __future__ import annotations

import json

import numpy as np

from glance._io import atomic_write_text

#: the bench's row for GLANCE as a user gets it by default (``budget="auto"``),
#: against which every other row is compared
DEFAULT_ROW = "glance_auto"

__all__ = [
    "DEFAULT_ROW",
    "bench_summary",
    "efficiency",
    "read_rounds",
    "regime",
    "root_entropy_iqr",
    "speed_ratio",
    "system_summary",
    "tau_ratio",
    "write_rounds",
]


def write_rounds(path, records) -> None:
    """One JSON record per round (each a dict with at least ``system``,
    ``entropy``, ``accepted`` and ``cap``), written atomically."""
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def read_rounds(
    path, system: str = "glance", prompts: bool = False, censored: bool = False
) -> tuple[np.ndarray, ...]:
    """Entropy, accepted and effective cap of each round of ``system`` (and,
    with ``prompts``, each round's prompt; then with ``censored``, whether the
    round ended without a rejection: its ``stop`` is not ``"rejection"``), as
    arrays. A record without ``stop`` (written before rounds kept it) is
    censored when it reached its cap.

    ``accepted`` is clipped to the cap: drafted tokens accepted past the end of
    the output (after its stop token) never count. Every record is checked
    where it is read: entropy a finite number >= 0, accepted an integer >= 0,
    cap an integer >= 1, prompt an integer >= 0, stop one of
    :data:`glance.decoding.loop.STOPS`'s names. A bad record, or a file with
    no round of ``system``, raises ``ValueError`` naming the file and line."""
    import math

    stops = ("rejection", "depth", "end", "leaf")  # glance.decoding.loop.STOPS, torch-free
    entropy, accepted, cap, prompt, cut = [], [], [], [], []

    def whole(r, key, low):
        v = r[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{key}: expected an integer >= {low}; got {v!r}")
        return v

    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                if r["system"] != system:
                    continue
                h = r["entropy"]
                if isinstance(h, bool) or not isinstance(h, int | float) or not math.isfinite(h):
                    raise ValueError(f"entropy: expected a finite number; got {h!r}")
                if h < 0:
                    raise ValueError(f"entropy: expected a number >= 0; got {h!r}")
                c = whole(r, "cap", 1)
                a = whole(r, "accepted", 0)
                i = whole(r, "prompt", 0) if prompts else 0
                stop = r.get("stop", "rejection" if a < c else "depth")
                if stop not in stops:
                    raise ValueError(f"stop: expected one of {stops}; got {stop!r}")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(
                    f"{path}:{number}: expected a round record with system, entropy, "
                    f"accepted, cap and prompt ({err})"
                ) from err
            entropy.append(float(h))
            cap.append(c)
            accepted.append(min(a, c))
            prompt.append(i)
            cut.append(stop != "rejection")
    if not entropy:
        raise ValueError(f"{path}: no round of system {system!r}; rerun the stage that writes it")
    out = (np.array(entropy), np.array(accepted, dtype=np.int64), np.array(cap, dtype=np.int64))
    if prompts:
        out = (*out, np.array(prompt, dtype=np.int64))
    return (*out, np.array(cut, dtype=bool)) if censored else out


def system_summary(runs: list[dict], base: list[dict] | None, seed: int, resamples: int) -> dict:
    """Pooled figures of one system over the measured prompts (warm-up dropped)."""
    from glance.core.metrics import paired_bootstrap, pooled_tau

    ms = [r["ms"] for r in runs]
    tokens = sum(r["new_tokens"] for r in runs)
    out = {
        "ms_per_token": sum(ms) / tokens,
        "tokens_per_s": 1e3 * tokens / sum(ms),
        "new_tokens": tokens,
    }
    if runs[0]["rounds"] is not None:
        out["tau"] = pooled_tau([r["committed"] for r in runs], [r["rounds"] for r in runs])
        out["rounds"] = sum(r["rounds"] for r in runs)
    if base is not None:
        est = paired_bootstrap([b["ms"] for b in base], ms, seed=seed, n_resamples=resamples)
        out["speedup"] = {"estimate": est.estimate, "low": est.low, "high": est.high}
        out["matches_baseline"] = sum(r["ids"] == b["ids"] for r, b in zip(runs, base, strict=True))
    return out


def tau_ratio(tree: list[dict], chain: list[dict], seed: int, resamples: int) -> dict:
    """GLANCE's pooled tau over the chain's on the same prompts, with a paired
    bootstrap interval over prompts."""
    from glance.core.metrics import paired_tau_ratio

    est = paired_tau_ratio(
        [r["committed"] for r in tree],
        [r["rounds"] for r in tree],
        [r["committed"] for r in chain],
        [r["rounds"] for r in chain],
        seed=seed,
        n_resamples=resamples,
    )
    return {"estimate": est.estimate, "low": est.low, "high": est.high}


def speed_ratio(chain: list[dict], tree: list[dict], seed: int, resamples: int) -> dict:
    """The chain's time over a tree row's on the same prompts (above 1: the tree
    is faster), with a paired bootstrap interval over prompts."""
    from glance.core.metrics import paired_bootstrap

    est = paired_bootstrap(
        [r["ms"] for r in chain],
        [r["ms"] for r in tree],
        seed=seed,
        n_resamples=resamples,
    )
    return {"estimate": est.estimate, "low": est.low, "high": est.high}


def root_entropy_iqr(entropies, floor: float = 0.05) -> float | None:
    """The interquartile range (nats) of the rounds' root entropy, counting
    rounds above ``floor`` only: how much the target's uncertainty varies
    among the rounds where it is uncertain at all (``None`` with no such round)."""
    import numpy as np

    above = [h for h in entropies if h > floor]
    if not above:
        return None
    q25, q75 = np.percentile(np.asarray(above, dtype=np.float64), [25, 75])
    return float(q75 - q25)


def regime(measured: dict, rounds: list[dict], block: int) -> dict:
    """Where the task sits: answer lengths against the block, the target's mean
    root entropy (GLANCE's rounds) and its spread (:func:`root_entropy_iqr`),
    the chain's per-offset acceptance P(accept offset k | offset k reached),
    the highest tau the answer lengths allow
    (:func:`glance.core.metrics.tau_ceiling`), and the shares of GLANCE's
    rounds by why they ended (``glance_stops``)."""
    from glance.core.metrics import offset_acceptance, tau_ceiling

    lengths = [r["new_tokens"] for r in measured["ar"]]
    glance_rounds = [r for r in rounds if r["system"] == "glance"]
    chain_rounds = [r for r in rounds if r["system"] == "chain"]
    out = {
        "new_tokens_per_answer": sum(lengths) / len(lengths),
        "tau_ceiling": tau_ceiling(lengths, block),
        "root_entropy": sum(r["entropy"] for r in glance_rounds) / max(1, len(glance_rounds)),
        "root_entropy_iqr": root_entropy_iqr([r["entropy"] for r in glance_rounds]),
        # why GLANCE's rounds ended, as shares (glance.decoding.loop.STOPS)
        "glance_stops": {
            reason: sum(r.get("stop") == reason for r in glance_rounds) / max(1, len(glance_rounds))
            for reason in ("rejection", "depth", "end", "leaf")
        },
    }
    if chain_rounds:
        out["chain_offset_acceptance"] = offset_acceptance(
            [r["accepted"] for r in chain_rounds], [r["cap"] for r in chain_rounds], block - 1
        )
    return out


def bench_summary(runs: dict, prefill: list, seed: int, resamples: int) -> dict:
    """The bench's summary of ``runs`` (row -> per-prompt calls, each with
    ``ids``, ``ms``, ``new_tokens``, ``rounds`` as ``(committed, rounds)`` or
    ``None``, ``peak_mib``) and each prompt's ``prefill`` ms; the first prompt
    is the warm-up. Per row, one aggregation: pooled time over pooled tokens, in both windows
    (``end_to_end``: the whole call; ``decode_only``: minus the prompt's
    prefill). Speedups are ratios of pooled times with paired bootstrap
    intervals over prompts: each row over ``hf_greedy``, and GLANCE's default
    row (:data:`DEFAULT_ROW`, ``budget="auto"``) over each row (``auto_over``).
    Each of our own drafting rows also gets its ``efficiency``
    (:func:`efficiency`)."""
    from glance.core.metrics import drop_warmup, paired_bootstrap, pooled_tau

    def interval(base, method):
        est = paired_bootstrap(base, method, seed=seed, n_resamples=resamples)
        return {"estimate": est.estimate, "low": est.low, "high": est.high}

    pre = list(drop_warmup(prefill))
    calls = {row: list(drop_warmup(c)) for row, c in runs.items()}
    windows = {
        "end_to_end": {row: [c["ms"] for c in cs] for row, cs in calls.items()},
        "decode_only": {
            row: [max(c["ms"] - p, 1e-6) for c, p in zip(cs, pre, strict=True)]
            for row, cs in calls.items()
        },
    }
    base = calls["hf_greedy"]
    out = {}
    for row, cs in calls.items():
        tokens = sum(c["new_tokens"] for c in cs)
        drafted = [c["rounds"] for c in cs if c["rounds"] is not None]
        peaks = [c["peak_mib"] for c in cs if c["peak_mib"] is not None]
        out[row] = {
            "new_tokens": tokens,
            "tau": pooled_tau(*zip(*drafted, strict=True)) if drafted else None,
            "peak_mib": float(np.max(peaks)) if peaks else None,
            "same_output_as_hf_greedy": sum(
                c["ids"] == b["ids"] for c, b in zip(cs, base, strict=True)
            ),
        }
        for window, ms in windows.items():
            total = float(np.sum(ms[row]))
            out[row][window] = {
                "ms_per_token": total / tokens,
                "tokens_per_s": 1e3 * tokens / total,
                "speedup": interval(ms["hf_greedy"], ms[row]),
                "auto_over": interval(ms[row], ms[DEFAULT_ROW]),
            }
        if drafted and cs[0].get("verify_ms") is not None and "glance_greedy" in calls:
            out[row]["efficiency"] = efficiency(
                cs,
                windows["decode_only"][row],
                calls["glance_greedy"],
                windows["decode_only"]["glance_greedy"],
            )
    return out


def efficiency(calls: list, ms: list, greedy: list, greedy_ms: list) -> dict:
    """How much of the round-cost limit a drafting row reaches, in the
    ``decode_only`` window.

    The limit is the speedup over our own greedy loop if drafting and host work
    were free: ``tau * t_step / t_verify``, where ``t_step`` is the greedy loop's
    ms per token and ``t_verify`` the row's mean verify lap (the target pass
    and the walk) per round. ``value`` is the measured speedup over the greedy
    loop divided by that limit, which equals the verify laps' share of the
    decode window. Returns ``value``, ``limit``, ``speedup``, ``t_step``,
    ``t_verify`` (ms) and ``tau``."""
    tokens = sum(c["new_tokens"] for c in calls)
    committed = sum(c["rounds"][0] for c in calls)
    rounds = sum(c["rounds"][1] for c in calls)
    t_step = float(np.sum(greedy_ms)) / sum(c["new_tokens"] for c in greedy)
    t_row = float(np.sum(ms)) / tokens
    t_verify = sum(c["verify_ms"] for c in calls) / rounds
    tau = committed / rounds
    limit = tau * t_step / t_verify
    speedup = t_step / t_row
    return {
        "value": speedup / limit,
        "limit": limit,
        "speedup": speedup,
        "t_step": t_step,
        "t_verify": t_verify,
        "tau": tau,
    }
