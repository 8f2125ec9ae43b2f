"""The sweep's loop: each slot of the plan as one ``Session``, retried, recorded, and waited for.

Everything about one server's life is the session's: it launches the command in a process group of
its own, follows its output with the crash watch from the first byte, waits for readiness (health,
``--expect-log``, the models endpoint, then a real request answered), warms up, runs the levels and
stops it (SIGTERM, SIGKILL after the grace). Around each attempt the loop picks the port (``{port}``),
waits until a fixed port is free before the start, and after the stop until the port and the GPU
memory (where this machine can read it) are given back, so that the next configuration starts on a
clean machine; it decides how the attempt ended (``ok``, ``crashed``, ``failed_to_start``,
``interrupted``) and why (the crash's signature, ranks, excerpt, the server's exit and last lines),
retries it (``--retries``), and writes ``sweep.json`` after every step. A signal stops the session
that runs (its server with it) and leaves the folder resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from specload.config import RunConfig
from specload.datatypes import CrashEvent, LevelStarted, RunEvent, ServerExited
from specload.exitcode import ExitCode
from specload.report.sweep import describe
from specload.secrets import redact_command
from specload.session import NullListener, Session, SessionResult
from specload.stats.levels import LevelSummary
from specload.sweep.plan import SweepPlan, free_port, port_in_use
from specload.sweep.state import SweepState, now_iso
from specload.watch.command import process_start_time
from specload.watch.gpu import memory_used

ProgressFn = Callable[[dict[str, Any]], None]
POLL_S = 0.5
EXCERPT_LINES = 40
TAIL_LINES = 15


@dataclass(frozen=True)
class Waits:
    port_s: float = 60.0  # a port still held after the stop (or before a fixed-port start)
    gpu_s: float = 120.0  # GPU memory not yet given back after the stop
    gpu_source: str = "auto"  # how GPU memory is read (--gpu-metrics); off: not waited for


@dataclass
class Attempt:
    """What one attempt's session told, as it went."""

    t0: float = field(default_factory=time.monotonic)
    phase: str = "starting"
    ready_at: float | None = None
    load_end: float | None = None
    levels: list[LevelSummary] = field(default_factory=list)
    concurrency: int | None = None  # of the level running
    server_exit: str | None = None  # the server exited on its own during the run
    crashes: list[CrashEvent] = field(default_factory=list)


class _Listener(NullListener):
    """One attempt's session: its phases and times for the sweep, its lines for the printer."""

    def __init__(self, sweep: Sweep, slot: dict[str, Any], attempt: Attempt, planned_levels: int | None) -> None:
        self.sweep, self.slot, self.a, self.planned = sweep, slot, attempt, planned_levels

    def phase(self, phase: str) -> None:
        if phase == "waiting for server":
            self.sweep.server_started(self.slot)
            self.sweep.set_phase(self.slot, self.a, "loading")

    def notice(self, text: str) -> None:
        self.sweep.say(text, quiet=True)

    def target_found(self, url: str, model: str | None, api: str) -> None:
        self.a.ready_at = time.monotonic()
        self.sweep.set_phase(self.slot, self.a, "ready")

    def run_event(self, event: RunEvent) -> None:
        if isinstance(event, LevelStarted):
            self.a.concurrency = event.concurrency
            if self.a.phase != "load":
                self.sweep.set_phase(self.slot, self.a, "load")
        elif isinstance(event, ServerExited):
            self.a.server_exit = event.description

    def level_done(self, summary: LevelSummary) -> None:
        self.a.levels.append(summary)
        self.sweep.level_done(self.slot, summary)
        if self.planned is not None and len(self.a.levels) >= self.planned:
            self.a.load_end = time.monotonic()
            self.sweep.set_phase(self.slot, self.a, "stopping")

    def crash(self, crash: CrashEvent) -> None:
        if crash.new:
            self.a.crashes.append(crash)
            self.sweep.crash_seen(self.slot, crash)


