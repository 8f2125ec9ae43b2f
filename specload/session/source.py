"""What a front end shows a run from (a ``RunSource``) and how it steers it (a ``RunControl``).

A dashboard reads one immutable ``Frame`` per refresh (the stats snapshot, the runner's state, the
state label, the target, the newest log lines, the capacity search) and hears one-off happenings
through a ``SessionListener``; it steers the run only through a ``RunControl``. Nothing in that
interface says where the run is, so one dashboard serves several sources:

* ``SessionSource``: a ``Session`` on the caller's event loop (a front end that has nothing else on
  its loop; the base of the next one);
* ``specload.session.engine_thread.ThreadedSessionSource``: a session on an event loop of its own in
  an engine thread, which the UI's loop cannot delay (the Pilot tests that look into the session);
* ``specload.session.engine_process.ProcessSessionSource``: a session in a process of its own, which
  neither the UI's loop nor its interpreter can delay (``specload tui``; issue 11);
* ``StaticSource``: fixed data (snapshot tests); a record played back (``--replay``) fits the same
  way: frames from a ``LiveStats`` fed the record's lines on a moving clock, no control.

Nothing here imports Textual.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from specload.engine.capacity import SearchView
from specload.engine.runner import RunnerState
from specload.stats.levels import LevelSummary
from specload.stats.live import StatsSnapshot
from specload.stats.live_judge import LiveView
from specload.stats.slo import SloSpec

if TYPE_CHECKING:
    from specload.config import RunConfig
    from specload.session import Session, SessionResult
    from specload.session.listener import SessionListener

LOG_TAIL = 200  # lines a frame carries: a person cannot read more per refresh


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What does not change during a run."""

    t0_ns: int  # the run's clock origin (crash times are shown relative to it)
    on_crash: str  # pause, stop, continue
    slo: SloSpec | None  # the latency objectives, drawn on the latency sparklines
    open_loop: bool  # --rate: a capacity search then runs on the rate axis


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything a dashboard shows of a run at one moment. Plain, immutable data."""

    info: RunInfo
    stats: StatsSnapshot
    runner: RunnerState | None  # None until the load is built
    state: str  # the state label: starting, waiting for server, ramping, paused, server down, ...
    url: str | None
    model: str | None
    api: str | None
    log: tuple[tuple[int, str], ...]  # the newest server log lines as (sequence number, text)
    search: SearchView | None  # the capacity search, once one ran
    searching: bool  # a capacity search is running now
    live: LiveView | None = None  # --baseline / --target-ci: the running level against its goal
    # while the load is cut (a crash, the server down, a pause): the levels it cut, as they stand; each
    # is replaced by its final summary in ``stats.levels`` once it ends
    cut_levels: tuple[LevelSummary, ...] = ()


class RunControl(Protocol):
    """What a front end may ask of a run. Commands, not queries: their effect shows in the next
    frame, and what they lead to (a level, a marker, a search's result) is heard as run events."""

    def set_target(self, n: int) -> None:
        """A concurrency set by hand: a new held manual level (a running search ends)."""

    def toggle_pause(self) -> None: ...

    def next_level(self) -> None: ...

    def toggle_hold(self) -> None: ...

    def marker(self, note: str) -> None: ...

    def find_max(self, start: float | None) -> None:
        """Start a capacity search from ``start`` (None: from the plan), or stop the running one."""

    def hold_best(self) -> None:
        """Stop a search and hold the load at the best point it found."""

    def quit(self, sig: int | None = None) -> None:
        """No new requests; in-flight ones recorded as cancelled; the record closed; the run ends.
        ``sig``: the signal that asked for it (the record's end says interrupted, the exit status
        128 + sig); None: the end reason says what had happened by then."""


class RunSource(Protocol):
    @property
    def control(self) -> RunControl | None:  # None: a run that cannot be steered (fixed data)
        """The run's controls (read-only here, so a source may declare a narrower type)."""

    def frame(self) -> Frame:
        """The run now (cheap enough for 4 Hz)."""

    async def run(self, listener: SessionListener) -> SessionResult | None:
        """Drive the source until the run is over, telling ``listener`` what happens; the result
        (None for a source that never ends by itself)."""


# ---------------------------------------------------------------------------------- in-process


class _Relay:
    """A ``SessionListener`` forwarding to whichever listener ``run`` was given (the session needs one
    when it is built; the front end attaches later)."""

    def __init__(self) -> None:
        from specload.session.listener import NullListener

        self.target: SessionListener = NullListener()

    def __getattr__(self, name: str):  # one of SessionListener's methods
        return getattr(self.target, name)


class ForwardingControl:
    """``RunControl`` whose every command goes to one function as (its name, its arguments): to the
    engine thread's loop, or as a message to the engine process, where a ``SessionControl`` runs it
    by that name."""

    def __init__(self, forward: Callable[[str, tuple], None]) -> None:
        self._forward = forward

    def set_target(self, n: int) -> None:
        self._forward("set_target", (n,))

    def toggle_pause(self) -> None:
        self._forward("toggle_pause", ())

    def next_level(self) -> None:
        self._forward("next_level", ())

    def toggle_hold(self) -> None:
        self._forward("toggle_hold", ())

    def marker(self, note: str) -> None:
        self._forward("marker", (note,))

    def find_max(self, start: float | None) -> None:
        self._forward("find_max", (start,))

    def hold_best(self) -> None:
        self._forward("hold_best", ())

    def quit(self, sig: int | None = None) -> None:
        self._forward("quit", (sig,))


class SessionControl:
    """``RunControl`` on a ``Session`` of this process."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _take_over_from_search(self) -> None:
        # a concurrency set by hand ends a capacity search: the user has taken the load over
        cap = self.session.capacity
        if cap is not None and cap.searching:
            self.session.stop_search()

    def set_target(self, n: int) -> None:
        if (r := self.session.runner) is not None:
            self._take_over_from_search()
            r.set_target(n)

    def toggle_pause(self) -> None:
        if (r := self.session.runner) is not None:
            r.toggle_pause()

    def next_level(self) -> None:
        if (r := self.session.runner) is not None:
            r.next_level()

    def toggle_hold(self) -> None:
        if (r := self.session.runner) is not None:
            r.toggle_hold()

    def marker(self, note: str) -> None:
        self.session.marker(note)

    def find_max(self, start: float | None) -> None:
        cap = self.session.capacity
        if cap is not None and cap.searching:
            self.session.stop_search()
        elif not self.session.start_search(start=start):
            self.session.fan.notice("the capacity search cannot start now")

    def hold_best(self) -> None:
        result = self.session.stop_search(hold_best=True)
        if result is None or result.best is None:
            self.session.fan.notice("no best point found yet")
        else:
            self.session.fan.notice(f"holding the best point: {result.message.split(';')[0]}")

    def quit(self, sig: int | None = None) -> None:
        if sig:
            self.session.signalled(sig)
        else:
            self.session.interrupt("interrupted")


def session_frame(session: Session, info: RunInfo) -> Frame:
    """The frame of a session in this process."""
    lines = session.log_lines
    n = len(lines)
    cap = session.capacity
    return Frame(
        info=info,
        stats=session.snapshot(),
        runner=session.runner_state(),
        state=session.state_label(),
        url=session.url,
        model=session.model,
        api=session.api,
        log=tuple(itertools.islice(lines, max(0, n - LOG_TAIL), n)),
        search=session.search_view(),
        searching=cap is not None and cap.searching,
        live=session.live_view(),
        cut_levels=session.runner.cut_levels() if session.runner is not None else (),
    )


def run_info(cfg: RunConfig, t0_ns: int, on_crash: str) -> RunInfo:
    return RunInfo(t0_ns=t0_ns, on_crash=on_crash, slo=cfg.capacity.slo, open_loop=cfg.plan.rate is not None)


class SessionSource:
    """A run on the caller's event loop. It stays open when its plan ends (the user may set a
    concurrency) and pauses on a crash unless ``--on-crash`` says otherwise (the TUI defaults).
    ``specload tui`` runs it in a process of its own (``engine_process.ProcessSessionSource``)."""

    def __init__(self, cfg: RunConfig, **session_options: object) -> None:
        from specload.session import Session

        self._relay = _Relay()
        options = {"stay_open": True, "on_crash": cfg.watch.on_crash, **session_options}
        self.session = Session(cfg, listener=self._relay, **options)  # type: ignore[arg-type]
        self.control: RunControl | None = SessionControl(self.session)
        self.info = run_info(cfg, self.session.t0_ns, self.session.on_crash)
        self.stop_grace_s = cfg.watch.stop_grace_s  # a launched server's: the quit watchdog's deadline

    def frame(self) -> Frame:
        return session_frame(self.session, self.info)

    def process_groups(self) -> list[int]:
        """What the quit watchdog kills when a quit does not finish in time: a launched server's
        process group."""
        launched = self.session.supervisor.launched
        pid = launched.pid if launched is not None else None
        return [pid] if pid is not None else []

    async def run(self, listener: SessionListener) -> SessionResult | None:
        self._relay.target = listener
        return await self.session.run()


class StaticSource:
    """Fixed data for the dashboard: no run, no control (snapshot tests, screenshots)."""

    control: RunControl | None = None

    def __init__(
        self,
        snapshot: StatsSnapshot,
        runner_state: RunnerState | None = None,
        *,
        state: str = "ramping",
        url: str | None = "http://127.0.0.1:8000",
        model: str | None = "sim-model",
        api: str | None = "chat",
        t0_ns: int = 0,
        log_lines: list[str] | None = None,
        search: SearchView | None = None,
        slo: SloSpec | None = None,
        control: RunControl | None = None,
        live: LiveView | None = None,
    ) -> None:
        self.control = control
        self._frame = Frame(
            info=RunInfo(t0_ns=t0_ns, on_crash="pause", slo=slo, open_loop=False),
            stats=snapshot, runner=runner_state, state=state, url=url, model=model, api=api,
            log=tuple(enumerate(log_lines or [], start=1)), search=search, searching=False, live=live,
        )

    def frame(self) -> Frame:
        return self._frame

    def set_frame(self, frame: Frame) -> None:
        """What the next sample shows (a test moves the fixed data on)."""
        self._frame = frame

    async def run(self, listener: SessionListener) -> SessionResult | None:
        return None
