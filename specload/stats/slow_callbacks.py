"""Which callbacks blocked an asyncio event loop, told apart from the loop's thread not being run.

asyncio's debug mode reports every callback that took longer than ``slow_callback_duration`` of
wall time. On a shared machine most such reports are not the callback's doing: the process was
simply not scheduled while the callback ran. This probe times each callback three ways, from the
loop thread's own kernel counters (``/proc/thread-self/schedstat``):

- ``wall_ms``: as asyncio's debug report measures it;
- ``wait_ms``: the part the thread spent runnable but waiting for a CPU (the process's other
  threads count too: one preempted while it holds the GIL keeps the loop's thread asleep);
- ``own_ms = wall_ms - wait_ms``: time the callback held the loop by itself.

A callback whose ``own_ms`` exceeds the threshold blocked the loop; one slow only by its ``wait_ms``
was starved. It wraps ``asyncio.events.Handle._run``, so it works on the standard library loop only.
Without schedstat (not Linux), ``wait_ms`` is None and ``own_ms`` falls back to the thread's CPU
time, which misses blocking calls but never blames a callback for a busy machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from asyncio import events
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlowCallback:
    at_s: float  # time.perf_counter() when it started
    wall_ms: float
    own_ms: float  # wall - run-queue wait (or CPU time without schedstat)
    cpu_ms: float
    wait_ms: float | None
    what: str  # the handle's description (the task's coroutine and where it resumed)


def _describe(handle: events.Handle) -> str:
    cb = getattr(handle, "_callback", None)  # private (typeshed omits it): the probe's whole point is to look inside
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, asyncio.Future) and hasattr(owner, "get_coro"):
        coro = owner.get_coro()
        frames = []
        while coro is not None:
            f = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if f is None:
                break
            frames.append(f"{f.f_code.co_name}:{f.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if frames:
            return "task " + " > ".join(frames[-4:])
    return repr(handle)[:200]


class SlowCallbackProbe:
    """Time every callback of the stdlib event loops of this thread while installed.

    ``with SlowCallbackProbe(threshold_ms=2) as probe: ...``; then ``probe.blocking()`` lists the
    callbacks whose own time exceeded the threshold and ``probe.starved()`` those slow only by
    run-queue wait. ``active`` can be switched off and on to measure one phase (the load).
    """

    def __init__(self, threshold_ms: float = 2.0) -> None:
        self.threshold_ms = threshold_ms
        self.slow: list[SlowCallback] = []
        self.callbacks = 0
        self.active = True
        # the latest callback run while active, however short: a report made right after a
        # callback (asyncio's debug mode, which times it a little differently) is about this one
        self.last: SlowCallback | None = None
        self._orig: Callable[[events.Handle], None] | None = None  # Handle._run, while patched
        self._fd: int | None = None
        self._others: dict[int, int] = {}  # native thread id -> schedstat fd, the other threads
        self._threads_seen = 0

    @staticmethod
    def _wait_of(fd: int) -> int:
        try:
            return int(os.pread(fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return 0  # the thread ended

    def _waits(self) -> int | None:
        """Run-queue wait so far (ns) of the loop's thread plus the process's other threads."""
        if self._fd is None:
            return None
        if threading.active_count() != self._threads_seen:
            self._refresh_threads()
        total = self._wait_of(self._fd)
        for fd in self._others.values():
            total += self._wait_of(fd)
        return total

    def _refresh_threads(self) -> None:
        me = threading.get_native_id()
        live = {t.native_id for t in threading.enumerate() if t.native_id is not None and t.native_id != me}
        for tid in list(self._others):
            if tid not in live:
                os.close(self._others.pop(tid))
        for tid in live - set(self._others):
            with contextlib.suppress(OSError):
                self._others[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        self._threads_seen = threading.active_count()

    def __enter__(self) -> SlowCallbackProbe:
        try:
            # opened by the loop's thread: thread-self names the thread that opens it
            self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        orig = self._orig = events.Handle._run
        probe = self
        threshold_s = self.threshold_ms / 1e3

        def _run(handle: events.Handle) -> None:
            if not probe.active:
                probe.last = None  # a report about this callback has no timing to go with
                orig(handle)
                return
            s0 = probe._waits()
            c0 = time.thread_time()
            w0 = time.perf_counter()
            orig(handle)
            wall = time.perf_counter() - w0
            cpu = time.thread_time() - c0
            s1 = probe._waits()
            probe.callbacks += 1
            wait = None if s0 is None or s1 is None else (s1 - s0) / 1e9
            own = cpu if wait is None else max(0.0, wall - wait)
            slow = wall > threshold_s
            cb = SlowCallback(w0, wall * 1e3, own * 1e3, cpu * 1e3, None if wait is None else wait * 1e3,
                              _describe(handle) if slow else "")
            probe.last = cb
            if slow:
                probe.slow.append(cb)

        # typeshed types _run as a method of one argument; a function set on the class is one
        events.Handle._run = _run  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._orig is not None:
            events.Handle._run = self._orig  # type: ignore[method-assign, assignment]  # as above
            self._orig = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for fd in self._others.values():
            os.close(fd)
        self._others.clear()

    def blocking(self) -> list[SlowCallback]:
        """Callbacks that held the loop longer than the threshold by themselves."""
        return [s for s in self.slow if s.own_ms > self.threshold_ms]

    def starved(self) -> list[SlowCallback]:
        """Callbacks slow only because the thread waited for a CPU."""
        return [s for s in self.slow if s.own_ms <= self.threshold_ms]