class Sweep:
    def __init__(self, plan: SweepPlan, base: RunConfig, state: SweepState, *, waits: Waits = Waits(),
                 say: Callable[[str], None] | None = None, progress: ProgressFn | None = None,
                 status: Callable[[Session, str], Awaitable[None]] | None = None) -> None:
        self.plan, self.base, self.state, self.waits = plan, base, state, waits
        self._say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self._progress = progress
        self._status = status  # a status line while a session runs (headless on a terminal)
        self.session: Session | None = None
        self.signal: int | None = None
        self._stop = asyncio.Event()
        self._gpu_visible: bool | None = None
        self._level_s: list[float] = []  # measured level times, for the ETA
        self._slot_t0 = time.monotonic()  # when the slot under way started

    # ------------------------------------------------------------------ what the parts report

    def say(self, text: str, *, quiet: bool = False) -> None:
        if not quiet:
            self._say(f"specload sweep: {text}")
        self.emit({"kind": "notice", "text": text, "quiet": quiet})

    def emit(self, event: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress(event)

    def _where(self, slot: dict[str, Any]) -> str:
        return (f"[{slot['index'] + 1}/{len(self.state.slots)}] {slot['config']}"
                + (f" (repeat {slot['repeat'] + 1}/{self.plan.repeats})" if self.plan.repeats > 1 else ""))

    def set_phase(self, slot: dict[str, Any], a: Attempt, phase: str) -> None:
        a.phase = phase
        extra = ""
        if phase == "ready" and a.ready_at is not None:
            extra = f" after {a.ready_at - a.t0:.1f} s"
        if phase in ("ready", "stopping"):
            self.say(f"{self._where(slot)}: {phase}{extra}")
        self.emit({"kind": "phase", "slot": slot["index"], "config": slot["config"], "repeat": slot["repeat"],
                   "phase": phase, "eta_s": self.eta_s(slot)})

    def server_started(self, slot: dict[str, Any]) -> None:
        """The server's pid (and its start time) into the state at once: a sweep killed now leaves a
        server that ``--resume`` finds and stops."""
        launched = self.session.supervisor.launched if self.session is not None else None
        if launched is None or launched.pid is None:
            return
        att = slot["attempts"][-1]
        att["server_pid"], att["server_started"] = launched.pid, process_start_time(launched.pid)
        self.state.save()

    def level_done(self, slot: dict[str, Any], s: LevelSummary) -> None:
        from specload.formatting import level_line

        if s.wall_s:
            self._level_s.append(s.wall_s)
        self._say(f"specload sweep: {slot['config']}: {level_line(s)}")
        self.emit({"kind": "level", "slot": slot["index"], "config": slot["config"], "summary": s.as_record()})

    def crash_seen(self, slot: dict[str, Any], c: CrashEvent) -> None:
        procs = f" on {', '.join(c.processes)}" if c.processes else ""
        self.say(f"{self._where(slot)}: SERVER CRASH {c.exception_type}: {c.message}{procs}")
        self.emit({"kind": "crash", "slot": slot["index"], "config": slot["config"],
                   "crash": {"exception_type": c.exception_type, "message": c.message, "processes": list(c.processes),
                             "innermost_frame": c.innermost_frame}})

    def eta_s(self, current: dict[str, Any] | None = None) -> float | None:
        """Seconds left: each slot still to run costs the measured start-up, level and stop times."""
        done = [a for s in self.state.slots for a in s["attempts"] if a.get("startup_s") is not None]
        if not done:
            return None
        startup = statistics.median(a["startup_s"] for a in done)
        stop = statistics.median(a.get("stop_s") or 0.0 for a in done)
        levels = len(self.base.plan.levels)
        level_s = statistics.median(self._level_s) if self._level_s else 0.0
        per_run = startup + stop + levels * level_s
        left = sum(1 for s in self.state.slots if s["status"] not in ("ok", "crashed", "failed_to_start")
                   and s is not current)
        now = max(0.0, per_run - (time.monotonic() - self._slot_t0)) if current is not None else 0.0
        return left * per_run + now

    # ------------------------------------------------------------------ the loop

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.signalled, sig)
        self.emit({"kind": "plan", "dir": str(self.state.dir), "plan": self.plan.as_record(),
                   "levels": [lv.concurrency for lv in self.base.plan.levels],
                   "schedule": [{"index": s["index"], "config": s["config"], "repeat": s["repeat"],
                                 "status": s["status"]} for s in self.state.slots]})
        await self._stop_leftovers()
        for slot in self.state.to_redo():
            if self.signal is not None:
                break
            await self._run_slot(slot)
            self.emit({"kind": "slot_end", "slot": slot["index"], "config": slot["config"], "status": slot["status"],
                       "attempt": slot["attempts"][-1] if slot["attempts"] else None, "eta_s": self.eta_s()})
            if self._progress is not None and slot["status"] == "ok":
                await self._comparison_so_far()
        self.state.doc["complete"] = self.signal is None and all(
            s["status"] in ("ok", "crashed", "failed_to_start") for s in self.state.slots)
        self.state.save()
        if self.signal is not None:
            self.say(f"interrupted: resume with  specload sweep --resume {self.state.dir}")
            return ExitCode.for_signal(self.signal)
        return ExitCode.OK if all(s["status"] == "ok" for s in self.state.slots) else ExitCode.CRASHED

    async def _comparison_so_far(self) -> None:
        """The headline of the runs so far (the primary metric only: quick), for a live view."""
        from specload.report.sweep import sweep_result

        c = self.base.compare
        try:
            result = await asyncio.to_thread(sweep_result, self.state.doc, self.state.dir, primary=c.primary,
                                             min_effect=c.min_effect_pct / 100, metrics=(c.primary,))
        except Exception as e:  # noqa: BLE001 - a live view's extra must never stop the sweep
            self.say(f"comparison so far not computed: {type(e).__name__}: {e}", quiet=True)
            return
        levels = [{"key": lv["key"], "concurrency": lv["concurrency"],
                   "sides": {n: {k: (s["metrics"].get(c.primary) or {}).get(k) for k in ("value", "ratio", "verdict")}
                             for n, s in lv["sides"].items()}} for lv in result["levels"]]
        self.emit({"kind": "comparison", "baseline": result["baseline"], "levels": levels,
                   "schedule_text": result["schedule_text"]})

    def signalled(self, sig: int) -> None:
        self.signal = self.signal or sig
        self._stop.set()
        if self.session is not None:
            self.session.signalled(sig)

    async def _run_slot(self, slot: dict[str, Any]) -> None:
        config = self.plan.config(slot["config"])
        self._slot_t0 = time.monotonic()
        for k in range(self.plan.retries + 1):
            if k:
                self.say(f"{self._where(slot)}: retrying ({k} of {self.plan.retries})")
            status = await self._attempt(slot, config)
            slot["status"] = status
            self.state.save()
            if status in ("ok", "interrupted"):
                return

    async def _attempt(self, slot: dict[str, Any], config: Any) -> str:
        port = None if self.plan.fixed_port else free_port()
        url = self.plan.server_url(port)
        host, fixed = _host_port(url)
        att: dict[str, Any] = {"attempt": len(slot["attempts"]) + 1, "record": self.state.record_path(slot),
                               "status": "running", "port": fixed, "started_at": now_iso(),
                               "command": redact_command(self.plan.command(config, port))}
        slot["attempts"].append(att)
        slot["status"] = "running"
        self.state.save()
        eta = self.eta_s(slot)
        self.say(f"{self._where(slot)}: starting: {att['command']}"
                 + (f" (sweep ends in about {_duration(eta)})" if eta else ""))
        self.emit({"kind": "phase", "slot": slot["index"], "config": slot["config"], "repeat": slot["repeat"],
                   "phase": "starting", "attempt": att["attempt"], "eta_s": eta})
        if self.plan.fixed_port and fixed is not None and not await self._port_free(host, fixed, "before the start"):
            if self.signal is not None:
                return self._end(slot, att, "interrupted", None)
            return self._end(slot, att, "failed_to_start", {
                "kind": "failed_to_start", "message": f"port {fixed} is in use: another server holds {host}:{fixed}"})
        gpu_before = await self._gpu()
        cfg = self._config(config, port, url, att["record"], slot)
        a = Attempt()
        self.session = session = Session(cfg, listener=_Listener(
            self, slot, a, None if cfg.capacity.find_max else len(cfg.plan.levels)))
        try:
            if self._status is not None:
                result = await _with_status(session, self._status(session, self._where(slot)))
            else:
                result = await session.run()
        finally:
            self.session = None
        if a.load_end is None:
            a.load_end = time.monotonic()
        self.set_phase(slot, a, "stopped")
        status, cause = _outcome(result, a, session)
        if a.ready_at is not None:
            att["startup_s"] = round(a.ready_at - a.t0, 3)
        att["levels"] = len(a.levels)
        att["reason"], att["exit_code"] = result.reason, result.exit_code
        if status != "interrupted":
            notes = await self._after_stop(host, fixed, gpu_before)
            if notes:
                att["notes"] = notes
        att["stop_s"] = round(time.monotonic() - a.load_end, 3)
        return self._end(slot, att, status, cause)

    def _end(self, slot: dict[str, Any], att: dict[str, Any], status: str, cause: dict | None) -> str:
        att["status"], att["ended_at"] = status, now_iso()
        if cause is not None:
            att["cause"] = cause
        where = self._where(slot)
        if status == "ok":
            self.say(f"{where}: ok (start-up {att.get('startup_s', 0):.1f} s, {att.get('levels', 0)} levels)")
        elif status != "interrupted" and cause is not None:
            self.say(f"{where}: {status.upper().replace('_', ' ')}: {describe(cause)}")
        self.state.save()
        return status

    def _config(self, config: Any, port: int | None, url: str, record: str, slot: dict[str, Any]) -> RunConfig:
        b = self.base
        command = f"{b.command or 'specload sweep'}  # {slot['config']}, repeat {slot['repeat'] + 1}"
        return replace(b, target=replace(b.target, url=url),
                       watch=replace(b.watch, launch=self.plan.command(config, port)),
                       record=replace(b.record, path=str(self.state.dir / record)),
                       request=replace(b.request, prompt_nonce=self.state.doc["id"]),
                       label=config.name, command=command)

    # ------------------------------------------------------------------ waits between attempts

    async def _sleep(self, s: float) -> bool:
        """False when a signal came meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), s)
        return not self._stop.is_set()

    async def _port_free(self, host: str, port: int, when: str) -> bool:
        deadline = time.monotonic() + self.waits.port_s
        said = False
        while port_in_use(host, port):
            if time.monotonic() >= deadline or not await self._sleep(POLL_S):
                return False
            if not said:
                self.say(f"port {port} is still in use {when}: waiting up to {self.waits.port_s:g} s")
                said = True
        return True

    async def _gpu(self) -> dict[int, tuple[float, float | None]] | None:
        if self._gpu_visible is False or self.waits.gpu_source == "off":
            return None
        try:
            mem = await memory_used(self.waits.gpu_source)
        except ValueError:
            mem = None
        if self._gpu_visible is None:
            self._gpu_visible = mem is not None
        return mem

    async def _after_stop(self, host: str, port: int | None, gpu_before: dict | None) -> list[str]:
        """Wait until the port and the GPU memory are given back; what was not, said and returned."""
        notes = []
        if port is not None and not await self._port_free(host, port, "after the server stopped"):
            notes.append(f"port {port} still in use {self.waits.port_s:g} s after the server stopped")
        if gpu_before is not None:
            held = await wait_gpu_free(self._gpu, gpu_before, self.waits.gpu_s, self._sleep)
            if held:
                notes.append(f"GPU memory not given back within {self.waits.gpu_s:g} s: {held}")
        if self.signal is not None:  # the waits were cut short: nothing to say of them
            return []
        for n in notes:
            self.say(n)
        return notes

    async def _stop_leftovers(self) -> None:
        """Servers of a sweep that was killed (its state says they ran): stopped, if they still do and are
        still the same processes (their start time), before anything else starts."""
        for att in self.state.unfinished():
            att["status"] = "interrupted"
            pid = att.get("server_pid")
            if not pid or process_start_time(pid) is None or process_start_time(pid) != att.get("server_started"):
                continue
            self.say(f"stopping the server (pid {pid}) left running by the interrupted sweep")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            for _ in range(int(self.base.watch.stop_grace_s / 0.1)):
                if process_start_time(pid) is None:
                    break
                await asyncio.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        self.state.save()


async def wait_gpu_free(read: Callable[[], Awaitable[dict | None]], before: dict[int, tuple[float, float | None]],
                        timeout_s: float, sleep: Callable[[float], Awaitable[bool]]) -> str | None:
    """Until every GPU's memory is back near what it held before the server started (within 2 % of its
    total, at least 256 MiB); None when it is, else what is still held."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = await read()
        if now is None:
            return None
        held = {g: used - before[g][0] for g, (used, _total) in now.items()
                if g in before and used - before[g][0] > max(256.0, 0.02 * (before[g][1] or 0.0))}
        if not held:
            return None
        if time.monotonic() >= deadline or not await sleep(POLL_S):
            return ", ".join(f"GPU {g} +{mib / 1024:.1f} GiB" for g, mib in sorted(held.items()))


