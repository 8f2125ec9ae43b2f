"""Formatting of numbers and series for the panels: one place for units, widths and missing values.

Series from the stats hold NaN for seconds without data (no request ended); a sparkline cannot draw
NaN, so ``plottable`` drops the leading gap and carries the last value across later gaps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DASH = "–"


def ms(v: float | None) -> str:
    """Milliseconds with a sensible number of digits; seconds beyond 10 s."""
    if v is None or math.isnan(v):
        return DASH
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 100:
        return f"{v:.0f} ms"
    if v >= 10:
        return f"{v:.1f} ms"
    return f"{v:.2f} ms"


def num(v: float | None, fmt: str = "{:.1f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return DASH
    return fmt.format(v)


def count(n: int) -> str:
    """An integer with thin grouping (1,234,567); k/M beyond a million to stay narrow."""
    if n >= 10_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n:,}"


def clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def plottable(series: Sequence[float], last: int) -> list[float]:
    """The last ``last`` points with NaN gaps filled by the previous value (leading NaNs dropped)."""
    out: list[float] = []
    prev: float | None = None
    for v in series[-last:]:
        if v is None or math.isnan(v):
            if prev is None:
                continue
            v = prev
        out.append(v)
        prev = v
    return out
