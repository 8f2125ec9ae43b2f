"""Is specload itself the bottleneck, or is it not getting the CPU? Its own CPU use and event-loop
lag, measured every second, and which of the two it was.

A load client that is behind reports its own delay as the server's latency. Two causes look alike
from inside (the event loop wakes up late) and need different answers:

- **saturated**: specload's own work (or a blocking call) holds its loop: its CPU is near a core, or
  the loop was late while its thread was not waiting for a CPU. More workers help.
- **starved**: the loop's thread was runnable but not running: another process held the CPUs.
  specload's own CPU is low; the latencies include scheduling delay.

The monitor runs on the loop it watches (the engine's). It wakes every ``tick_s`` and measures how
late it woke, with its thread's run-queue wait around each wait on Linux
(``/proc/thread-self/schedstat``). Once per ``interval_s`` it takes the CPU share of the loop's
thread (not the process's: the dashboard's rendering is not the engine's work) and judges the
interval. Without schedstat, "starved" means loop lag high while specload's CPU is low.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

OK = "ok"
SATURATED = "saturated"
STARVED = "starved"


@dataclass(frozen=True, slots=True)
class ClientLoad:
    t_ns: int
    cpu_pct: float  # of one core
    loop_lag_ms: float  # the worst wake-up delay in the interval
    saturated: bool
    starved: bool = False
    # of the worst wake-up delay, the time the loop's thread spent waiting for a CPU (None: unknown)
    lag_cpu_wait_ms: float | None = None

    @property
    def state(self) -> str:
        return STARVED if self.starved else SATURATED if self.saturated else OK

    def warning(self, level: int) -> str:
        """What an interval in which specload was behind means, worded by its cause."""
        if self.starved:
            wait = self.lag_cpu_wait_ms
            of_it = f", {wait:.0f} ms of it waiting for a CPU" if wait is not None else ""
            return (
                f"client starved at C={level} (cpu {self.cpu_pct:.0f}%, loop lag {self.loop_lag_ms:.0f} ms{of_it}): "
                "another process holds the CPU; latencies at this level include scheduling delay"
            )
        return (
            f"client saturated at C={level} (cpu {self.cpu_pct:.0f}%, loop lag {self.loop_lag_ms:.0f} ms): "
            "latencies at this level are client-bound"
        )


class _Lateness:
    """How late this process's event loop is now: the monitor's newest figures (one engine loop per
    process: the engine process's, a worker's, headless the only one), read where a timeout fired
    and must say whose it was (a connect timed out on a loop late by seconds is specload's)."""

    def __init__(self) -> None:
        self.worst_prev_s = self.worst_now_s = 0.0  # the last interval's worst, the current one's
        self.last_wake = 0.0  # the loop clock of the monitor's latest wake-up (0: no monitor)
        self.tick_s = 0.0
        self.excused = (0.0, 0.0)  # a pause of the loop's own choosing (begin, end; loop clock): not lag

    def late_s(self, now: float) -> float:
        behind = now - self.last_wake - self.tick_s if self.last_wake else 0.0  # inside a long turn
        return max(self.worst_prev_s, self.worst_now_s, behind)


LATENESS = _Lateness()


def excuse(begin: float, end: float) -> None:
    """The loop was held from ``begin`` to ``end`` (its clock) on purpose, before any request could
    wait on it (``warmup.settle_before_load``: a full collection, 15-50 ms): the monitor does not
    count it as lag. Counted, it judged the first second of a load "saturated", and a sweep withheld
    that level's verdict."""
    LATENESS.excused = (begin, end)


def lag_outside(lag: float, before: float, now: float, excused: tuple[float, float]) -> float:
    """A wake-up's lateness without the part of the wait ``[before, now]`` that an excused pause held."""
    held = min(now, excused[1]) - max(before, excused[0])
    return lag - held if held > 0 else lag


def loop_late_s() -> float:
    """How late this process's event loop has been lately (s): 0 when no monitor runs."""
    try:
        now = asyncio.get_running_loop().time()
    except RuntimeError:
        return 0.0
    return LATENESS.late_s(now)


class RunQueueWait:
    """The calling thread's total run-queue wait (ns) from the kernel, or None where unavailable
    (``main=True``: the process's main thread's, which runs the engine's loop)."""

    def __init__(self, main: bool = False) -> None:
        try:
            self._fd: int | None = os.open("/proc/self/schedstat" if main else "/proc/thread-self/schedstat",
                                           os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> int | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ClientLoadMonitor:
    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        tick_s: float = 0.005,
        cpu_threshold_pct: float = 90.0,
        lag_threshold_ms: float = 50.0,
        starved_cpu_pct: float = 50.0,
        on_sample: Callable[[ClientLoad], None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.tick_s = tick_s
        self.cpu_threshold_pct = cpu_threshold_pct
        self.lag_threshold_ms = lag_threshold_ms
        self.starved_cpu_pct = starved_cpu_pct
        self.on_sample = on_sample or (lambda s: None)
        self.last: ClientLoad | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def judge(self, cpu_pct: float, lag_ms: float, lag_cpu_wait_ms: float | None = None) -> tuple[bool, bool]:
        """(saturated, starved) for one interval; at most one of them is true."""
        if cpu_pct >= self.cpu_threshold_pct:
            return True, False  # using a core: whatever else happens, specload is the limit
        if lag_ms < self.lag_threshold_ms:
            return False, False
        if lag_cpu_wait_ms is not None:
            # late mostly because the thread waited in the run queue: another process had the CPU
            starved = lag_cpu_wait_ms >= 0.5 * lag_ms
        else:
            starved = cpu_pct < self.starved_cpu_pct
        return not starved, starved

    def sample(self, t_ns: int, cpu_pct: float, lag_ms: float, lag_cpu_wait_ms: float | None) -> ClientLoad:
        saturated, starved = self.judge(cpu_pct, lag_ms, lag_cpu_wait_ms)
        return ClientLoad(t_ns, cpu_pct, lag_ms, saturated, starved, lag_cpu_wait_ms)

    async def run(self) -> None:
        rq = RunQueueWait()
        try:
            await self._run(rq)
        finally:
            rq.close()

    async def _run(self, rq: RunQueueWait) -> None:
        # the loop's own clock, which is what asyncio.sleep waits on: real time in a real run, and in
        # a virtual-time run (specload.sim.virtual_time) a clock under which nothing is ever late
        clock = asyncio.get_running_loop().time
        wall0 = clock()
        cpu0 = time.thread_time()  # this thread's: the loop's (see the module docstring)
        worst_lag = 0.0
        worst_wait: float | None = None
        next_report = wall0 + self.interval_s
        tick = self.tick_s
        late = LATENESS
        late.tick_s = tick
        while not self._stop.is_set():
            w0 = rq.read()
            before = late.last_wake = clock()
            await asyncio.sleep(tick)
            now = clock()
            lag = now - before - tick
            if lag > worst_lag and before < late.excused[1]:
                lag = lag_outside(lag, before, now, late.excused)
            if lag > worst_lag:
                late.worst_now_s = lag
                w1 = rq.read()
                worst_lag = lag
                worst_wait = None if w0 is None or w1 is None else (w1 - w0) / 1e9
            if now >= next_report:
                cpu = time.thread_time()
                cpu_pct = 100.0 * (cpu - cpu0) / max(1e-9, now - wall0)
                s = self.sample(
                    time.perf_counter_ns(), cpu_pct, worst_lag * 1e3, None if worst_wait is None else worst_wait * 1e3
                )
                self.last = s
                self.on_sample(s)
                wall0, cpu0, worst_lag, worst_wait = now, cpu, 0.0, None
                late.worst_prev_s, late.worst_now_s = late.worst_now_s, 0.0
                next_report = now + self.interval_s