def _outcome(result: SessionResult, a: Attempt, session: Session) -> tuple[str, dict | None]:
    """How the attempt ended, and why (None when it ran to completion)."""
    if result.reason == "interrupted":
        return "interrupted", None
    snap = session.stats.snapshot()
    if result.reason == "completed" and not a.crashes and not snap.crashes:
        if snap.requests_ok or not snap.requests_total:
            return "ok", None
    started = a.ready_at is not None
    status = "crashed" if started else "failed_to_start"
    crashes = list(snap.crashes) or a.crashes
    launched = session.supervisor.launched
    exit_text = a.server_exit or (launched.exit.description if launched is not None and launched.exit is not None
                                  and not launched.exit.requested else None)
    scrub = session.scrub
    cause: dict[str, Any] = {"kind": status, "reason": result.reason, "phase": a.phase,
                             "at_concurrency": a.concurrency if started else None, "exit": exit_text}
    if result.message:
        cause["message"] = scrub(result.message)
    elif result.reason == "completed" and not crashes:
        errs = ", ".join(f"{k} {n}" for k, n in snap.errors_by_kind)
        cause["message"] = f"every request failed ({errs})"
    if crashes:
        root = crashes[0]
        cause.update(signature=root.signature, exception_type=root.exception_type, error=root.message,
                     innermost_frame=root.innermost_frame, ranks=list(root.processes),
                     excerpt=scrub("\n".join(root.excerpt.splitlines()[:EXCERPT_LINES])),
                     consequences=[c.exception_type for c in root.consequences],
                     others=[f"{c.exception_type}: {c.message}" for c in crashes[1:4]])
    if launched is not None:
        cause["log_tail"] = [scrub(x) for x in launched.last_lines(TAIL_LINES)]
    return status, cause


async def _with_status(session: Session, ticker: Awaitable[None]) -> SessionResult:
    task = asyncio.ensure_future(ticker)
    try:
        return await session.run()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _host_port(url: str) -> tuple[str, int | None]:
    from urllib.parse import urlparse

    u = urlparse(url)
    return u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"

