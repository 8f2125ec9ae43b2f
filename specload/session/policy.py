"""What happens to the load when something happens to the server (or to specload itself).

``RunPolicy`` holds every rule that stops or pauses the runner, and the run's end reason:

* a new crash signature: ``--on-crash pause`` pauses, ``stop`` ends the run (``crashed``);
* the server goes down: the load pauses and resumes when it is up again; down for
  ``--down-timeout`` ends a headless run (``server down``); the TUI stays (``stay_open``);
* a ``--workers`` process dies: the run goes on with the others, or stops (``worker lost``);
* an answer diverges from the baseline's: ``--on-divergence stop`` ends the run (``diverged``);
* the record cannot be written: stop (a load nobody can read back is not worth running);
* the user quits or a signal arrives: ``interrupt``.

The first reason wins: a crash that brings the server down ends the run as ``crashed``. A crash (or
a quit) seen while the server starts or the prompts are calibrated ends the start step under way
(``on_stop``), or, under ``pause``, pauses the load as soon as it is built (``attach``). The tables
at the end say what an end reason means for the exit status, the record's end line and the screen.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass

from specload.datatypes import CrashEvent, RunEvent, WorkerDied
from specload.engine.capacity import CapacityPart
from specload.engine.runner import Runner
from specload.engine.search import SearchResult
from specload.exitcode import ExitCode
from specload.stats.levels import LevelSummary


@dataclass(frozen=True, slots=True)
class SessionResult:
    """How a run ended: what its front end says and exits with."""

    reason: str  # completed, interrupted, stopped, crashed, server down, worker lost, error
    exit_code: int
    levels: tuple[LevelSummary, ...]
    message: str | None = None  # one line for the user when reason == "error"
    search: SearchResult | None = None  # the capacity search's result (the last one, in the TUI)
    crashes: tuple[CrashEvent, ...] = ()  # the server's crash signatures, as the run's end saw them
    workload_warnings: tuple[str, ...] = ()  # judgement.workload_warnings the run gave


class RunPolicy:
    def __init__(
        self,
        *,
        on_crash: str,
        down_timeout_s: float,
        stay_open: bool,
        on_worker_death: str,
        notice: Callable[[str], None],
        event: Callable[[RunEvent], None],
        now_ns: Callable[[], int],
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self.on_crash = on_crash
        self.down_timeout_s = down_timeout_s
        self.stay_open = stay_open
        self.on_worker_death = on_worker_death
        self._notice, self._event, self._now, self._on_stop = notice, event, now_ns, on_stop
        self.runner: Runner | None = None  # set once the load is built
        self.capacity: CapacityPart | None = None  # a search under a failed server has no best point
        self.end_reason: str | None = None
        self.interrupted = False
        self.server_down = False
        self.diverged = False  # --check-outputs against a --baseline found an answer that is not its
        self.on_divergence = "continue"
        self._paused_for_down = False
        self._crash_pause = False  # a crash seen before the load was built: it starts paused
        self._down_timer: asyncio.TimerHandle | None = None

    def attach(self, runner: Runner) -> None:
        """The load is built: the rules apply to it from now on, and a crash seen while starting
        pauses it before its first request (``pause``)."""
        self.runner = runner
        if self._crash_pause:
            runner.pause("crash")

    def stop(self, end_reason: str, runner_reason: str = "stopped", why: str | None = None) -> None:
        """End the run: no new requests, in-flight ones recorded as cancelled. ``why`` (a reason of
        the server's) travels with the cancellation: a request whose stream was silent is then
        recorded as the stall it is (a SIGSTOPped server), not as cancelled by specload."""
        self.end_reason = self.end_reason or end_reason
        if self.runner is not None:
            self.runner.stop(runner_reason)
            self.runner.cancel_in_flight(why)
        self._on_stop()  # a start step still waiting (the server loading, calibration) ends now

    def interrupt(self, reason: str = "interrupted") -> None:
        self.interrupted = True
        self.stop(reason, reason)

    def server_failed(self, detail: str, what: str = "crashed") -> None:
        """A crash, the server down or gone: whatever else happens, a search in progress ends void.
        ``what`` completes "the server ..." in the search's message (crashed, went down, exited)."""
        if self.capacity is not None:
            self.capacity.server_failed(detail, what)

    def divergence(self) -> None:
        """An answer diverged from the baseline's, not at a near-tie: ``--on-divergence stop`` ends
        the run (``diverged``, in-flight requests cancelled); either way the exit status says so."""
        self.diverged = True
        if self.on_divergence == "stop" and self.runner is not None:
            self.stop("diverged", "diverged", "an output diverged from the baseline's")

    def crash(self, ev: CrashEvent) -> None:
        if not ev.new or self.on_crash == "continue":
            return
        self.server_failed(f"{ev.exception_type}: {ev.message}")
        if self.on_crash == "pause":
            if self.runner is not None:
                self.runner.pause("crash")
            else:
                self._crash_pause = True
        elif self.on_crash == "stop":
            if self.runner is not None:
                self.runner.cut("crash")
            self.stop("crashed", "crashed", f"server crashed ({ev.exception_type})")

    def health(self, ev: RunEvent, detail: str) -> None:
        if ev.value == "down":
            self.server_down = True
            self._notice(f"server down: {detail}")
            self.server_failed(detail, "went down")
            if self.runner is not None and not self.runner.paused:
                self._paused_for_down = True
                self.runner.pause("server_down")
            elif self.runner is not None:
                self.runner.cut("server_down")  # paused already: the server's down time is a cut of its own
            if self._down_timer is None:
                self._down_timer = asyncio.get_running_loop().call_later(self.down_timeout_s, self._down_too_long)
        elif ev.value == "up":
            was_down, self.server_down = self.server_down, False
            self.cancel_timers()
            if was_down:
                self._notice("server up again")
            if self._paused_for_down and self.runner is not None:
                self._paused_for_down = False
                self.runner.resume()

    def _down_too_long(self) -> None:
        self._down_timer = None
        if self.server_down and self.runner is not None and not self.stay_open:
            self._notice(f"server down for {self.down_timeout_s:g} s: stopping")
            self.stop("server down", why=f"server down for {self.down_timeout_s:g} s")

    def worker_lost(self, index: int, why: str, left: int) -> None:
        """A load worker died (``--workers``): its in-flight requests come back as ``lost`` records;
        the run goes on with the others, or stops when none is left or the user said so."""
        stop = left == 0 or self.on_worker_death == "stop"
        self._event(WorkerDied(self._now(), index, why, left))
        then = "stopping" if stop else f"continuing on {left} worker{'s' if left != 1 else ''}"
        self._notice(f"load {why}: its requests in flight are recorded as lost; {then}")
        if stop:
            self.stop("worker lost")

    def record_failed(self, error: str) -> None:
        """Called from inside the recorder, which may be inside the runner's bookkeeping of a finished
        request: the stop itself waits for the next loop turn."""
        self.end_reason = self.end_reason or "stopped"
        self._notice(f"{error}: stopping the run")
        asyncio.get_running_loop().call_soon(self.stop, "stopped")

    def quit_reason(self, *, crashed: bool) -> str:
        """The user quit a run that stays open (the TUI): the record and the exit status say what had
        happened by then, as a headless run's would (after the ramp: completed; a crash: crashed)."""
        if crashed:
            return "crashed"
        if self.server_down:
            return "server down"
        searching = self.capacity is not None and self.capacity.searching
        return "completed" if self.runner is not None and self.runner.plan_done and not searching else "interrupted"

    def cancel_timers(self) -> None:
        if self._down_timer is not None:
            self._down_timer.cancel()
            self._down_timer = None


# the run's end reason -> exit status (interrupted: by the signal, see exit_code)
_EXIT = {"completed": ExitCode.OK, "crashed": ExitCode.CRASHED, "server down": ExitCode.SERVER_DOWN,
         "worker lost": ExitCode.WORKER_LOST, "error": ExitCode.ERROR,
         "diverged": ExitCode.DIVERGED}
# the run's end reason -> the record's end line
_END_LINE = {"server down": "stopped", "worker lost": "stopped", "error": "stopped"}
# the run's end reason -> the state a front end shows once the run is over
_LAST_PHASE = {"error": "error", "crashed": "crashed"}


def catch_signals(on_signal: Callable[[int], None]) -> tuple[int, ...]:
    """SIGINT, SIGTERM and SIGHUP (the terminal went away: a launched server, in a session of its own,
    would be left running) quit the run from now on; the signals caught (a SIGHUP ignored by whoever
    started us, nohup, stays ignored), for the event loop to take over once it runs."""
    caught = tuple(s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                   if s != signal.SIGHUP or signal.getsignal(s) is not signal.SIG_IGN)
    for sig in caught:
        signal.signal(sig, lambda s, _frame: on_signal(s))
    return caught


def exit_code(reason: str, sig: int | None, *, diverged: bool = False) -> int:
    if reason == "interrupted":
        return ExitCode.for_signal(sig)
    code = _EXIT.get(reason, ExitCode.OK)
    # --on-divergence continue: the run went on to its end, and its answer is still no
    return ExitCode.DIVERGED if code == ExitCode.OK and diverged else code


def end_line(reason: str, crashed: bool) -> str:
    """The record's end reason: a run that failed after the server crashed ended ``crashed``."""
    return "crashed" if reason == "error" and crashed else _END_LINE.get(reason, reason)


def last_phase(reason: str) -> str:
    return _LAST_PHASE.get(reason, "finished")


