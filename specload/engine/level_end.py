"""What ends a level: the level running now (``Level``) and the small rules that end it.

The runner's dispatcher only starts requests (arrivals, concurrency). Before each start it asks its
end rules in order; the first with a say wins. A rule reads the ``Level`` (its spec, the requests it
has started, its active time on the run's clock) and answers ``GO`` (no say), ``AGAIN`` (it acted:
ask again) or ``END``; ``due_in_s`` says how long the dispatcher may sleep before the rule may have a
say. Each rule is testable alone with a ``FakeClock`` and a ``Level``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from specload.clock import Clock
from specload.plan import LevelSpec


class Step(enum.Enum):
    GO = "go"  # no say: the dispatcher may start a request
    AGAIN = "again"  # the rule acted (paused, extended the level): ask again
    END = "end"  # the level ends


@dataclass(eq=False, slots=True)
class Level:
    """The level running now: its spec, the requests it has started and its active time, whose clock
    stops while the run is paused."""

    spec: LevelSpec
    index: int
    clock: Clock
    number: int = 0  # 1-based position in the plan, 0 for a manual or sourced level
    warmup: bool = False
    sourced: bool = False  # decided by a level source (a capacity search probe)
    held: bool = False  # held by the user: only the run's bounds end it (kept by the runner)
    started: int = 0
    quota: int | None = None  # the request count, as the search or the judge extends it
    pauses: list[tuple[float, float]] = field(default_factory=list)  # a replayed schedule's, to come
    active_ns: int = 0  # active time up to resumed_at
    resumed_at: int | None = None  # None while the clock is stopped

    def __post_init__(self) -> None:
        self.quota = self.spec.requests
        self.pauses = list(self.spec.pauses)

    @property
    def running(self) -> bool:
        return self.resumed_at is not None

    def active_s(self) -> float:
        return self.active_now_ns() / 1e9

    def active_now_ns(self) -> int:
        if self.resumed_at is None:
            return self.active_ns
        return self.active_ns + self.clock.now_ns() - self.resumed_at

    def start_clock(self) -> None:
        self.resumed_at = self.clock.now_ns()

    def stop_clock(self) -> None:
        self.active_ns = self.active_now_ns()
        self.resumed_at = None

    def at_quota(self) -> bool:
        return self.quota is not None and self.started >= self.quota and not self.held

    def left_s(self, at_s: float) -> float | None:
        """Seconds of active time until ``at_s`` (and a millisecond, to be past it); None while the
        clock is stopped or the level held: only something else can make it due."""
        if self.held or not self.running:
            return None
        return max(0.0, at_s - self.active_s()) + 0.001


class LevelSource(Protocol):
    """Levels decided as the run goes, awaited by the dispatcher (a source may think in a thread: the
    requests in flight stream on meanwhile)."""

    async def next_level(self, level_index: int) -> LevelSpec | None:
        """The spec of level ``level_index`` (about to start), or None: no more levels from this source."""
        ...

    async def more_requests(self, level_index: int, started: int) -> int:
        """The level has started ``started`` requests, its count so far: how many more to start (0: end)."""
        ...


class EndRule(Protocol):
    def applies(self, level: Level) -> bool:
        """Whether the rule can have a say on this level at all (asked once, when it begins)."""
        ...

    async def check(self, level: Level) -> Step: ...

    def due_in_s(self, level: Level) -> float | None:
        """Seconds until the rule may have a say; None: not by time."""
        ...


class _Rule:
    def applies(self, level: Level) -> bool:
        return True

    def due_in_s(self, level: Level) -> float | None:
        return None


class ReplayedPauses(_Rule):
    """A replayed schedule's pauses: at each one's active time, the run pauses for the original's length."""

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None],
                 later: Callable[[float, Callable[[], None]], object] | None = None) -> None:
        self._pause, self._resume = pause, resume
        self._later = later  # schedules the resume; the running loop's call_later by default

    def applies(self, level: Level) -> bool:
        return bool(level.pauses)

    async def check(self, level: Level) -> Step:
        if not level.pauses or not level.running or level.active_s() < level.pauses[0][0]:
            return Step.GO
        _, length = level.pauses.pop(0)
        self._pause()
        (self._later or asyncio.get_running_loop().call_later)(length, self._resume)
        return Step.AGAIN

    def due_in_s(self, level: Level) -> float | None:
        return level.left_s(level.pauses[0][0]) if level.pauses else None


