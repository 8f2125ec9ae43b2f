"""The composition root: one run, built from one ``RunConfig``, shared by the TUI and headless mode.

The session starts (or finds) the server, discovers its model and API, builds the client, runner,
live stats, recorder and server watch (log sources, crash detector, health, /metrics, the client's
own load), runs them together and tears everything down in order, whatever happens. Both front
ends talk to it the same way: controls are the runner's methods, continuous state is pulled with
``snapshot()``, and discrete happenings are pushed to one ``listener(kind, payload)`` callback.

Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import shlex
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from specload.clock import SYSTEM_CLOCK, Clock
from specload.config import RunConfig
from specload.engine.capacity import CapacityPart, SearchView
from specload.engine.client import StreamingClient
from specload.engine.probe import TargetError, discover
from specload.engine.prompts import PromptError, PromptSource
from specload.engine.runner import Runner, RunnerState
from specload.engine.search import CONCURRENCY, RATE, SearchResult, SearchSettings
from specload.record.writer import Recorder, RecordError
from specload.records import CrashEvent, ErrorKind, RequestRecord, RunEvent, ServerSample
from specload.secrets import Scrubber, redact_command
from specload.stats.client_load import ClientLoad, ClientLoadMonitor
from specload.stats.levels import LevelSummary
from specload.stats.live import LiveStats, StatsSnapshot
from specload.warmup import after_load, settle_before_load

Listener = Callable[[str, object], None]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CRASHED = 3
EXIT_SERVER_DOWN = 4
EXIT_ALL_FAILED = 5  # headless: the run completed but not one request succeeded
EXIT_WORKER_LOST = 6  # a load worker died and the run stopped (all of them, or --on-worker-death stop)
EXIT_INTERRUPTED = 130

MAX_STASH = 10_000  # record lines held while the server starts, before the record is open
_LISTENING = re.compile(r"listening on (https?://\S+)")


@dataclass(frozen=True, slots=True)
class SessionResult:
    reason: str  # completed, interrupted, stopped, crashed, error
    exit_code: int
    levels: tuple[LevelSummary, ...]
    message: str | None = None  # one line for the user when reason == "error"
    search: SearchResult | None = None  # the capacity search's result (the last one, in the TUI)


class SessionError(Exception):
    """A run that cannot start; the message is one line for the user."""


class Session:
    def __init__(
        self,
        cfg: RunConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        listener: Listener | None = None,
        stay_open: bool = False,
        on_crash: str | None = None,
        handle_signals: bool = False,
        down_timeout_s: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.listener: Listener = listener or (lambda kind, payload: None)
        self.stay_open = stay_open
        self.on_crash = on_crash or cfg.watch.on_crash
        self.handle_signals = handle_signals
        self.down_timeout_s = cfg.watch.down_timeout_s if down_timeout_s is None else down_timeout_s
        self.stats = LiveStats(clock)
        self.t0_ns = self.stats.t0
        self.runner: Runner | None = None
        self.recorder: Recorder | None = None
        self.client: StreamingClient | None = None
        self.url: str | None = cfg.target.url
        self.model: str | None = cfg.target.model
        self.api: str | None = None
        self.builtin_sim = cfg.target.url is None and cfg.watch.launch is None
        self.phase = "starting"  # starting, waiting for server, running, finished
        self.server_down = False
        self.log_lines: deque[tuple[int, str]] = deque(maxlen=2000)
        self.log_seq = 0
        self.notices: deque[str] = deque(maxlen=200)
        self.expect_seen: dict[str, str | None] = {p: None for p in cfg.watch.expect_log}
        self._launched = None
        self._sources: list = []
        self._health = None
        self._metrics = None
        self._load_monitor: ClientLoadMonitor | None = None
        self._detector = None
        self._book = None
        self._expect = None
        self._tasks: list[asyncio.Task] = []
        self._down_since: int | None = None
        self._paused_for_down = False
        self._url_found: asyncio.Future[str] | None = None
        self._end_reason: str | None = None
        self._interrupted = False
        self.signal: int | None = None  # the signal that interrupted the run, if one did
        self._starting: asyncio.Future | None = None
        self._stash: list[tuple[str, object]] = []  # record lines from before the record was opened
        # goodput (--slo) and the capacity search (--find-max, the TUI's key); headless runs without
        # either keep no per-request columns
        cap = cfg.capacity
        self.capacity: CapacityPart | None = None
        if cap.slo is not None or cap.find_max or stay_open:
            self.capacity = CapacityPart(
                cap.slo, clock=clock, t0_ns=self.t0_ns, open_loop=cfg.plan.rate is not None, seed=cfg.seed,
                on_event=self._search_event, collect_all=cap.slo is not None,
            )
        self._level_chain: asyncio.Future | None = None  # level summaries waiting for their goodput
        self._stash_dropped = 0
        self._warned_unstreamed = False
        # values that must never reach the screen, the record or a request error (specload.secrets)
        self.scrub = Scrubber(cfg.secret_values())

    # ------------------------------------------------------------------ public

    def snapshot(self) -> StatsSnapshot:
        return self.stats.snapshot()

    def runner_state(self) -> RunnerState | None:
        return self.runner.snapshot() if self.runner is not None else None

    def search_view(self) -> SearchView | None:
        return self.capacity.view() if self.capacity is not None else None

    def search_settings(self, *, start: float | None = None) -> SearchSettings:
        """The search as configured (``--rate``: the rate axis; the first -c level or --rate: the start)."""
        cap, plan = self.cfg.capacity, self.cfg.plan
        rate = plan.rate
        if rate is not None:
            return SearchSettings(
                axis=RATE, start=start or rate, max_value=cap.search_max or max(1e6, rate),
                min_value=min(rate, start or rate) / 64, max_probes=cap.max_probes,
                budget_s=cap.search_budget_s,
            )
        first = plan.levels[0].concurrency if plan.levels else 1
        begin = max(1.0, float(start or first))
        top = max(cap.search_max or 1024.0, begin)
        return SearchSettings(axis=CONCURRENCY, start=begin, max_value=top, max_probes=cap.max_probes,
                              budget_s=cap.search_budget_s)

    def start_search(self, *, start: float | None = None) -> bool:
        """Start a capacity search now (the TUI's key): the current level ends and the probes follow.
        False when there is no run to search on."""
        if self.capacity is None or self.runner is None or self.phase != "running":
            return False
        settings = self.search_settings(start=start)
        driver = self.capacity.new_search(settings, concurrency_cap=self._concurrency_cap())
        self.runner.set_source(driver)
        return True

    def stop_search(self, *, hold_best: bool = False) -> SearchResult | None:
        """End a search in progress (its result keeps what was confirmed); with ``hold_best`` the load
        then holds at the best point found (a held manual level)."""
        if self.capacity is None:
            return None
        result = self.capacity.stop_search("stopped by the user")
        if result is None and self.capacity.results:
            result = self.capacity.results[-1]
        if self.runner is not None:
            self.runner.set_source(None)
            if hold_best and result is not None and result.best is not None:
                if result.axis == CONCURRENCY:
                    self.runner.set_target(int(result.best.value), force=True)
                else:  # the best rate, open loop, its cap the concurrency the search gave it
                    self.runner.set_target(self._concurrency_cap(), force=True, rate=result.best.value)
        return result

    def _concurrency_cap(self) -> int:
        levels = self.cfg.plan.levels
        return max((lv.concurrency for lv in levels), default=1024) if self.cfg.plan.rate is not None else 1024

    def state_label(self) -> str:
        if self.phase != "running" or self.runner is None:
            return self.phase
        if self.server_down:
            return "server down"
        return self.runner.state

    def marker(self, note: str = "") -> None:
        self._event(RunEvent(self.clock.now_ns(), "marker", note))

    def interrupt(self, reason: str = "interrupted") -> None:
        """Quit: no new requests, in-flight ones recorded as cancelled, the record closed."""
        self._interrupted = True
        self._end_reason = self._end_reason or reason
        if self._starting is not None and not self._starting.done():
            # still waiting for the server to come up (it may load for minutes): stop waiting
            self._starting.cancel()
        if self.runner is not None:
            self.runner.stop(reason)
            self.runner.cancel_in_flight()

    def signalled(self, sig: int) -> None:
        """SIGINT, SIGTERM, SIGHUP: quit as 'q' does; the exit status says which (128 + signal)."""
        if self.signal is None:
            self.signal = sig
        self.interrupt()

    async def run(self) -> SessionResult:
        loop = asyncio.get_running_loop()
        if self.handle_signals:
            # SIGHUP: the terminal went away (ssh dropped, tmux killed); the launched server runs in
            # a session of its own and would be left running, the record without its end line
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                try:
                    loop.add_signal_handler(sig, self.signalled, sig)
                except (NotImplementedError, RuntimeError):
                    pass
        self._check_fd_limit()
        outcome: tuple[str, int, str | None]
        try:
            self._starting = asyncio.ensure_future(self._start_server())
            try:
                await self._starting
            except asyncio.CancelledError:
                if not self._interrupted:
                    raise
            if not self._interrupted:
                # building may wait too (a slow /v1/models, Ray starting or joining a cluster):
                # an interrupt stops that wait as it stops the wait for the server
                self._starting = asyncio.ensure_future(self._build())
                try:
                    await self._starting
                except asyncio.CancelledError:
                    if not self._interrupted:
                        raise
            if self._interrupted:
                outcome = ("interrupted", self._interrupted_code(), None)
            else:
                settle_before_load()
                self.phase = "running"
                self.listener("phase", self.phase)
                reason = await self._run_load()
                code = {
                    "completed": EXIT_OK,
                    "crashed": EXIT_CRASHED,
                    "server down": EXIT_SERVER_DOWN,
                    "worker lost": EXIT_WORKER_LOST,
                    "interrupted": self._interrupted_code(),
                }.get(reason, EXIT_OK)
                outcome = (reason, code, None)
        except (TargetError, RecordError, PromptError, SessionError) as e:
            outcome = ("error", EXIT_ERROR, str(e))
        finally:
            after_load()
            # torn down before the record is closed: crashes the detector still holds get recorded
            await self._teardown()
        return self._finish(*outcome)

    def _check_fd_limit(self) -> None:
        """Each stream holds a socket: raise the open-file limit for the highest planned concurrency,
        and say so up front when it cannot be (requests beyond it fail in specload, not the server)."""
        from specload.neterrors import raise_fd_limit

        peak = max((lv.concurrency for lv in self.cfg.plan.levels), default=1)
        limit = raise_fd_limit(peak + 256)
        if limit is not None and limit < peak + 64:
            self._notice(f"open-file limit {limit} (ulimit -n) is too low for C={peak}: requests beyond "
                         f"about {max(1, limit - 32)} in flight will fail in specload; raise it with ulimit -n")

    def _interrupted_code(self) -> int:
        # a shell reports a process ended by signal N as 128 + N: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
        return 128 + self.signal if self.signal is not None else EXIT_INTERRUPTED

    # ------------------------------------------------------------------ phases

    def _notice(self, text: str) -> None:
        text = self.scrub(redact_command(text) or "")
        self.notices.append(text)
        self.listener("notice", text)

    async def _start_server(self) -> None:
        from specload.watch.launch import LaunchedServer, ReadyTimeoutError, ServerExitedError

        w = self.cfg.watch
        cmd = w.launch
        if self.builtin_sim:
            args = " ".join(shlex.quote(a) for a in self.cfg.sim_args)
            cmd = f"{shlex.quote(sys.executable)} -m specload.sim --host 127.0.0.1 --port 0 {args}".strip()
            self._notice("no server URL given: starting the built-in simulator")
        if cmd is None:
            self._start_log_sources()
            return
        health_url = None if self.url is None else self.url + "/health"
        env = None
        if self.builtin_sim:
            import os

            from specload.sim.cli import PARENT_ENV

            # the simulator leaves by itself when specload is gone, even by SIGKILL
            env = {**os.environ, PARENT_ENV: str(os.getpid())}
        self._launched = LaunchedServer(
            cmd, health_url, ready_timeout=w.ready_timeout_s, grace=w.stop_grace_s, on_notice=self._notice, env=env
        )
        self.phase = "waiting for server"
        self.listener("phase", self.phase)
        self._url_found = asyncio.get_running_loop().create_future()
        try:
            await self._launched.start()
            self._start_log_sources()
            if self.url is None:
                self.url = await self._wait_for_url()
                self._launched.health_url = self.url + "/health"
            await self._launched.wait_ready(on_progress=self._ready_progress)
        except ServerExitedError as e:
            tail = " | ".join(e.last_lines[-3:])
            raise SessionError(f"launched server {e.exit.description} before it was ready: {tail}"[:400]) from None
        except ReadyTimeoutError as e:
            raise SessionError(f"launched server: {e}") from None
        except OSError as e:
            raise SessionError(f"cannot launch {cmd!r}: {e}") from None
        if self.builtin_sim:
            self._notice(f"built-in simulator on {self.url}")
        if self._expect is not None:
            ok = await self._expect.wait(w.expect_timeout_s)
            self._report_expect(ok)

    async def _wait_for_url(self) -> str:
        assert self._url_found is not None and self._launched is not None
        exit_wait = asyncio.ensure_future(self._launched.wait_exit())
        try:
            done, _ = await asyncio.wait({self._url_found, exit_wait}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exit_wait.cancel()
        if self._url_found.done():
            return self._url_found.result()
        raise SessionError("the built-in simulator did not start: " + " | ".join(self._launched.last_lines(3)))

    def _ready_progress(self, elapsed: float, last_line: str | None) -> None:
        if int(elapsed * 4) % 20 == 0:  # every 5 s at the 0.25 s poll
            self.listener("waiting", (elapsed, last_line))

    def _report_expect(self, ok: bool) -> None:
        assert self._expect is not None
        for p in self.cfg.watch.expect_log:
            m = self._expect.seen.get(p)
            self.expect_seen[p] = m.line if m else None
            self._event(RunEvent(self.clock.now_ns(), "expect", {"pattern": p, "seen": m is not None}))
            self._notice(f"expected log line {p!r}: " + ("seen" if m else "NOT seen"))

    def _start_log_sources(self) -> None:
        from specload.watch.expect import ExpectLog
        from specload.watch.signatures import CrashDetector, SignatureBook

        w = self.cfg.watch
        self._detector = CrashDetector()
        self._book = SignatureBook()
        if w.expect_log:
            self._expect = ExpectLog(w.expect_log, clock=self.clock)
        if w.server_log:
            from specload.watch.tail import FileTail

            self._sources.append(FileTail(w.server_log, from_start=w.server_log_from_start, on_notice=self._notice))
        if w.server_log_cmd:
            from specload.watch.command import CommandSource

            self._sources.append(CommandSource(w.server_log_cmd, on_notice=self._notice))
        if self._launched is not None:
            self._sources.append(self._launched)
        for src in self._sources:
            self._tasks.append(asyncio.ensure_future(self._consume(src)))
        if self._sources:
            self._tasks.append(asyncio.ensure_future(self._poll_detector()))

    async def _consume(self, source) -> None:
        from specload.watch.server_stats import parse_stats_line

        detector, book, clock = self._detector, self._book, self.clock
        scrub = self.scrub
        async for line in source.lines():
            t = clock.now_ns()
            if scrub:
                # a server may log its own arguments, API key included (vLLM does at start-up)
                line = scrub(line)
            self.log_seq += 1
            self.log_lines.append((self.log_seq, line))
            if self._url_found is not None and not self._url_found.done():
                m = _LISTENING.search(line)
                if m:
                    self._url_found.set_result(m.group(1).rstrip("/"))
            if self._expect is not None:
                self._expect.feed(line)
            for entry in detector.feed(line, t):
                self._crash_entry(book.add(entry, t))
            sample = parse_stats_line(line, t)
            if sample is not None:
                self._server(sample)

    async def _poll_detector(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            t = self.clock.now_ns()
            for entry in self._detector.poll(t):
                self._crash_entry(self._book.add(entry, t))

    async def _build(self) -> None:
        cfg = self.cfg
        assert self.url is not None
        headers = cfg.request_headers()
        probes: list[dict] = []
        try:
            self.api, model = await discover(
                self.url, api=cfg.target.api, model=cfg.target.model, headers=headers, sent=probes
            )
        finally:
            if probes:  # the server saw (and counts) these requests: say so in the record
                self._event(RunEvent(self.clock.now_ns(), "probe", {"requests": probes}))
        self.model = model
        self.listener("target", {"url": self.url, "model": self.model, "api": self.api})
        prompts = PromptSource.from_options(
            prompt=cfg.request.prompt,
            prompt_file=cfg.request.prompt_file,
            dataset=cfg.request.dataset,
            prompt_tokens=cfg.request.prompt_tokens,
            seed=cfg.seed,
        )
        client_cls = StreamingClient
        if cfg.ray:
            from specload.engine.ray_workers import RayPoolClient

            client_cls = functools.partial(RayPoolClient, cfg.workers, address=cfg.ray)  # type: ignore[assignment]
        elif cfg.workers > 1:
            from specload.engine.workers import WorkerPoolClient

            client_cls = functools.partial(WorkerPoolClient, cfg.workers)  # type: ignore[assignment]
        self.client = client_cls(
            self.url,
            self.api,
            model=model,
            target=cfg.target,
            request=cfg.request,
            headers=headers,
            clock=self.clock,
            on_tokens=self.stats.on_tokens,
            scrubber=self.scrub,
        )
        if hasattr(self.client, "on_worker_lost"):
            self.client.on_worker_lost = self._worker_lost
        if cfg.ray:
            from specload.engine.ray_workers import RayStartError

            try:
                await self.client.start()
            except RayStartError as e:  # no cluster at that address, actors that cannot be placed
                raise SessionError(str(e)) from None
        else:
            await self.client.start()
        plan = cfg.plan
        if cfg.capacity.find_max:
            # the search decides every level; the ramp's levels only give it its start
            plan = dataclasses.replace(plan, levels=())
        self.runner = Runner(
            self.client,
            prompts,
            plan,
            clock=self.clock,
            on_record=self._record,
            on_event=self._event,
            on_level=self._level,
            stay_open=self.stay_open,
            seed=cfg.seed,
        )
        if self.capacity is not None and cfg.capacity.find_max:
            settings = self.search_settings()
            self.runner.source = self.capacity.new_search(settings, concurrency_cap=self._concurrency_cap())
            if settings.axis == CONCURRENCY:
                self.runner.target = int(settings.start)  # the warm-up runs at the first probe's load
        self._open_recorder()
        await self._start_watchers()

    def _open_recorder(self) -> None:
        """Open the record and write what happened before it could be opened (expect-log results,
        crashes and server lines seen while the server started)."""
        if not self.cfg.record.path or self.recorder is not None:
            return
        self.recorder = Recorder(
            self.cfg.record.path,
            clock=self.clock,
            t0_ns=self.t0_ns,
            with_chunks=self.cfg.record.with_chunks,
            scrubber=self.scrub,
            on_error=self._record_failed,
        )
        header = self.cfg.describe()
        header.update({"target": self.url, "model": self.model, "api": self.api, "builtin_sim": self.builtin_sim})
        # how the times of requests measured by other processes or machines sit on this timeline
        header["timeline"] = getattr(self.client, "timeline", None) or {
            "clock": "CLOCK_MONOTONIC of this machine" + (", shared by the worker processes" if self.cfg.workers > 1 else ""),
            "alignment": "none needed",
        }
        self.recorder.open(header)
        stash, self._stash = self._stash, []
        for method, payload in stash:
            getattr(self.recorder, method)(payload)
        if self._stash_dropped:
            self._notice(f"{self._stash_dropped} record lines from while the server started were not kept "
                         f"(more than {MAX_STASH})")

    def _to_record(self, method: str, payload: object) -> None:
        if self.recorder is not None:
            getattr(self.recorder, method)(payload)
        elif self.cfg.record.path:
            # bounded: a server may log for many minutes while it loads, and a flood of stats or
            # crash lines must not grow memory before the record exists
            if len(self._stash) < MAX_STASH:
                self._stash.append((method, payload))
            else:
                self._stash_dropped += 1

    async def _start_watchers(self) -> None:
        w = self.cfg.watch
        assert self.url is not None
        if w.health and await self._has_health_endpoint():
            from specload.watch.health import HealthMonitor

            self._health = HealthMonitor(self.url + "/health", clock=self.clock, on_change=self._health_change)
            self._tasks.append(asyncio.ensure_future(self._health.run()))
        if w.metrics_url != "off":
            from specload.watch.metrics import MetricsScraper, probe_metrics

            url = w.metrics_url or self.url + "/metrics"
            if w.metrics_url or await probe_metrics(url):
                self._metrics = MetricsScraper(url, w.metrics_interval_s, clock=self.clock, on_sample=self._server, on_notice=self._notice)
                self._tasks.append(asyncio.ensure_future(self._metrics.run()))
        self._load_monitor = ClientLoadMonitor(on_sample=self._client_load)
        self._tasks.append(asyncio.ensure_future(self._load_monitor.run()))
        if self.recorder is not None:
            self._tasks.append(asyncio.ensure_future(self._flush_record()))
        if self._launched is not None:
            self._tasks.append(asyncio.ensure_future(self._watch_exit()))

    async def _has_health_endpoint(self) -> bool:
        """A server (or proxy) without /health must not be taken for a dead one and paused."""
        import aiohttp

        try:
            async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=5), connector=aiohttp.TCPConnector(force_close=True)
            ) as s, s.get(self.url + "/health") as r:
                if r.status in (404, 405, 501):
                    self._notice(f"{self.url}/health answers HTTP {r.status}: server health not watched")
                    return False
        except (aiohttp.ClientError, TimeoutError):
            pass  # unreachable now: the monitor will report it
        return True

    async def _run_load(self) -> str:
        assert self.runner is not None
        reason = await self.runner.run()
        reason = self._end_reason or reason
        if self.capacity is not None:
            self.capacity.run_ended(reason)
        return reason

    async def _teardown(self) -> None:
        if self.runner is not None:
            await self.runner.cancel_and_wait()
        if self.capacity is not None:
            self.capacity.run_ended(self._end_reason or "stopped")
        if self._level_chain is not None:
            # the last levels' goodput, before the record closes
            await asyncio.gather(self._level_chain, return_exceptions=True)
        if self._metrics is not None and self.phase == "running":
            # the last interval's counters, read before the server may be stopped
            try:
                async with asyncio.timeout(3):
                    await self._metrics.scrape_now()
            except (TimeoutError, OSError):
                pass
        await self._drain_logs()
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._detector is not None:
            t = self.clock.now_ns()
            for entry in self._detector.finish():
                self._crash_entry(self._book.add(entry, t))
        if self.client is not None:
            await self.client.close()
        if self._launched is not None:
            # shielded: a cancelled teardown must not leave the server running
            ex = await asyncio.shield(self._launched.stop())
            if ex is not None:
                self._notice(f"launched server {ex.description}")
        self.phase = "finished"

    async def _drain_logs(self) -> None:
        """Read the server's last lines before the log readers are cancelled: the final requests'
        log lines (llama.cpp prints them as each response ends) and a crash printed at the very
        end. Files get a last read; other sources get until their output is quiet (bounded)."""
        if not self._sources:
            return
        for src in self._sources:
            if src is not self._launched:
                try:
                    await src.stop()
                except Exception:  # noqa: BLE001 - teardown goes on whatever a source does
                    pass
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        seq = self.log_seq
        quiet_since = loop.time()
        while loop.time() < deadline:
            await asyncio.sleep(0.05)
            if self.log_seq != seq:
                seq, quiet_since = self.log_seq, loop.time()
            elif loop.time() - quiet_since >= 0.2:
                break

    def _finish(self, reason: str, code: int, message: str | None = None) -> SessionResult:
        if self.recorder is None and self.cfg.record.path and reason == "error":
            # the run never started (server died while starting, target unreachable): still leave a
            # record of what was seen, with the crash the server printed
            try:
                self._open_recorder()
                if message and self.recorder is not None:
                    self.recorder.event(RunEvent(self.clock.now_ns(), "error", message))
            except RecordError:
                pass
        if self.recorder is not None and not self.recorder.closed:
            end = {"server down": "stopped", "worker lost": "stopped",
                   "error": "crashed" if self.stats.snapshot().crashes else "stopped"}
            self.recorder.close(end.get(reason, reason))
        if self.recorder is not None and self.recorder.error is not None:
            r = self.recorder
            lost = f"{r.lines_lost} record line{'s' if r.lines_lost != 1 else ''} lost"
            message = message or f"{r.error}; {lost}, the record ends at its last complete line ({r.lines_written} lines)"
            code = code or EXIT_ERROR
        search = self.capacity.results[-1] if self.capacity is not None and self.capacity.results else None
        result = SessionResult(reason, code, tuple(self.stats.snapshot().levels), message, search)
        self.listener("end", result)
        return result

    # ------------------------------------------------------------------ sinks

    def _record(self, rec: RequestRecord) -> None:
        if rec.ok and rec.chunks == 1 and rec.output_tokens > 1 and not self._warned_unstreamed:
            self._warned_unstreamed = True
            self._notice(f"the server sent a whole answer of {rec.output_tokens} tokens in one piece (not "
                         "streamed: \"stream\": false in --extra-body?): TTFT is the whole answer's time, "
                         "TPOT and ITL cannot be measured")
        self.stats.on_record(rec)
        if self.capacity is not None:
            self.capacity.on_record(rec)
        if self.recorder is not None:
            self.recorder.request(rec)
        if rec.error_kind is ErrorKind.CONNECT and self._health is not None and not self._interrupted:
            self._health.mark_down(rec.error_detail or "connection refused")

    def _event(self, ev: RunEvent) -> None:
        self.stats.on_event(ev)
        self._to_record("event", ev)
        self.listener("event", ev)

    def _level(self, summary: LevelSummary) -> None:
        if self.capacity is not None and self.capacity.spec is not None:
            # goodput bootstraps over the level's requests: in a thread, the summaries kept in order
            self._level_chain = asyncio.ensure_future(self._level_with_goodput(self._level_chain, summary))
            return
        self._level_done(summary)

    async def _level_with_goodput(self, before: asyncio.Future | None, summary: LevelSummary) -> None:
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        assert self.capacity is not None
        try:
            summary = await self.capacity.finish_level(summary)
        except Exception as e:  # noqa: BLE001 - a statistic that fails must not lose the level
            self._notice(f"goodput of level {summary.level_index} could not be computed: {e}")
        self._level_done(summary)

    def _search_event(self, value: dict) -> None:
        self._event(RunEvent(self.clock.now_ns(), "search", value))

    def _level_done(self, summary: LevelSummary) -> None:
        if self._metrics is not None:
            # per-level server figures: the counters as the level ends, not up to a second later
            self._tasks.append(asyncio.ensure_future(self._metrics.scrape_now()))
        self.stats.on_level(summary)
        if self.recorder is not None:
            self.recorder.level(summary)
        self.listener("level", summary)

    def _server(self, sample: ServerSample) -> None:
        self.stats.on_server(sample)
        self._to_record("server", sample)

    def _crash_entry(self, ev: CrashEvent | None) -> None:
        # None: the entry changed nothing (a re-print, one more copy of a known consequence)
        if ev is not None:
            self._crash(ev)

    def _crash(self, ev: CrashEvent) -> None:
        self.stats.on_crash(ev)
        self._to_record("crash", ev)
        self.listener("crash", ev)
        if not ev.new or self.runner is None:
            return
        if self.capacity is not None:
            # whatever --on-crash says, a search under a crashed server has no best point
            self.capacity.server_failed(f"{ev.exception_type}: {ev.message}")
        if self.on_crash == "pause":
            self.runner.pause()
        elif self.on_crash == "stop":
            self._end_reason = self._end_reason or "crashed"
            self.runner.stop("crashed")
            self.runner.cancel_in_flight()

    def _worker_lost(self, index: int, why: str, left: int) -> None:
        """A load worker died (``--workers``): its in-flight requests come back as ``lost``
        records; the run goes on with the others, or stops when none is left or the user said so."""
        stop = left == 0 or self.cfg.on_worker_death == "stop"
        self._event(RunEvent(self.clock.now_ns(), "worker_lost", {"worker": index, "detail": why, "left": left}))
        then = "stopping" if stop else f"continuing on {left} worker{'s' if left != 1 else ''}"
        self._notice(f"load {why}: its requests in flight are recorded as lost; {then}")
        if stop and self.runner is not None:
            self._end_reason = self._end_reason or "worker lost"
            self.runner.stop("stopped")
            self.runner.cancel_in_flight()

    def _health_change(self, ev: RunEvent, detail: str) -> None:
        self._event(RunEvent(ev.t_ns, ev.kind, ev.value))
        if ev.value == "down":
            self.server_down = True
            self._down_since = ev.t_ns
            self._notice(f"server down: {detail}")
            if self.capacity is not None:
                self.capacity.server_failed(f"server down: {detail}")
            if self.runner is not None and not self.runner.paused:
                self._paused_for_down = True
                self.runner.pause()
            if self._down_since is not None:
                self._tasks.append(asyncio.ensure_future(self._down_watchdog(ev.t_ns)))
        elif ev.value == "up":
            was_down = self.server_down
            self.server_down = False
            self._down_since = None
            if was_down:
                self._notice("server up again")
            if self._paused_for_down and self.runner is not None:
                self._paused_for_down = False
                self.runner.resume()

    async def _down_watchdog(self, since: int) -> None:
        await asyncio.sleep(self.down_timeout_s)
        if self.server_down and self._down_since == since and self.runner is not None and not self.stay_open:
            self._notice(f"server down for {self.down_timeout_s:g} s: stopping")
            self._end_reason = self._end_reason or "server down"
            self.runner.stop("stopped")
            self.runner.cancel_in_flight()

    async def _watch_exit(self) -> None:
        assert self._launched is not None
        ex = await self._launched.wait_exit()
        if self.phase == "running":
            self._event(RunEvent(self.clock.now_ns(), "server_exit", ex.description))
            self._notice(f"launched server {ex.description}")
            if self.capacity is not None:
                self.capacity.server_failed(f"the launched server {ex.description}")

    def _client_load(self, load: ClientLoad) -> None:
        worker_loads = getattr(self.client, "worker_loads", None)
        if worker_loads and self._load_monitor is not None:
            # with --workers the streams are read in the workers: the most delayed process decides
            # (its CPU and the run-queue share of its delay come with it)
            for cpu, lag, wait in worker_loads:
                if cpu is None or lag is None:
                    continue
                if lag > load.loop_lag_ms or cpu > load.cpu_pct:
                    load = self._load_monitor.sample(
                        load.t_ns, max(cpu, load.cpu_pct), max(lag, load.loop_lag_ms),
                        wait if lag > load.loop_lag_ms else load.lag_cpu_wait_ms,
                    )
        self.stats.on_client_load(load.cpu_pct, load.loop_lag_ms, load.saturated, load.starved)
        level = self.runner.target if self.runner is not None else 0
        if self.recorder is not None:
            self.recorder.client(self.clock.now_ns(), load, level)
        if load.saturated or load.starved:
            self.listener("saturated", (load, level))

    async def _flush_record(self) -> None:
        assert self.recorder is not None
        while self.recorder.error is None:
            await asyncio.sleep(0.5)
            self.recorder.flush()

    def _record_failed(self, error: str) -> None:
        """The record cannot be written (a full disk, a vanished mount): stop rather than run a
        load nobody can read back. Called from inside the recorder, which may be inside the
        runner's bookkeeping of a finished request: the stop itself waits for the next loop turn."""
        self._end_reason = self._end_reason or "stopped"
        self._notice(f"{error}: stopping the run")

        def stop() -> None:
            if self.runner is not None:
                self.runner.stop("stopped")
                self.runner.cancel_in_flight()

        asyncio.get_running_loop().call_soon(stop)
