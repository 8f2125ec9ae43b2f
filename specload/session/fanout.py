"""Where each happening of a run goes: the live stats, the record, the run policy and the front end.

The parts of a session (runner, log watch, server watch, supervisor, recorder) report through these
methods and know nothing of each other; ``Fanout`` hands each report to every place that needs it, in
the same order every time: stats first (what the screen shows), then the record, then the listener,
then the policy (which may stop the run). Notices are masked for secrets here, once for all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
from collections import deque

from specload.datatypes import (
    CrashEvent,
    ErrorKind,
    GpuFault,
    GpuSample,
    LevelStarted,
    Noted,
    OutputDiverged,
    RequestRecord,
    RunEvent,
    SearchProgress,
    ServerExited,
    ServerSample,
)
from specload.engine.capacity import CapacityPart
from specload.neterrors import REFUSED
from specload.record.sink import RecordSink
from specload.secrets import Scrubber, redact_command
from specload.session.listener import SessionListener
from specload.session.policy import RunPolicy
from specload.stats.client_load import ClientLoad
from specload.stats.gpu_levels import GpuLevels
from specload.stats.judgement import workload_warnings
from specload.stats.levels import LevelSummary
from specload.stats.live import LiveStats
from specload.stats.live_judge import LiveJudge
from specload.stats.lossless import Divergence, LiveOutputs, outputs_line
from specload.stats.server_levels import ServerLevels
from specload.watch.command import ProcessExit
from specload.watch.serverwatch import ServerWatch

# a GPU fault this close to the server's death is counted in the crash watch (CONSEQUENCE_WINDOW's 60 s)
GPU_CRASH_WINDOW_NS = 60_000_000_000
GPU_CRASH_KINDS = ("xid", "lost")
# requested vs server-counted prompt tokens of a level: beyond this, a warning (issue 15: "a few percent")
PROMPT_LENGTH_TOLERANCE = 0.05


class Fanout:
    def __init__(self, *, stats: LiveStats, record: RecordSink, listener: SessionListener, scrub: Scrubber,
                 now_ns, gpu_interval_s: float = 1.0) -> None:  # the clock's now_ns
        self.stats, self.record, self.listener, self.scrub, self.now_ns = stats, record, listener, scrub, now_ns
        self.policy: RunPolicy | None = None  # set by the session (the policy reports through here too)
        self.watch: ServerWatch | None = None  # once the server watch runs
        self.running = False  # the load runs: a server exit is news then, not during teardown
        self.notices: deque[str] = deque(maxlen=200)
        self.capacity: CapacityPart | None = None  # goodput and the capacity search, when wanted
        self.tg: asyncio.TaskGroup | None = None  # the session's, for the levels' goodput
        self.judge: LiveJudge | None = None  # --baseline / --target-ci / --until-decided
        # the run's request shape (RunDescription.request_shape) and what is wrong with it for
        # measuring speculative decoding (said once each, kept for the end line and --json)
        self.workload_shape: dict | None = None
        self.workload_warnings: list[str] = []
        self.outputs: LiveOutputs | None = None  # --check-outputs with --baseline
        # level summaries waiting for their goodput and the server's figures over their span, in order
        self.level_chain: asyncio.Task | None = None
        self.server_levels = ServerLevels()
        self.gpu_levels = GpuLevels(gpu_interval_s)
        self.warned_unstreamed = False  # said once: by the API probe, or at the first whole answer
        self._said_unsupported = False
        self._gpu_faults: deque[GpuFault] = deque(maxlen=64)  # XIDs and lost GPUs not yet tied to a death
        self._server_died_ns: int | None = None

    def notice(self, text: str) -> None:
        text = self.scrub(redact_command(text) or "")
        self.notices.append(text)
        self.listener.notice(text)

    def request(self, rec: RequestRecord) -> None:
        if rec.ok and rec.chunks == 1 and rec.output_tokens > 1 and not self.warned_unstreamed:
            self.warned_unstreamed = True
            self.notice(f"the server sent a whole answer of {rec.output_tokens} tokens in one piece (not "
                        "streamed: \"stream\": false in --extra-body?): TTFT is the whole answer's time, "
                        "TPOT and ITL cannot be measured")
        self.stats.on_record(rec)
        if self.capacity is not None:
            self.capacity.on_record(rec)
        if self.judge is not None:
            self.judge.add(rec)
        self.record.request(rec)
        if self.outputs is not None and (found := self.outputs.add(rec)) is not None:
            self.divergence(found)
        interrupted = self.policy is not None and self.policy.interrupted
        if rec.error_kind is ErrorKind.CONNECT and rec.error_detail == REFUSED and self.watch is not None \
                and not interrupted:
            # refused: nothing listens, down now (faster than the next poll). A connect timeout is left
            # to the health checks: a saturated client times out its own backlog of connections.
            self.watch.mark_down(rec.error_detail)

    def divergence(self, d: Divergence) -> None:
        """An answer that is not the baseline's, not at a near-tie: an alert like a crash's (the
        listener hears it as a ``divergence`` event), in the record, and the policy's to act on."""
        self.event(OutputDiverged(self.now_ns(), d.as_dict()))
        if self.policy is not None:
            self.policy.divergence()

    def event(self, ev: RunEvent) -> None:
        if isinstance(ev, LevelStarted):
            if self.judge is not None:
                self.judge.level_started(ev.index, ev.concurrency, repeat=ev.repeat)
            if self.outputs is not None:
                self.outputs.level_started(ev.index, ev.concurrency)
            if self.watch is not None:
                # the counters as a level starts: its first scrape interval then begins with it
                self.watch.level_boundary()
        self.stats.on_event(ev)
        self.record.event(ev)
        self.listener.run_event(ev)

    def level(self, summary: LevelSummary) -> None:
        """A level is complete: published with its goodput (under --slo, bootstrapped in a thread) and
        the server's own figures over its span (with /metrics those need the counters as the level
        ends: one scrape first). Levels stay in order: each waits for the one before."""
        if summary.requests == 0:
            # a level that started no request (skipped with n, paused all along) is shown in the
            # tables but has nothing to judge, scrape or record: after the levels before it
            chain = self.level_chain
            if self.tg is not None and chain is not None and not chain.done():
                self.level_chain = self.tg.create_task(self._empty_level_after(chain, summary))
            else:
                self._show_empty_level(summary)
            return
        if self.judge is not None:
            # the level's last request is in: its judgement without the drain, as report computes it
            self.judge.level_finished(summary.level_index)
            summary = dataclasses.replace(summary, judged=self.judge.judgement(summary.level_index))
        goodput = self.capacity is not None and self.capacity.spec is not None
        scrape = self.watch is not None and self.watch.metrics is not None
        pending = self.level_chain is not None and not self.level_chain.done()
        if self.tg is not None and (goodput or scrape or pending):
            self.level_chain = self.tg.create_task(self._level_when_ready(self.level_chain, summary))
            return
        self.level_done(summary)

    async def _level_when_ready(self, before: asyncio.Task | None, summary: LevelSummary) -> None:
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        if self.capacity is not None and self.capacity.spec is not None:
            try:
                summary = await self.capacity.finish_level(summary)
            except Exception as e:  # noqa: BLE001 - a statistic that fails must not lose the level
                self.notice(f"goodput of level {summary.level_index} could not be computed: {e}")
        if self.watch is not None:
            await self.watch.scrape_for_level()
        self.level_done(summary)

    async def _empty_level_after(self, before: asyncio.Task, summary: LevelSummary) -> None:
        await asyncio.gather(before, return_exceptions=True)
        self._show_empty_level(summary)

    def _show_empty_level(self, summary: LevelSummary) -> None:
        self.stats.on_level(summary)
        self.listener.level_done(summary)

    def search_event(self, value: dict) -> None:
        self.event(SearchProgress(self.now_ns(), value))

    def level_done(self, summary: LevelSummary) -> None:
        if (span := summary.server_span_ns()) is not None:
            summary = summary.with_server(self.server_levels.figures(*span))
        if (active := summary.active_span_ns()) is not None:
            summary = summary.with_gpu(self.gpu_levels.figures(*active, output_tokens=summary.output_tokens))
        self.stats.on_level(summary)
        self.record.level(summary)
        self.listener.level_done(summary)
        self._check_prompt_length(summary)
        self._check_workload(summary)
        if self.outputs is not None and (lv := self.outputs.level(summary.level_index)) is not None:
            self.event(Noted(self.now_ns(), "outputs", {"level_index": summary.level_index, **lv.as_dict()}))
            self.notice(f"outputs at C={summary.concurrency} against the baseline: {outputs_line(lv)}")

    def _check_workload(self, s: LevelSummary) -> None:
        """Once a level shows speculative decoding (the server's figures or the requests' own counts):
        what about the workload makes it a poor measure of it (judgement.workload_warnings), once each."""
        if self.workload_shape is None or not any(v is not None for v in (
                s.accept_len, s.accept_rate, s.request_accept_len, s.request_accept_rate)):
            return
        for line in workload_warnings(self.workload_shape, True):
            if line not in self.workload_warnings:
                self.workload_warnings.append(line)
                self.notice(f"WARNING {line}")

    def _check_prompt_length(self, s: LevelSummary) -> None:
        """Warn when the server counted the level's prompts differently from what was asked."""
        want, got = s.prompt_tokens_requested_avg, s.prompt_tokens_avg
        if not want or got is None or abs(got / want - 1.0) <= PROMPT_LENGTH_TOLERANCE:
            return
        value = {"level_index": s.level_index, "concurrency": s.concurrency, "requested_avg": want, "server_avg": got}
        self.event(Noted(self.now_ns(), "prompt_length", value))
        self.notice(
            f"WARNING prompts at C={s.concurrency}: asked for {want:.0f} tokens on average, the server counted "
            f"{got:.0f} ({100 * (got / want - 1):+.0f} %): the level's prefill work is not what was asked"
        )

    def server(self, sample: ServerSample) -> None:
        self.server_levels.add(sample)
        self.stats.on_server(sample)
        self.record.server(sample)

    def gpu(self, sample: GpuSample) -> None:
        self.gpu_levels.add(sample)
        self.stats.on_gpu(sample)
        self.record.gpu(sample)

    def gpu_fault(self, f: GpuFault) -> None:
        """A GPU fault is an event and a notice, never a stop: a field a GPU does not report is said
        once for all (each is in the record's events)."""
        self.stats.on_gpu_fault(f)
        self.event(Noted(f.t_ns, "gpu_fault", {"kind": f.kind, "message": f.message, "gpu": f.gpu}))
        if f.kind != "unsupported":
            self.notice(f"GPU fault ({f.kind}): {f.message}")
        elif not self._said_unsupported:
            self._said_unsupported = True
            self.notice(f"GPU metrics: {f.message} (every such field is in the record's gpu_fault events)")
        if f.kind in GPU_CRASH_KINDS:
            self._gpu_faults.append(f)
            self._gpu_crash_check()

    def _gpu_crash_check(self) -> None:
        """An XID or a lost GPU within ``GPU_CRASH_WINDOW_NS`` of the server dying (a crash in its log, or
        found down) is counted in the crash watch too, once: alone it is a GPU fault, not a crash."""
        died = self._server_died_ns
        if died is None:
            return
        for f in [f for f in self._gpu_faults if abs(f.t_ns - died) <= GPU_CRASH_WINDOW_NS]:
            self._gpu_faults.remove(f)
            m = re.match(r"XID (\d+)", f.message)  # named as the crash markers name the same lines
            what = f"Xid {m.group(1)}" if m else "GPU lost"
            where = f"GPU {f.gpu}" if f.gpu is not None else "GPU"
            sig = "gpu-" + hashlib.sha1(f"{what}|{where}".encode()).hexdigest()[:10]
            ev = CrashEvent(signature=sig, exception_type=what, message=f.message, innermost_frame=None,
                            processes=(where,), count=1, first_seen_ns=f.t_ns, last_seen_ns=f.t_ns,
                            excerpt=f.message)
            self.stats.on_crash(ev)  # not the policy's: the server's own death already reached it
            self.record.crash(ev)
            self.listener.crash(ev)

    def crash(self, ev: CrashEvent) -> None:
        self.stats.on_crash(ev)
        self.record.crash(ev)
        self.listener.crash(ev)
        if ev.new and self._server_died_ns is None:
            self._server_died_ns = ev.first_seen_ns
            self._gpu_crash_check()
        if self.policy is not None:
            self.policy.crash(ev)

    def health(self, ev: RunEvent, detail: str) -> None:
        self.event(ev)
        if ev.value == "down" and self._server_died_ns is None:
            self._server_died_ns = ev.t_ns
            self._gpu_crash_check()
        if self.policy is not None:
            self.policy.health(ev, detail)

    def server_exit(self, ex: ProcessExit) -> None:
        if self.running:
            self.event(ServerExited(self.now_ns(), ex.description))
            self.notice(f"launched server {ex.description}")
            if self.policy is not None:
                self.policy.server_failed(ex.description, "exited")

    def client_load(self, load: ClientLoad) -> None:
        self.stats.on_client_load(load.cpu_pct, load.loop_lag_ms, load.saturated, load.starved)
        runner = self.policy.runner if self.policy is not None else None
        level = runner.target if runner is not None else 0
        flag = "saturated" if load.saturated else "starved" if load.starved else None
        if runner is not None and (self.judge is not None or self.capacity is not None):
            index = runner.snapshot().level_index
            if self.judge is not None and flag is not None:  # a --baseline verdict of this level would not be sound
                self.judge.client_flag(index, f"client_{flag}")
            if self.capacity is not None:  # nor a capacity probe the client could not measure
                self.capacity.client_sample(index, flag)
        self.record.client(load, level)
        self.listener.client_load(load, level)
