"""The composition root: one run, built from one ``RunConfig``, shared by the TUI and headless mode.

``Session.run`` does four things in order under one TaskGroup: start the server (or find it), build
the engine (discover the API, the prompts, the client, the runner; start the server watch), run the
load, and tear everything down in the order ``_teardown`` spells out, whatever happened; the record
is closed last (whenever one was asked for) saying how the run ended. Whatever ends the run (a quit,
a signal, a crash under ``--on-crash stop``) ends it in any phase: no load begins after it. What is
built is decided in ``build.py``, what ends the run in ``policy.py``; front ends read the session's
frame (``sources/local.py``) and hear it through a ``SessionListener``. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from specload.clock import SYSTEM_CLOCK, Clock
from specload.config import RunConfig
from specload.engine.probe import TargetError
from specload.engine.prompts import PromptError, PromptSource
from specload.engine.runner import LoadClient, Runner
from specload.exitcode import ExitCode
from specload.record.sink import RecordError, RecordSink
from specload.secrets import Scrubber
from specload.session import build, policy, search
from specload.session.build import SessionError
from specload.session.fanout import Fanout
from specload.session.listener import NullListener, SessionListener
from specload.session.policy import RunPolicy, SessionResult
from specload.stats.live import LiveStats
from specload.stats.live_judge import LiveJudge
from specload.stats.lossless import LiveOutputs
from specload.warmup import after_load, settle_before_load
from specload.watch.logwatch import LogWatch
from specload.watch.serverwatch import ServerWatch
from specload.watch.supervisor import ServerStartError, ServerSupervisor

__all__ = ["Session", "SessionError", "SessionListener", "SessionResult", "NullListener"]


class Session:
    def __init__(self, cfg: RunConfig, *, clock: Clock = SYSTEM_CLOCK, listener: SessionListener | None = None,
                 stay_open: bool = False, on_crash: str | None = None, handle_signals: bool = False,
                 down_timeout_s: float | None = None) -> None:
        self.cfg, self.clock, self.stay_open = cfg, clock, stay_open
        self.listener: SessionListener = listener or NullListener()
        self.stats = LiveStats(clock)
        self.t0_ns = self.stats.t0
        self.scrub = Scrubber(cfg.secret_values())  # never on screen, in the record or a request error
        self.runner: Runner | None = None
        self.client: LoadClient | None = None  # once built
        self.url, self.model = cfg.target.url, cfg.target.model
        self.api: str | None = None  # the flavour discovery settled on
        self.phase = "starting"  # starting, waiting for server, calibrating, running, finished, crashed, error
        self.signal: int | None = None  # the signal that interrupted the run, if one did
        self.record = RecordSink(cfg.record, clock=clock, t0_ns=self.t0_ns, scrub=self.scrub,
                                 on_error=lambda error: self.policy.record_failed(error),
                                 on_notice=lambda text: self.fan.notice(text))
        self.fan = fan = Fanout(stats=self.stats, record=self.record, listener=self.listener, scrub=self.scrub,
                                now_ns=clock.now_ns, gpu_interval_s=cfg.watch.metrics_interval_s)
        self.capacity = fan.capacity = search.capacity_part(cfg, stay_open=stay_open, clock=clock, t0_ns=self.t0_ns,
                                                            on_event=fan.search_event)
        w = cfg.watch
        self.policy = fan.policy = RunPolicy(
            on_crash=on_crash or w.on_crash, down_timeout_s=w.down_timeout_s if down_timeout_s is None else down_timeout_s,
            stay_open=stay_open, on_worker_death=cfg.on_worker_death, notice=fan.notice, event=fan.event,
            now_ns=clock.now_ns, on_stop=self._cancel_start)
        self.policy.capacity, self.policy.on_divergence = self.capacity, cfg.compare.on_divergence
        self.supervisor = ServerSupervisor(cfg, on_notice=fan.notice, scrub=self.scrub)
        self.logs = LogWatch(w, clock=clock, scrub=self.scrub, on_crash=fan.crash, on_server=fan.server,
                             on_notice=fan.notice)
        self.logs.observers.append(self.supervisor.observe_line)
        self.watch: ServerWatch | None = None
        self.judge: LiveJudge | None = None  # --baseline, --target-ci, --until-decided
        self._starting: asyncio.Future | None = None  # the start step under way (a quit cancels it)
        self._background: list[asyncio.Task] = []  # the record's flush loop, the launched server's exit watch
        self._prompts: PromptSource | None = None
        self.outputs: LiveOutputs | None = None  # --check-outputs with --baseline
        self._signals = policy.catch_signals(self.signalled) if handle_signals else ()  # the loop's, once it runs

    on_crash = property(lambda self: self.policy.on_crash)
    log_lines = property(lambda self: self.logs.lines)

    def state_label(self) -> str:
        if self.phase != "running" or self.runner is None:
            return self.phase
        return "server down" if self.policy.server_down else self.runner.state

    def interrupt(self, reason: str = "interrupted") -> None:
        """Quit: no new requests, in-flight ones recorded as cancelled, the record closed."""
        self.policy.interrupt(reason)

    def signalled(self, sig: int) -> None:
        """SIGINT, SIGTERM, SIGHUP: quit as 'q' does; the exit status says which (128 + signal)."""
        self.signal = self.signal or sig
        self.interrupt()

    # ------------------------------------------------------------------ the run

    async def run(self) -> SessionResult:
        for sig in self._signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(sig, self.signalled, sig)
        build.say_before_start(self.cfg, self.fan.notice)
        outcome: tuple[str, str | None] = ("error", None)
        try:
            async with asyncio.TaskGroup() as tg:
                try:
                    outcome = await self._run(tg), None
                except (TargetError, RecordError, PromptError, SessionError, ServerStartError) as e:
                    outcome = ("error", str(e))
                finally:
                    after_load()
                    await self._teardown()
        except* Exception as eg:  # noqa: BLE001 - a programming error in one of the run's tasks: end cleanly, say it
            first = eg.exceptions[0]
            outcome = ("error", f"internal error: {type(first).__name__}: {first}")
        if outcome[0] == "completed" and self.policy.end_reason == "crashed":  # seen in the last log lines
            outcome = ("crashed", None)
        return self._finish(*outcome)

    async def _run(self, tg: asyncio.TaskGroup) -> str:
        await self._step(self._start_server(tg))
        await self._step(self._build(tg))
        ran = None
        if self.policy.end_reason is None and self.runner is not None:  # else ended while starting: no load
            settle_before_load()
            self._set_phase("running")
            ran = await self.runner.run()
        reason = self.policy.end_reason or ran or "completed"
        if reason == "interrupted" and self.stay_open and self.signal is None:  # the TUI's q
            reason = self.policy.quit_reason(crashed=bool(self.stats.snapshot().crashes))
        if self.capacity is not None:
            self.capacity.run_ended(reason)
        return reason

    async def _step(self, step: Coroutine[Any, Any, None]) -> None:
        """A start step that may wait for minutes (a server loading, calibration, Ray joining), in a
        task of its own: whatever ends the run cancels just that wait (or skips it, ended before)."""
        if self.policy.end_reason is not None:
            step.close()
            return
        self._starting = asyncio.ensure_future(step)
        try:
            await self._starting
        except asyncio.CancelledError:
            if self.policy.end_reason is None:
                raise
        finally:
            self._starting = None

    def _cancel_start(self) -> None:
        if self._starting is not None:
            self._starting.cancel()

    async def _start_server(self, tg: asyncio.TaskGroup) -> None:
        launched = await self.supervisor.spawn()
        if launched is not None:
            self._set_phase("waiting for server")
        self.logs.start(tg, launched)
        self.url = await self.supervisor.wait_ready()
        build.say_expected(await self.logs.expected(), self.fan, self.clock.now_ns)

    async def _build(self, tg: asyncio.TaskGroup) -> None:
        cfg, url, fan, now = self.cfg, self.url, self.fan, self.clock.now_ns
        assert url is not None
        headers = cfg.request_headers()
        self.api, self.model = await build.target(cfg, url, headers, fan=fan, now_ns=now,
                                                  launched=self.supervisor.launched if cfg.watch.launch else None)
        api = self.api
        self.listener.target_found(url, self.model, api)
        self._prompts = prompts = build.prompts_for(cfg)
        if prompts.synthetic:
            self._set_phase("calibrating")
            await build.calibrate_prompts(cfg, prompts, url, api, self.model, headers, now_ns=now, event=fan.event,
                                          notice=fan.notice)
            self._set_phase("starting")
        if not prompts.synthetic or prompts.trace is not None:
            fan.notice(prompts.summary())
        cfg, check = await build.check_outputs(cfg, url, api, self.model, headers, prompts, fan=fan, now_ns=now)
        self.cfg = cfg  # --check-outputs settles --logprobs
        self.client = client = build.client_for(cfg, url, api, self.model, headers, self.clock, self.stats, self.scrub,
                                                self.policy.worker_lost)
        client.on_event, client.on_notice = fan.event, fan.notice  # the switch to new connections
        await build.start_client(client, cfg)
        plan, arrivals = build.plan_for(cfg, prompts)
        self.judge, self.outputs = build.judge_for(cfg, self.t0_ns, fan, self._header(), checking=check is not None)
        extend = self.judge.extend if self.judge is not None and self.judge.judging else None
        self.runner = runner = Runner(client, prompts, plan, clock=self.clock, on_record=fan.request, on_event=fan.event,
                                      on_level=fan.level, stay_open=self.stay_open, seed=cfg.seed, extend=extend,
                                      arrivals=arrivals, before_level=check.before_level if check else None,
                                      on_ramp_end=self.record.flush)  # (the dashboard reads it then)
        search.search_from_the_start(cfg, self.capacity, runner)
        self.policy.attach(runner)  # a crash seen while starting pauses it now (--on-crash pause)
        fan.tg = tg
        self.record.open(self._header())
        self._background = [tg.create_task(self.record.flush_loop()),
                            tg.create_task(self.supervisor.watch_exit(fan.server_exit))]
        self.watch = fan.watch = build.server_watch(cfg, url, client, clock=self.clock, fan=fan,
                                                    launched=self.supervisor.command() is not None)
        await self.watch.start(tg)

    async def _teardown(self) -> None:
        """The order matters: requests recorded as cancelled first; the last /metrics and log lines
        read while the server still runs; the watchers stopped before the detector is flushed (its
        crashes get recorded); the server stopped last. The record is closed after all of it."""
        if self.runner is not None:
            await self.runner.cancel_and_wait()
        if self.capacity is not None:
            self.capacity.run_ended(self.policy.end_reason or "stopped")
        if self.fan.level_chain is not None:  # the last levels' goodput and server figures, before the record closes
            await asyncio.gather(self.fan.level_chain, return_exceptions=True)
        if self.watch is not None and self.phase == "running" and not self.policy.server_down:
            await self.watch.final_scrape()  # a server found down would only cost its 3 s timeout
        await self.logs.drain()
        self.fan.running = False
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.watch is not None:
            await self.watch.stop()
        await self.logs.stop()
        self.logs.finish()
        self.policy.cancel_timers()
        if self.client is not None:
            await self.client.close()
        await self.supervisor.stop()

    def _finish(self, reason: str, message: str | None) -> SessionResult:
        code = policy.exit_code(reason, self.signal, diverged=self.policy.diverged)
        snap, warnings = self.stats.snapshot(), build.workload_warnings(self.fan, self._prompts)
        record_error = self.record.close(policy.end_line(reason, bool(snap.crashes)), header=self._header(),
                                         message=message, extra={"workload_warnings": warnings})
        if record_error is not None:
            message, code = message or record_error, code or ExitCode.ERROR
        found = self.capacity.results[-1] if self.capacity is not None and self.capacity.results else None
        result = SessionResult(reason, code, tuple(snap.levels), message, found, snap.crashes, tuple(warnings))
        self.phase = policy.last_phase(reason)
        self.listener.ended(result)
        return result

    def _header(self) -> dict:
        return build.header(self.cfg, target=self.url, model=self.model, api=self.api,
                            builtin_sim=self.supervisor.builtin, prompts=self._prompts, client=self.client)

    def _set_phase(self, phase: str) -> None:
        self.phase, self.fan.running = phase, phase == "running"
        self.listener.phase(phase)
