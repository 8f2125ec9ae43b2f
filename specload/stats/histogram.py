"""A log-binned histogram for latencies that are too many to keep one by one.

Per-token inter-token latencies number output tokens x requests (50 million in a long run), so
they are counted into fixed log-spaced bins: constant memory, and percentiles within the bin width
(about 0.5 % relative with 200 bins per decade), which is far below the noise of any server.
"""

from __future__ import annotations

import numpy as np

_BINS_PER_DECADE = 200
_MIN_NS = 1_000.0  # 1 us; anything faster is clamped into the first bin
_DECADES = 8  # 1 us .. 100 s
_NBINS = _BINS_PER_DECADE * _DECADES + 2


class LogHistogram:
    __slots__ = ("counts", "n")

    def __init__(self) -> None:
        self.counts = np.zeros(_NBINS, dtype=np.int64)
        self.n = 0

    def add_many(self, values_ns: list[float] | np.ndarray) -> None:
        a = np.asarray(values_ns, dtype=np.float64)
        if a.size == 0:
            return
        # the log is >= 0, so the cast's truncation is the floor
        idx = (np.log10(np.maximum(a, _MIN_NS) / _MIN_NS) * _BINS_PER_DECADE).astype(np.int64) + 1
        np.minimum(idx, _NBINS - 1, out=idx)  # (>= 1 already; np.clip's wrapper costs more than the work)
        self.counts += np.bincount(idx, minlength=_NBINS)
        self.n += a.size

    def percentile(self, q: float) -> float | None:
        """The q-th percentile in ns: the geometric centre of the bin holding it."""
        if self.n == 0:
            return None
        rank = q / 100.0 * (self.n - 1)
        cum = np.cumsum(self.counts)
        b = int(np.searchsorted(cum, rank + 1))
        lo = _MIN_NS * 10 ** ((b - 1) / _BINS_PER_DECADE)
        hi = _MIN_NS * 10 ** (b / _BINS_PER_DECADE)
        return float(np.sqrt(lo * hi)) if b > 0 else _MIN_NS
