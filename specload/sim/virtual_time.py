"""Virtual time: run the simulator and specload in one process, where time passes only on the timers.

``run_virtual(coro)`` runs a coroutine on an event loop whose clock (``loop.time()``) is virtual: when
no callback is ready and no socket has data, the clock jumps straight to the next timer instead of
waiting for it. The simulator schedules its steps with ``call_at`` on that clock and specload measures
with ``LoopClock`` (the same clock), so a ramp that takes a minute of simulated time runs in the
seconds of CPU it needs, and its timings are exactly the simulator's schedule, whatever else the
machine is doing. Tests of the comparison (whose verdicts depend on timing) and the calibration
benchmark's fast mode use it; real-time runs stay the reference for everything about the client.

Real I/O still happens (HTTP over loopback sockets between the two sides): before the clock may jump,
the selector is polled without blocking, and a write on loopback is readable by the time the writer's
syscall returns. With nothing scheduled at all, the loop waits for I/O in real time as usual.
Everything must run on this one loop: a thread or a subprocess would see the clock stand still.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """The platform selector, except that a wait with nothing to read advances the virtual clock."""

    loop: VirtualTimeLoop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer pending: only real I/O can wake us
            return super().select(None)
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    # code that would compute in a thread does it inline on this loop (the capacity search's level
    # evaluations): the clock would run on to the next timers while the thread computed
    virtual_time = True

    def __init__(self, start: float = 1000.0) -> None:
        sel = _VirtualSelector()
        super().__init__(selector=sel)
        sel.loop = self
        self._now = start

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds


class LoopClock:
    """specload's ``Clock`` read from the running loop's ``time()`` (virtual on ``VirtualTimeLoop``)."""

    __slots__ = ("_loop", "_wall0")

    def __init__(self, loop: asyncio.AbstractEventLoop, wall0: float = 1_800_000_000.0) -> None:
        self._loop = loop
        self._wall0 = wall0

    def now_ns(self) -> int:
        return int(self._loop.time() * 1e9)

    def wall_time(self) -> float:
        return self._wall0 + self._loop.time()


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh ``VirtualTimeLoop``."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coro)
