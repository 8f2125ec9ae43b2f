"""Open-loop arrivals: the gaps between requests sent at a rate (``--rate``, ``--burstiness``).
The plan they serve is data (``specload.plan``)."""

from __future__ import annotations

import random


class Arrivals:
    """Open-loop arrivals: gamma-distributed gaps with mean 1/rate, and when the next one is due."""

    def __init__(self, rate: float, burstiness: float = 1.0, seed: int = 0) -> None:
        self.rate = rate
        self.shape = burstiness
        self._rng = random.Random(seed)
        self._at: int | None = None  # when the next arrival is due (ns)

    def restart(self) -> None:
        """A level begins: its first arrival is one gap after it is first asked for."""
        self._at = None

    def wait_s(self, now_ns: int) -> float:
        """Seconds until the next arrival; 0.0: it is due now (and the one after it is scheduled).
        Arrivals held back (paused, at the cap) come due one after another once asked for again."""
        if self._at is None:
            self._at = now_ns + int(self.next_gap_s() * 1e9)
        if now_ns < self._at:
            return (self._at - now_ns) / 1e9
        self._at += int(self.next_gap_s() * 1e9)
        return 0.0

    def next_gap_s(self) -> float:
        return self._rng.gammavariate(self.shape, 1.0 / (self.rate * self.shape))
