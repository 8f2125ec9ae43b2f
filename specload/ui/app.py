"""The Textual app: the live dashboard over one ``Session`` (or a fixed ``StaticSource``).

How data reaches the screen:

* Continuous state is *pulled*: a 4 Hz timer samples ``source.snapshot()``, ``runner_state()`` and
  ``state_label()`` into the app's reactives, and the panels receive them through ``data_bind``. The
  engine never calls into the UI per token or per request, so a busy screen cannot slow the load.
* Discrete happenings are *pushed*: the session's listener turns each call into a Textual message
  (``messages.py``) that the app handles between frames (new crash -> alert, level done -> table row).
* Controls call the runner's methods directly; the runner and session write every change into the
  record as an ``event`` line, so the UI adds nothing of its own to the record.

``create_app`` is the one factory used by the CLI (``run_app``), the Pilot tests and the snapshot
tests, so all three run the same app.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.reactive import var
from textual.widgets import Footer
from textual.worker import Worker

from specload.config import RunConfig
from specload.engine.capacity import SearchView
from specload.engine.runner import MAX_CONCURRENCY, RunnerState, scaled
from specload.exitcode import ExitCode
from specload.record.live import LiveView
from specload.session import Session, SessionResult
from specload.stats.live import StatsSnapshot
from specload.ui.layout import Dashboard, DetailGrid, PanelTabs, TopRow
from specload.ui.messages import (
    ClientLoadReported,
    CrashReported,
    LevelFinished,
    MessageListener,
    PhaseChanged,
    RunEventPosted,
    SessionEnded,
    SessionNotice,
    TargetFound,
)
from specload.ui.screens import ConcurrencyScreen, CrashScreen, HelpScreen, MarkerScreen
from specload.ui.source import DataSource
from specload.ui.themes import DEFAULT_THEME, FALLBACK_DARK, VARIABLE_DEFAULTS, load_themes
from specload.ui.widgets.crashes import CrashTable
from specload.ui.widgets.header import RunHeader
from specload.ui.widgets.levels import KneeChart, LevelTable
from specload.ui.widgets.load import LoadPanel
from specload.ui.widgets.logtail import LogTail
from specload.ui.widgets.metrics import LatencyPanel, ThroughputPanel
from specload.ui.widgets.server import ErrorsPanel, ServerPanel

REFRESH_S = 0.25  # the sampling period: 4 Hz is smooth for people and negligible for the engine
# The log tail is pulled every 4th sample (1 Hz): a growing log changes its virtual size, which
# re-runs the whole screen's layout, the most expensive thing the UI does (measured with cProfile).
LOG_EVERY = 4
QUIT_GRACE_S = 20.0  # after 'q', leave even if the session's teardown hangs
# Concurrency keys pressed within this many seconds of each other make one change (one manual
# level): three quick presses of up go from C=4 to C=7, not through table rows of C=5 and C=6 with
# a request or two each. The panel shows the pending value at once.
KEY_SETTLE_S = 0.4


class SpecloadApp(App[int]):
    TITLE = "specload"
    DEFAULT_CSS = """
    Screen { background: $background; }
    #crash-hint { color: $text-muted; height: 1; padding: 0 1; }
    """
    BINDINGS = [
        Binding("q", "quit_run", "Quit"),
        Binding("space", "pause", "Pause"),
        # the footer has 80 columns at worst: one entry per pair of keys, the partner hidden
        Binding("up,plus", "conc(1)", "C±1", key_display="↑↓"),
        Binding("down,minus", "conc(-1)", "C-1", show=False),
        Binding("right_square_bracket", "scale(2.0)", "×2/½", key_display="]["),
        Binding("left_square_bracket", "scale(0.5)", "½", show=False),
        Binding("c", "set_concurrency", "Set"),
        Binding("n", "next_level", "Next"),
        Binding("h", "hold", "Hold"),
        Binding("m", "marker", "Mark"),
        Binding("e", "crashes", "Crashes", show=False),
        # the capacity search: f starts it (or stops one running), b holds the load at its best point
        Binding("f", "find_max", "Find max", show=False),
        Binding("b", "hold_best", "Best", show=False),
        Binding("question_mark", "help", "Keys", key_display="?"),
        Binding("right", "panel(1)", "Panel", show=False),
        Binding("left", "panel(-1)", "Panel", show=False),
    ]

    snapshot: var[StatsSnapshot | None] = var(None)
    runner_state: var[RunnerState | None] = var(None)
    live: var[LiveView | None] = var(None)  # --baseline / --target-ci: the running level so far
    state_label: var[str] = var("starting")
    target_info: var[tuple[str, str, str]] = var(("", "", ""))
    pending_target: var[int | None] = var(None)  # a concurrency keyed in, applied once keys settle
    search: var[SearchView | None] = var(None)  # the capacity search, when one has run or runs

    def __init__(
        self,
        cfg: RunConfig | None = None,
        *,
        source: DataSource | None = None,
        theme: str | None = None,
        theme_dirs: list[Path] | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__()
        if source is None:
            if cfg is None:
                raise ValueError("SpecloadApp needs a RunConfig or a data source")
            # stay_open: when the ramp ends the dashboard stays, and the user may set a concurrency
            source = Session(cfg, listener=MessageListener(self.post_message), stay_open=True,
                             on_crash=cfg.watch.on_crash)
        self.source = source
        self.session: Session | None = source if isinstance(source, Session) else None
        self.refresh_s = refresh_s
        self.result: SessionResult | None = None
        self._quitting = False
        self._hung_up = False
        self._signal: int | None = None  # the signal that asked the app to quit, if one did
        self._ticks = 0
        self.key_settle_s = KEY_SETTLE_S
        self._settle_timer = None
        self._saturated_levels: set[tuple[int, bool]] = set()  # (level, starved) already announced
        self._startup_notices: list[tuple[str, str]] = []
        self._register_themes(theme, theme_dirs)

    # ------------------------------------------------------------------ themes

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def _register_themes(self, wanted: str | None, dirs: list[Path] | None) -> None:
        found = load_themes(dirs)
        if DEFAULT_THEME not in found.themes:
            found.themes[DEFAULT_THEME] = FALLBACK_DARK
        for t in found.themes.values():
            self.register_theme(t)
        for problem in found.problems:
            self._startup_notices.append((problem, "warning"))
        name = wanted or DEFAULT_THEME
        if name not in self.available_themes:
            self._startup_notices.append((f"unknown theme {name!r}: using {DEFAULT_THEME}", "warning"))
            name = DEFAULT_THEME
        try:
            self.theme = name
        except Exception as e:  # noqa: BLE001 - a theme must never stop a load test
            self._startup_notices.append((f"theme {name!r} failed ({e}): using {DEFAULT_THEME}", "warning"))
            self.theme = DEFAULT_THEME

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        App = SpecloadApp  # noqa: N806 - the reactives to bind live on the class
        yield RunHeader().data_bind(App.snapshot, App.state_label, App.target_info)
        with Dashboard():
            with TopRow():
                load = LoadPanel(classes="top-panel").data_bind(App.runner_state, App.pending_target, App.search,
                                                                App.live)
                load.border_title = "load"
                yield load
                tp = ThroughputPanel(classes="top-panel").data_bind(App.snapshot)
                tp.border_title = "throughput"
                yield tp
                lat = LatencyPanel(classes="top-panel").data_bind(App.snapshot)
                lat.border_title = "latency (rolling 10 s)"
                yield lat
            yield PanelTabs()
            with DetailGrid():
                levels = LevelTable(id="p-levels", classes="detail-panel").data_bind(App.snapshot)
                levels.border_title = "levels"
                yield levels
                chart = KneeChart(id="p-chart", classes="detail-panel").data_bind(App.snapshot, App.search)
                chart.border_title = "throughput vs concurrency"
                yield chart
                server = ServerPanel(id="p-server", classes="detail-panel").data_bind(App.snapshot)
                server.border_title = "server"
                yield server
                crashes = CrashTable(id="p-crashes", classes="detail-panel").data_bind(App.snapshot)
                crashes.border_title = "crashes (e: excerpt)"
                yield crashes
                errors = ErrorsPanel(id="p-errors", classes="detail-panel").data_bind(App.snapshot)
                errors.border_title = "errors"
                yield errors
                log = LogTail(id="p-log", classes="detail-panel")
                log.border_title = "server log"
                yield log
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(CrashTable).t0_ns = self.source.t0_ns
        slo = getattr(getattr(getattr(self.source, "cfg", None), "capacity", None), "slo", None)
        self.query_one(LatencyPanel).set_objectives(slo)
        for text, severity in self._startup_notices:
            self.notify(text, severity=severity, timeout=8)  # type: ignore[arg-type]
        self.sample()
        self.set_interval(self.refresh_s, self.sample)
        if self.session is not None:
            loop = asyncio.get_running_loop()
            try:
                # SIGINT and SIGTERM quit as 'q' does (record closed, in-flight requests recorded as
                # cancelled, the launched server stopped), with exit status 128 + the signal. Caught
                # before the session starts, so no signal can leave a server without its stop.
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self._signalled, sig)
                # the terminal went away (ssh dropped, tmux killed): quit as 'q' does, so the
                # launched server (in a session of its own, out of the hangup's reach) is stopped
                # and the record closed
                loop.add_signal_handler(signal.SIGHUP, self._hang_up)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
            self.run_worker(self._run_session(), name="session", exit_on_error=False)

    async def _run_session(self) -> None:
        assert self.session is not None
        try:
            result = await self.session.run()
        except Exception as e:  # noqa: BLE001 - one place for programming errors in the engine
            result = SessionResult("error", ExitCode.ERROR, (), f"internal error: {type(e).__name__}: {e}")
            self.post_message(SessionEnded(result))

    def sample(self) -> None:
        """One refresh: pull the source's state into the reactives and tail the log."""
        src = self.source
        self.snapshot = src.snapshot()
        self.runner_state = src.runner_state()
        self.state_label = src.state_label()
        self.target_info = (src.url or "", src.model or "", src.api or "")
        search_view = getattr(src, "search_view", None)
        self.search = search_view() if search_view is not None else None
        live_view = getattr(src, "live_view", None)
        self.live = live_view() if live_view is not None else None
        if self._ticks % LOG_EVERY == 0:
            try:
                self.query_one(LogTail).pull(src.log_lines)
            except NoMatches:  # a last tick while the app is being torn down
                return
        self._ticks += 1

    # ------------------------------------------------------------------ pushed events

    def on_session_notice(self, msg: SessionNotice) -> None:
        self.notify(msg.text, timeout=6)

    def on_phase_changed(self, msg: PhaseChanged) -> None:
        self.state_label = self.source.state_label()

    def on_target_found(self, msg: TargetFound) -> None:
        self.target_info = (msg.url, msg.model, msg.api)

    def on_run_event_posted(self, msg: RunEventPosted) -> None:
        ev = msg.event
        if ev.kind == "marker":
            self.notify(f"marker{': ' + str(ev.value) if ev.value else ''}", title="marker", timeout=3)
        elif ev.kind == "server_exit":
            self.notify(f"server {ev.value}", title="server", severity="error", timeout=10)
        elif ev.kind in ("pause", "resume", "hold", "next", "concurrency"):
            self.runner_state = self.source.runner_state()  # show the change now, not at the next tick
        elif ev.kind == "search" and isinstance(ev.value, dict):
            self._search_event(ev.value)

    def _search_event(self, v: dict) -> None:
        phase = v.get("phase")
        if phase == "result":
            crashed = v.get("reason") == "crashed"
            self.notify(str(v.get("message")), title="capacity search", severity="error" if crashed else "information",
                        timeout=30)
            dash = self.query_one(Dashboard)
            if dash.compact:
                dash.show_panel("chart")
        elif phase == "start":
            what = f"objectives {v['slo']}" if v.get("slo") else "no --slo: saturation only"
            self.notify(f"probing from {v.get('start'):g} ({what}) · f stops it, b holds the best point",
                        title="capacity search", timeout=6)

    def on_level_finished(self, msg: LevelFinished) -> None:
        self.query_one(LevelTable).show_level(msg.summary)
        chart = self.query_one(KneeChart)
        chart.set_levels(self.source.snapshot().levels)

    def on_crash_reported(self, msg: CrashReported) -> None:
        c = msg.crash
        table = self.query_one(CrashTable)
        table.show_crash(c)
        table.add_class("-has-crashes")
        if not c.new:
            return
        paused = " · load paused" if self.session is not None and self.session.on_crash == "pause" else ""
        self.notify(f"{c.exception_type}: {c.message}{paused}\npress e for the excerpt",
                    title="✖ SERVER CRASH", severity="error", timeout=15)
        self.bell()
        table.flash()
        dash = self.query_one(Dashboard)
        if dash.compact:
            dash.show_panel("crashes")

    def on_client_load_reported(self, msg: ClientLoadReported) -> None:
        load, key = msg.load, (msg.level, msg.load.starved)
        if key in self._saturated_levels:
            return
        self._saturated_levels.add(key)
        self.notify(load.warning(msg.level).split(" ", 2)[-1],
                    title="⚠ client starved" if load.starved else "⚠ client saturated", severity="warning", timeout=8)

    def _signalled(self, sig: int) -> None:
        """SIGINT/SIGTERM: what 'q' does; a second one while quitting changes nothing (the grace
        timer still ends the app if the teardown hangs)."""
        if self._signal is None:
            self._signal = sig
        self.action_quit_run()

    def _hang_up(self) -> None:
        """SIGHUP: the terminal is gone. Quit as 'q' does, then leave without restoring the terminal:
        Textual's shutdown waits on its input thread, which spins on the dead tty and never ends."""
        self._hung_up = True
        if self._signal is None:
            self._signal = signal.SIGHUP
        if self.session is None or self.result is not None:
            os._exit(self.exit_code)
        self.action_quit_run()
        # the session's teardown stops a launched server within its grace period; never hang
        self.set_timer(QUIT_GRACE_S, lambda: os._exit(self.exit_code))

    def on_session_ended(self, msg: SessionEnded) -> None:
        result = msg.result
        if not isinstance(result, SessionResult):
            return
        self.result = result
        if self._hung_up:  # the record is closed and the launched server stopped: done
            os._exit(self.exit_code)
        self.sample()
        if self._quitting:
            self.exit(self.exit_code)
            return
        if result.reason == "error" or result.message:  # e.g. stopped because the disk is full
            self.notify(result.message or "the run failed", title="error", severity="error", timeout=30)
        else:
            self.notify(f"run ended: {result.reason} (q to quit)", timeout=10)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # a quit requested while the session was still starting: leave once the worker is done
        if event.worker.name == "session" and event.worker.is_finished and self._quitting:
            self.exit(self.exit_code)

    @property
    def exit_code(self) -> int:
        """The process exit status: quitting with 'q' is a normal end unless a crash or error happened;
        a signal gives 128 + its number (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
        if self._signal is not None:
            return 128 + self._signal  # as a shell reports a process ended by that signal
        r = self.result
        if r is None:
            return ExitCode.OK
        if r.reason == "interrupted":
            crashed = self.snapshot is not None and bool(self.snapshot.crashes)
            return ExitCode.CRASHED if crashed else ExitCode.OK
        return r.exit_code if r.exit_code != ExitCode.INTERRUPTED else ExitCode.OK

    # ------------------------------------------------------------------ controls

    def _runner(self):
        runner = getattr(self.source, "runner", None)
        if runner is None:
            self.notify("the load has not started yet", severity="warning", timeout=3)
            return None
        if self.result is not None:
            self.notify("the run has ended", severity="warning", timeout=3)
            return None
        return runner

    def action_conc(self, delta: int) -> None:
        if (r := self._runner()) is not None:
            self._key_target(self._wanted(r) + delta)

    def action_scale(self, factor: float) -> None:
        if (r := self._runner()) is not None:
            self._key_target(scaled(self._wanted(r), factor))

    def _wanted(self, runner) -> int:  # noqa: ANN001 - the session's Runner
        return self.pending_target if self.pending_target is not None else runner.requested

    def _key_target(self, n: int) -> None:
        """Show ``n`` now; hand it to the runner when no further concurrency key follows in time."""
        self.pending_target = max(1, min(MAX_CONCURRENCY, n))
        self._cancel_settle()
        self._settle_timer = self.set_timer(self.key_settle_s, self._apply_pending)

    def _cancel_settle(self) -> None:
        if self._settle_timer is not None:
            self._settle_timer.stop()
            self._settle_timer = None

    def _take_over_from_search(self) -> None:
        """A concurrency set by hand ends a capacity search: the user has taken the load over."""
        if self.session is not None and self.session.capacity is not None and self.session.capacity.searching:
            result = self.session.stop_search()
            if result is not None:
                self.notify(result.message, title="search stopped", timeout=10)

    def _apply_pending(self) -> None:
        n, self.pending_target, self._settle_timer = self.pending_target, None, None
        if n is not None and (r := self._runner()) is not None:
            self._take_over_from_search()
            r.set_target(n)
            self.runner_state = self.source.runner_state()

    def action_set_concurrency(self) -> None:
        if (r := self._runner()) is None:
            return

        def apply(n: int | None) -> None:
            if n is not None and (r := self._runner()) is not None:
                self._cancel_settle()
                self.pending_target = None
                self._take_over_from_search()
                r.set_target(n)
                self.runner_state = self.source.runner_state()
                self.notify(f"concurrency → {n} (held)", timeout=3)

        self.push_screen(ConcurrencyScreen(self._wanted(r)), apply)

    def action_pause(self) -> None:
        if (r := self._runner()) is not None:
            r.toggle_pause()
            self.state_label = self.source.state_label()

    def action_next_level(self) -> None:
        if (r := self._runner()) is not None:
            r.next_level()

    def action_hold(self) -> None:
        if (r := self._runner()) is not None:
            r.toggle_hold()
            self.notify("holding this level" if r.held else "ramp resumed", timeout=3)

    def action_marker(self) -> None:
        if self.session is None or self._runner() is None:
            return

        def apply(note: str | None) -> None:
            if note is not None and self.session is not None and self.result is None:
                self.session.marker(note)

        self.push_screen(MarkerScreen(), apply)

    def action_crashes(self) -> None:
        crashes = list(self.query_one(CrashTable).crashes.values())
        if not crashes:
            self.notify("no server crash seen", timeout=3)
            return
        self.push_screen(CrashScreen(crashes, self.source.t0_ns))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_find_max(self) -> None:
        """Start the capacity search from the current concurrency, or stop the one running."""
        if self.session is None or self._runner() is None:
            return
        if self.session.capacity is not None and self.session.capacity.searching:
            result = self.session.stop_search()
            self.runner_state = self.source.runner_state()
            if result is not None:
                self.notify(result.message, title="search stopped", timeout=15)
            return
        self._cancel_settle()
        self.pending_target = None
        start = self.session.runner.target if self.session.runner is not None and not self.session.cfg.plan.rate else None
        if not self.session.start_search(start=start):
            self.notify("the search cannot start now", severity="warning", timeout=3)
        self.runner_state = self.source.runner_state()

    def action_hold_best(self) -> None:
        """Hold the load at the best point found (stopping a search that still runs)."""
        if self.session is None or self._runner() is None:
            return
        result = self.session.stop_search(hold_best=True)
        if result is None or result.best is None:
            self.notify("no best point found yet", severity="warning", timeout=4)
            return
        self.runner_state = self.source.runner_state()
        self.notify(f"holding the best point: {result.message.split(';')[0]}", title="capacity search", timeout=8)

    def get_system_commands(self, screen):  # noqa: ANN001, ANN201 - Textual's signature
        yield from super().get_system_commands(screen)
        if self.session is not None:
            yield SystemCommand("Find max (capacity search)",
                                "Search the highest load that meets the objectives and still adds throughput (f)",
                                self.action_find_max)
            yield SystemCommand("Hold at the best point", "Stop the search and hold the best load it found (b)",
                                self.action_hold_best)

    def action_panel(self, delta: int) -> None:
        self.query_one(Dashboard).step_panel(delta)

    def on_click(self, event) -> None:  # noqa: ANN001 - any click
        # clicking the crash table opens the excerpts (the table never takes focus)
        widget = getattr(event, "widget", None)
        if isinstance(widget, CrashTable) and widget.crashes:
            self.action_crashes()

    async def action_quit(self) -> None:
        self.action_quit_run()

    def action_quit_run(self) -> None:
        """Quit cleanly: stop sending, record in-flight requests as cancelled, close the record, exit."""
        if self.session is None or self.result is not None:
            self.exit(self.exit_code)
            return
        if self._quitting:
            return
        self._quitting = True
        self._cancel_settle()
        self.pending_target = None
        self.notify("quitting: cancelling in-flight requests and closing the record", timeout=5)
        self.session.interrupt("interrupted")
        self.set_timer(QUIT_GRACE_S, lambda: self.exit(self.exit_code))


def create_app(
    cfg: RunConfig | None = None,
    *,
    theme: str | None = None,
    source: DataSource | None = None,
    theme_dirs: list[Path] | None = None,
) -> SpecloadApp:
    """The app for a run (``cfg``) or for fixed data (``source``): used by the CLI and the tests."""
    return SpecloadApp(cfg, source=source, theme=theme, theme_dirs=theme_dirs)


def run_app(cfg: RunConfig, theme: str | None = None) -> int:
    """``specload tui``: run the dashboard until the user quits; the process exit status."""
    from specload.headless import _install_loop

    _install_loop()
    app = create_app(cfg, theme=theme)
    code = app.run()
    result = app.result
    if result is not None and result.message:
        import sys

        sys.stderr.write(f"specload: error: {result.message}\n")
    return code if isinstance(code, int) else app.exit_code


def run_replay(source: DataSource, theme: str | None = None) -> int:
    """``specload tui --replay``: the dashboard on a record played back; exit status 0 when quit."""
    from specload.headless import _install_loop

    _install_loop()
    app = create_app(source=source, theme=theme)
    code = app.run()
    return code if isinstance(code, int) else 0
