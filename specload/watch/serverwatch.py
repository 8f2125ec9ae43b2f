"""The server watch during the load: its health, its /metrics, and specload's own load beside them.

``ServerWatch`` starts what the options ask for once the server answers: the health poll (unless
``--no-health``, or the server has no ``/health``: a proxy without one must not be taken for a dead
server and paused), the /metrics scraper (``--metrics-url``, or the server's own when it answers,
off with ``off``), the server's GPUs (``--gpu-metrics``, ``watch/gpu.py``; ``auto`` decided here, once:
the server's /metrics when it carries DCGM series, else NVML or nvidia-smi when the server is on this
machine, else off and said so) and the client-load monitor (CPU and event-loop lag every second; with
``--workers`` the most delayed worker process decides). Each runs as a task of the session's
TaskGroup; what they find leaves through the callbacks given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from specload.clock import Clock
from specload.config import WatchConfig
from specload.datatypes import GpuFault, GpuSample, RunEvent, ServerSample
from specload.stats.client_load import ClientLoad, ClientLoadMonitor

if TYPE_CHECKING:  # imported when used: a run without a health endpoint or /metrics needs neither
    from specload.watch.gpu import GpuWatch
    from specload.watch.health import HealthMonitor
    from specload.watch.metrics import MetricsScraper

WorkerLoads = Callable[[], "list[tuple[float | None, float | None, float | None]]"]
FINAL_SCRAPE_S = 3.0


LEVEL_SCRAPE_S = 2.0  # how long a finished level waits for the counters as it ended


class ServerWatch:
    def __init__(
        self,
        cfg: WatchConfig,
        url: str,
        *,
        clock: Clock,
        on_health: Callable[[RunEvent, str], None],
        on_server: Callable[[ServerSample], None],
        on_client_load: Callable[[ClientLoad], None],
        on_notice: Callable[[str], None],
        worker_loads: WorkerLoads = list,
        on_gpu: Callable[[GpuSample], None] = lambda _s: None,
        on_gpu_fault: Callable[[GpuFault], None] = lambda _f: None,
        server_local: bool = True,
        streamed: Callable[[], float] | None = None,
    ) -> None:
        self.cfg = cfg
        self.url = url
        self.clock = clock
        self._on_health, self._on_server, self._on_client_load = on_health, on_server, on_client_load
        self._notice = on_notice
        self._worker_loads = worker_loads
        self._on_gpu, self._on_gpu_fault, self._server_local = on_gpu, on_gpu_fault, server_local
        self._streamed = streamed  # the load's tokens so far: a health timeout while they grow is no verdict
        self.health: HealthMonitor | None = None  # when watched
        self.metrics: MetricsScraper | None = None  # when scraped
        self.gpu: GpuWatch | None = None  # when the GPUs are read
        self.load = ClientLoadMonitor(on_sample=self._client_load)
        self._tasks: list[asyncio.Task] = []

    async def start(self, tg: asyncio.TaskGroup) -> None:
        w = self.cfg
        if w.health and await self._has_health_endpoint():
            from specload.watch.health import HealthMonitor

            self.health = HealthMonitor(self.url + "/health", clock=self.clock, on_change=self._on_health,
                                        streamed=self._streamed)
            self._tasks.append(tg.create_task(self.health.run()))
            await self.health.first_verdict()
        if w.metrics_url != "off":
            from specload.watch.metrics import MetricsScraper, probe_metrics

            url = w.metrics_url or self.url + "/metrics"
            if w.metrics_url or await probe_metrics(url):
                self.metrics = MetricsScraper(url, w.metrics_interval_s, clock=self.clock, on_sample=self._on_server,
                                              on_notice=self._notice)
                self._tasks.append(tg.create_task(self.metrics.run()))
        await self._start_gpu(tg)
        self._tasks.append(tg.create_task(self.load.run()))

    async def _start_gpu(self, tg: asyncio.TaskGroup) -> None:
        from specload.watch import gpu

        w = self.cfg
        kind, arg = gpu.parse_gpu_metrics(w.gpu_metrics)
        if kind == "auto":
            url = w.metrics_url if w.metrics_url not in (None, "off") else self.url + "/metrics"
            if w.metrics_url != "off" and await gpu.has_dcgm_series(url):
                kind, arg = "dcgm", url
            else:
                kind, why = await asyncio.to_thread(gpu.resolve_auto, self._server_local, gpu.load_nvml())
                if why:
                    self._notice(why)
        if kind == "off":
            return
        self.gpu = gpu.GpuWatch(kind, arg, w.metrics_interval_s, clock=self.clock, on_sample=self._on_gpu,
                                on_fault=self._on_gpu_fault, on_notice=self._notice)
        self._notice(f"GPU metrics from {gpu.describe(kind, arg)}")
        self._tasks.append(tg.create_task(self.gpu.run()))

    async def _has_health_endpoint(self) -> bool:
        import aiohttp

        # unreachable now: the monitor will report it
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=5), connector=aiohttp.TCPConnector(force_close=True)
            ) as s, s.get(self.url + "/health", allow_redirects=False, headers={"Accept-Encoding": "identity"}) as r:
                if r.status in (404, 405, 501):
                    self._notice(f"{self.url}/health answers HTTP {r.status}: server health not watched")
                    return False
        return True

    def mark_down(self, detail: str) -> None:
        """The engine saw a refused connection: down now, without waiting for the next poll."""
        if self.health is not None:
            self.health.mark_down(detail)

    def level_boundary(self) -> None:
        """A level starts: the counters now, so its first scrape interval begins with it."""
        if self.metrics is not None:
            self.metrics.scrape_soon()

    async def scrape_for_level(self) -> None:
        """A level ended: wait (bounded) for a scrape that starts now, so the level's server figures
        cover it to its end rather than up to an interval before."""
        if self.metrics is not None:
            await self.metrics.scrape_fresh(LEVEL_SCRAPE_S)

    async def final_scrape(self) -> None:
        """The last interval's counters, read before the server may be stopped."""
        if self.metrics is None:
            return
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(FINAL_SCRAPE_S):
                await self.metrics.scrape_now()

    async def stop(self) -> None:
        if self.gpu is not None:
            await self.gpu.stop()  # its reader's process group goes with it
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def _client_load(self, load: ClientLoad) -> None:
        # with --workers the streams are read in the workers: the most delayed process decides (its
        # CPU and the run-queue share of its delay come with it)
        for cpu, lag, wait in self._worker_loads():
            if cpu is None or lag is None:
                continue
            if lag > load.loop_lag_ms or cpu > load.cpu_pct:
                load = self.load.sample(
                    load.t_ns, max(cpu, load.cpu_pct), max(lag, load.loop_lag_ms),
                    wait if lag > load.loop_lag_ms else load.lag_cpu_wait_ms,
                )
        self._on_client_load(load)
