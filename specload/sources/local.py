"""A run on the caller's event loop: ``SessionSource``, and what the engine process builds on it.

``SessionControl`` runs a ``RunControl`` command on a ``Session`` of this process and
``session_frame`` builds its frame; ``SessionSource`` is both on the caller's loop, for a front end
that has nothing else on its loop, and for the Pilot tests that must look inside the session. The
engine process (``engine_process.py``) runs the same two on its own loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specload.datatypes import Marker
from specload.engine.search import SearchResult
from specload.session import search
from specload.session.listener import NullListener, SessionListener, forwarding_listener
from specload.sources.frame import LOG_TAIL, Frame, RunControl, RunInfo
from specload.stats.live_judge import LiveView

if TYPE_CHECKING:
    from specload.config import RunConfig
    from specload.session import Session, SessionResult


class SessionControl:
    """``RunControl`` on a ``Session`` of this process."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _stop_search(self, *, hold_best: bool = False) -> SearchResult | None:
        s = self.session
        return search.stop_search(s.cfg, s.capacity, s.runner, hold_best=hold_best) if s.capacity else None

    def set_target(self, n: int) -> None:
        if (r := self.session.runner) is not None:
            # a concurrency set by hand ends a capacity search: the user has taken the load over
            if self.session.capacity is not None and self.session.capacity.searching:
                self._stop_search()
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
        s = self.session
        s.fan.event(Marker(s.clock.now_ns(), note))

    def find_max(self, start: float | None) -> None:
        s = self.session
        cap, runner = s.capacity, s.runner
        if cap is not None and cap.searching:
            self._stop_search()
        elif cap is None or runner is None or s.phase != "running":
            s.fan.notice("the capacity search cannot start now")
        else:
            search.start_search(s.cfg, cap, runner, start=start)

    def hold_best(self) -> None:
        result = self._stop_search(hold_best=True)
        if result is None or result.best is None:
            self.session.fan.notice("no best point found yet")
        else:
            self.session.fan.notice(f"holding the best point: {result.message.split(';')[0]}")

    def quit(self, sig: int | None = None) -> None:
        if sig:
            self.session.signalled(sig)
        else:
            self.session.interrupt("interrupted")


def live_view(session: Session) -> LiveView | None:
    """The running level against its goal (--target-ci) and the baseline (--baseline), or None."""
    if session.judge is None or session.runner is None:
        return None
    index = session.runner.snapshot().level_index
    return session.judge.view(index) if index >= 0 else None


def session_frame(session: Session, info: RunInfo) -> Frame:
    """The frame of a session in this process."""
    cap, runner = session.capacity, session.runner
    return Frame(
        info=info,
        stats=session.stats.snapshot(),
        runner=runner.snapshot() if runner is not None else None,
        state=session.state_label(),
        url=session.url,
        model=session.model,
        api=session.api,
        log=session.log_lines.tail(LOG_TAIL),
        search=cap.view() if cap is not None else None,
        searching=cap is not None and cap.searching,
        live=live_view(session),
        outputs=session.outputs.view() if session.outputs is not None else None,
        cut_levels=runner.cut_levels() if runner is not None else (),
    )


def run_info(cfg: RunConfig, t0_ns: int, on_crash: str) -> RunInfo:
    return RunInfo(t0_ns=t0_ns, on_crash=on_crash, slo=cfg.capacity.slo, open_loop=cfg.plan.rate is not None)


class SessionSource:
    """A run on the caller's event loop. It stays open when its plan ends (the user may set a
    concurrency) and pauses on a crash unless ``--on-crash`` says otherwise (the TUI defaults).
    ``specload tui`` runs the session in a process of its own (``engine_process.ProcessSessionSource``)."""

    def __init__(self, cfg: RunConfig, **session_options: object) -> None:
        from specload.session import Session

        # the session needs its listener when it is built; the front end's comes with run()
        self._listener: SessionListener = NullListener()
        relay = forwarding_listener(lambda name, args: getattr(self._listener, name)(*args))
        options = {"stay_open": True, "on_crash": cfg.watch.on_crash, **session_options}
        self.session = Session(cfg, listener=relay, **options)  # type: ignore[arg-type]
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
        self._listener = listener
        return await self.session.run()