class SearchProbe(_Rule):
    """A capacity search's probe at its count: the search says how many more (its verdict not yet
    decided) or ends it."""

    def __init__(self, source: Callable[[], LevelSource | None]) -> None:
        self._source = source  # the runner's level source now

    def applies(self, level: Level) -> bool:
        return level.sourced

    async def check(self, level: Level) -> Step:
        source = self._source()
        if not level.sourced or source is None or not level.at_quota():
            return Step.GO
        return _extended(level, await source.more_requests(level.index, level.started))


class JudgeExtension(_Rule):
    """``--target-ci``, ``--until-decided``: a level at its count gets more while the judge wants them."""

    def __init__(self, extend: Callable[[], Callable[[int, int], int] | None]) -> None:
        self._extend = extend

    def applies(self, level: Level) -> bool:
        return self._extend() is not None and not level.warmup

    async def check(self, level: Level) -> Step:
        extend = self._extend()
        if extend is None or level.warmup or not level.at_quota():
            return Step.GO
        return _extended(level, extend(level.index, level.started))


def _extended(level: Level, more: int) -> Step:
    if more <= 0:
        return Step.END
    assert level.quota is not None
    level.quota += more
    return Step.AGAIN


class Quota(_Rule):
    """The level ends once it has started its request count."""

    def applies(self, level: Level) -> bool:
        return level.quota is not None

    async def check(self, level: Level) -> Step:
        return Step.END if level.at_quota() else Step.GO


class Duration(_Rule):
    """The level ends once it has run its duration (paused time not counted)."""

    def applies(self, level: Level) -> bool:
        return level.spec.duration_s is not None

    async def check(self, level: Level) -> Step:
        d = level.spec.duration_s
        return Step.END if d is not None and not level.held and level.active_s() >= d else Step.GO

    def due_in_s(self, level: Level) -> float | None:
        d = level.spec.duration_s
        return None if d is None else level.left_s(d)


class MaxRequests(_Rule):
    """``--max-requests``: the run ends once it has started that many (the warm-up not counted)."""

    def __init__(self, limit: int | None, started: Callable[[], int], stop: Callable[[], None]) -> None:
        self.limit, self._started, self._stop = limit, started, stop

    def applies(self, level: Level) -> bool:
        return self.limit is not None

    async def check(self, level: Level) -> Step:
        if self.limit is None or self._started() < self.limit:
            return Step.GO
        self._stop()
        return Step.END


class MaxDuration(_Rule):
    """``--max-duration``: the run ends after that long, pauses counted (it bounds the wall time);
    ``end`` also cancels the requests in flight (stalled streams too)."""

    def __init__(self, limit_s: float | None, clock: Clock, end: Callable[[], None]) -> None:
        self.limit_s, self.clock, self._end = limit_s, clock, end
        self._t0 = clock.now_ns()

    def left_s(self) -> float | None:
        """Seconds left of the run; None: no bound."""
        if self.limit_s is None:
            return None
        return max(0.0, self.limit_s - (self.clock.now_ns() - self._t0) / 1e9)

    def over(self) -> bool:
        """The time is up, and the run ended (asked while a level drains too)."""
        if self.left_s() != 0.0:
            return False
        self._end()
        return True

    def applies(self, level: Level) -> bool:
        return self.limit_s is not None

    async def check(self, level: Level) -> Step:
        return Step.END if self.over() else Step.GO

    def due_in_s(self, level: Level) -> float | None:
        return self.left_s()
