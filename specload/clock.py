"""Injectable monotonic clock.

Every time in the core is integer nanoseconds from a ``Clock``; tests pass a ``FakeClock`` and
advance it by hand, so nothing in the suite sleeps to test time. Wall-clock time only appears where a
person reads it (record timestamps), through ``wall_time``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...

    def wall_time(self) -> float: ...


class MonotonicClock:
    """The real clock: ``time.perf_counter_ns`` for intervals, ``time.time`` for wall stamps."""

    __slots__ = ()

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def wall_time(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to."""

    __slots__ = ("_ns", "_wall0")

    def __init__(self, start_ns: int = 1_000_000_000, wall0: float = 1_700_000_000.0) -> None:
        self._ns = start_ns
        self._wall0 = wall0

    def now_ns(self) -> int:
        return self._ns

    def wall_time(self) -> float:
        return self._wall0 + self._ns / 1e9

    def advance(self, seconds: float = 0.0, *, ns: int = 0) -> int:
        self._ns += int(seconds * 1e9) + ns
        return self._ns

    def set_ns(self, ns: int) -> None:
        self._ns = ns


SYSTEM_CLOCK = MonotonicClock()
