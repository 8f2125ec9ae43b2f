"""Is specload itself the bottleneck? Its own CPU use and event-loop lag, measured every second.

A load client that saturates reports its own queueing as the server's latency. This monitor wakes
every ``tick_s``, measures how late it woke (event-loop lag: time the loop spent busy elsewhere) and,
once per ``interval_s``, the process's CPU share. Over either threshold the sample is flagged
``saturated``: latencies measured in that second are client-bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClientLoad:
    t_ns: int
    cpu_pct: float  # of one core
    loop_lag_ms: float  # the worst wake-up delay in the interval
    saturated: bool


class ClientLoadMonitor:
    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        tick_s: float = 0.05,
        cpu_threshold_pct: float = 90.0,
        lag_threshold_ms: float = 50.0,
        on_sample: Callable[[ClientLoad], None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.tick_s = tick_s
        self.cpu_threshold_pct = cpu_threshold_pct
        self.lag_threshold_ms = lag_threshold_ms
        self.on_sample = on_sample or (lambda s: None)
        self.last: ClientLoad | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def judge(self, cpu_pct: float, lag_ms: float) -> bool:
        return cpu_pct >= self.cpu_threshold_pct or lag_ms >= self.lag_threshold_ms

    async def run(self) -> None:
        wall0 = time.perf_counter()
        cpu0 = time.process_time()
        worst_lag = 0.0
        next_report = wall0 + self.interval_s
        while not self._stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(self.tick_s)
            now = time.perf_counter()
            worst_lag = max(worst_lag, now - before - self.tick_s)
            if now >= next_report:
                cpu = time.process_time()
                cpu_pct = 100.0 * (cpu - cpu0) / max(1e-9, now - wall0)
                lag_ms = worst_lag * 1e3
                sample = ClientLoad(time.perf_counter_ns(), cpu_pct, lag_ms, self.judge(cpu_pct, lag_ms))
                self.last = sample
                self.on_sample(sample)
                wall0, cpu0, worst_lag = now, cpu, 0.0
                next_report = now + self.interval_s
