"""The lossless gate: a lossless row's output must equal its baseline's.

Every stage that decodes runs it after each prompt, and the audit gives each
row a verdict per prompt. A row is blamed only when a second run of its
baseline (the control) agrees with the first: where the control differs too,
the arithmetic is not reproducible on this machine and no decoder can be
blamed.
"""

from __future__ import annotations

import logging

__all__ = ["NotLossless", "VERDICTS", "check_lossless", "first_difference", "verdict"]

log = logging.getLogger(__name__)

#: a prompt's verdicts, from best to worst
VERDICTS = ("equal", "control_differs", "MISMATCH")


class NotLossless(AssertionError):
    """A lossless row left its baseline, and the baseline reproduces itself."""


def first_difference(a: list, b: list) -> int | None:
    """The first index where two token lists differ (a shorter one differs at
    its end); ``None`` when they are equal."""
    if a == b:
        return None
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def verdict(got: list, want: list, control: list) -> str:
    """One row on one prompt: ``"equal"`` when ``got`` is ``want``; else
    ``"control_differs"`` when the baseline's second run ``control`` differs
    from ``want`` too, else ``"MISMATCH"``."""
    if got == want:
        return "equal"
    return "control_differs" if control != want else "MISMATCH"


def check_lossless(bases: dict, runs: dict, where: str, control) -> None:
    """Raise :class:`NotLossless`, naming ``where``, the row and the first
    differing token, when a row's latest output differs from its baseline's.

    ``bases``: row -> baseline row (``None`` for a baseline). ``runs``: row ->
    list of runs, each with ``"ids"``. ``control(base)``: a second run of the
    baseline on the same prompt, called only when a row differs. Where it
    differs from the first, the baseline is not reproducible there; that is
    logged, not raised."""
    for row, base in bases.items():
        if base is None:
            continue
        got, want = runs[row][-1]["ids"], runs[base][-1]["ids"]
        i = first_difference(got, want)
        if i is None:
            continue
        if control(base) != want:
            log.warning("%s: %s is not reproducible here, so %s is not gated", where, base, row)
            continue
        mine, theirs = (ids[i] if i < len(ids) else "end" for ids in (got, want))
        raise NotLossless(
            f"{where}: row {row} differs from {base} at new token {i} "
            f"({mine} against {theirs}); a second {base} run agrees with the first, "
            "so the decoder, not arithmetic, is at fault"
        )
