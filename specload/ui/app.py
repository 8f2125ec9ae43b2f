"""The Textual app: the live dashboard over one ``RunSource`` (``specload/sources/``: a run in an engine
process of its own, or on the app's loop; a record played back, or fixed data).

How data reaches the screen (one path each):

* State is *pulled*: a 4 Hz timer reads ``source.frame()`` into the app's reactives, and the panels
  receive them through ``data_bind``. The engine never calls into the UI per token or per request, and
  ``specload tui``'s engine is a process of its own (``specload.sources.engine_process``), so a busy
  screen (a modal, a resize) does not delay the load.
* One-off happenings are *pushed*: the source's ``SessionListener`` calls become messages
  (``messages.py``) the app handles between frames: a notice, a new crash (alert, bell, flash), a
  saturation warning, the end of the run.
* Controls go through ``source.control`` (a ``RunControl``); the session writes every change into the
  record as an ``event`` line, so the UI adds nothing of its own to the record.

``create_app`` is the one factory used by the CLI (``run_app``), the Pilot tests and the snapshot
tests, so all three run the same app.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, messages
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.notifications import Notify, SeverityLevel
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Footer
from textual.worker import Worker

from specload.config import RunConfig
from specload.datatypes import Marker, OutputDiverged, SearchProgress, ServerExited
from specload.engine.capacity import SearchView
from specload.engine.runner import MAX_CONCURRENCY, RunnerState, scaled
from specload.exitcode import ExitCode
from specload.session import SessionResult
from specload.sources.engine_process import EngineStartError, ProcessSessionSource
from specload.sources.frame import Frame, RunControl, RunSource
from specload.sources.local import SessionSource
from specload.stats.levels import LevelSummary
from specload.stats.live import StatsSnapshot
from specload.stats.live_judge import LiveView
from specload.stats.lossless import OutputsView, divergence_text
from specload.ui.keys import open_modal, take_key
from specload.ui.layout import Dashboard, DetailGrid, PanelTabs, TopRow
from specload.ui.messages import (
    ClientLoadReported,
    CrashReported,
    MessageListener,
    RunEventPosted,
    SessionEnded,
    SessionNotice,
)
from specload.ui.process import TUI_PROCESS, TuiProcess
from specload.ui.screens import CategoryScreen, ConcurrencyScreen, CrashScreen, HelpScreen, MarkerScreen
from specload.ui.themes import DEFAULT_THEME, FALLBACK_DARK, VARIABLE_DEFAULTS, load_themes
from specload.ui.watchdog import QuitWatchdog
from specload.ui.widgets.crashes import CrashTable
from specload.ui.widgets.gpus import GpuPanel
from specload.ui.widgets.header import RunHeader
from specload.ui.widgets.levels import KneeChart, LevelTable
from specload.ui.widgets.load import LoadPanel
from specload.ui.widgets.logtail import LogTail
from specload.ui.widgets.metrics import LatencyPanel, ThroughputPanel
from specload.ui.widgets.server import ErrorsPanel, ServerPanel
from specload.warmup import install_loop

if TYPE_CHECKING:
    from specload.report.compare import Comparison

REFRESH_S = 0.25  # the sampling period: 4 Hz is smooth for people and negligible for the engine
# The log tail is pulled every 4th sample (1 Hz): a growing log changes its virtual size, which
# re-runs the whole screen's layout, the most expensive thing the UI does (measured with cProfile).
LOG_EVERY = 4
QUIT_GRACE_S = 20.0  # after 'q', leave even if the session's teardown hangs
# after a quit request, the process ends this long after the launched server's stop grace, whatever
# blocks it (watchdog.py): the run's teardown takes a few seconds beyond that grace at most
QUIT_DEADLINE_S = 15.0
STOP_GRACE_S = 10.0  # the server's stop grace when the source does not say (an engine of its own)
# Concurrency keys pressed within this many seconds of each other make one change (one manual
# level): three quick presses of up go from C=4 to C=7, not through table rows of C=5 and C=6 with
# a request or two each. The panel shows the pending value at once.
KEY_SETTLE_S = 0.4



STARTING = "starting"  # the start-up toast's title
STARTUP_S = 5.0  # notices this long after the load started still join the start-up toast
# start-up notes a later one makes stale: (the later one's start, the earlier ones' starts)
SUPERSEDED = (
    ("server ready", ("waiting for the server",)),
    ("built-in simulator on", ("no server URL given", "started server")),
    ("prompt lengths in", ("prompt lengths:",)),
)


def startup_lines(notes: list[str]) -> list[str]:
    """The start-up notes worth showing once the later ones have come (in their order)."""
    out: list[str] = []
    for text in notes:
        for later, earlier in SUPERSEDED:
            if text.startswith(later):
                out = [t for t in out if not t.startswith(earlier)]
        out.append(text)
    return out


class SpecloadApp(App[int]):
    TITLE = "specload"
    CSS_PATH = "dashboard.tcss"
    # Priority bindings: the app handles them in its own queue, in arrival order, before anything is
    # forwarded (keys.py); check_action enables them on the dashboard only, so a dialog gets its keys
    BINDINGS = [
        Binding("q", "quit_run", "Quit", priority=True),
        # a load tester quits on ctrl+c (as q does: the record closed), in a dialog too
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
        Binding("space", "pause", "Pause", priority=True),
        # the footer has 80 columns at worst: one entry per pair of keys, the partner hidden
        Binding("up,plus", "conc(1)", "C±1", key_display="↑↓", priority=True),
        Binding("down,minus", "conc(-1)", "C-1", show=False, priority=True),
        Binding("right_square_bracket", "scale(2.0)", "×2/½", key_display="][", priority=True),
        Binding("left_square_bracket", "scale(0.5)", "½", show=False, priority=True),
        Binding("c", "set_concurrency", "Set", priority=True),
        Binding("n", "next_level", "Next", priority=True),
        Binding("h", "hold", "Hold", priority=True),
        Binding("m", "marker", "Mark", priority=True),
        Binding("e", "crashes", "Crashes", show=False, priority=True),
        Binding("v", "categories", "By category", show=False, priority=True),
        # the capacity search: f starts it (or stops one running), b holds the load at its best point
        Binding("f", "find_max", "Find max", show=False, priority=True),
        Binding("b", "hold_best", "Best", show=False, priority=True),
        Binding("question_mark", "help", "Keys", key_display="?", priority=True),
        Binding("right", "panel(1)", "Panel", show=False, priority=True),
        Binding("left", "panel(-1)", "Panel", show=False, priority=True),
    ]
    # the actions of those keys that belong to the dashboard (ctrl+c's interrupt works everywhere)
    DASHBOARD_ACTIONS = frozenset(
        {"quit_run", "pause", "conc", "scale", "set_concurrency", "next_level", "hold", "marker", "crashes",
         "categories", "find_max", "hold_best", "help", "panel"}
    )

    LOAD_ACTIONS = frozenset({"pause", "conc", "scale", "set_concurrency", "next_level", "hold", "marker",
                              "find_max", "hold_best"})

    snapshot: var[StatsSnapshot | None] = var(None)
    runner_state: var[RunnerState | None] = var(None)
    live: var[LiveView | None] = var(None)  # --baseline / --target-ci: the running level so far
    outputs: var[OutputsView | None] = var(None)  # --check-outputs with --baseline: answers compared
    state_label: var[str] = var("starting")
    target_info: var[tuple[str, str, str]] = var(("", "", ""))
    pending_target: var[int | None] = var(None)  # a concurrency keyed in, applied once keys settle
    search: var[SearchView | None] = var(None)  # the capacity search, when one has run or runs
    cut_levels: var[tuple[LevelSummary, ...]] = var(())  # levels cut by a crash or pause, not ended yet
    log_tail: var[tuple[tuple[int, str], ...]] = var(())  # the newest server log lines, about once a second

    def __init__(
        self,
        source: RunSource,
        *,
        theme: str | None = None,
        theme_dirs: list[Path] | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__()
        # no animations: a tab switch's sliding underline alone repainted the screen some 20 times in
        # 0.3 s, CPU that a run at full speed shares with the dashboard (benchmarks/tui_vs_headless.py)
        self.animation_level = "none"
        self.source = source
        self.control: RunControl | None = source.control
        self.frame: Frame = source.frame()
        self.refresh_s = refresh_s
        self.result: SessionResult | None = None
        self._quitting = False
        self._run_done = False  # the source's run is over (its worker finished)
        self._hung_up = False
        self._signal: int | None = None  # the signal that asked the app to quit, if one did
        self._ticks = 0
        self.key_settle_s = KEY_SETTLE_S
        self._settle_timer: Timer | None = None
        self._saturated_levels: set[tuple[int, bool]] = set()  # (level, starved) already announced
        self.startup_notices: list[tuple[str, str]] = []
        self._startup: list[tuple[str, SeverityLevel]] = []  # what the start-up toast says
        self._load_seen = 0.0  # when a frame first showed the load (monotonic)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.by_category: Comparison | None = None  # --baseline: each category judged, at the ramp's end
        self._judging = False
        self.watchdog = QuitWatchdog(process_groups=self._process_groups, exit_code=lambda: self.exit_code)
        # The watchdog ends the whole process: only when the app is the process (run_app, run_replay),
        # never when it runs inside another one (tests under App.run_test(), an embedding program),
        # where a quit that outlived its deadline would take the host process down with it.
        self.owns_process = False
        # called once after the first refresh (run_app: TUI_PROCESS.after_start, process-global)
        self.after_start: Callable[[], None] | None = None
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
            self.startup_notices.append((problem, "warning"))
        name = wanted or DEFAULT_THEME
        if name not in self.available_themes:
            self.startup_notices.append((f"unknown theme {name!r}: using {DEFAULT_THEME}", "warning"))
            name = DEFAULT_THEME
        try:
            self.theme = name
        except Exception as e:  # noqa: BLE001 - a theme must never stop a load test
            self.startup_notices.append((f"theme {name!r} failed ({e}): using {DEFAULT_THEME}", "warning"))
            self.theme = DEFAULT_THEME

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        App = SpecloadApp  # the reactives to bind live on the class
        yield RunHeader().data_bind(App.snapshot, App.state_label, App.target_info)
        with Dashboard():
            with TopRow():
                yield LoadPanel(classes="top-panel").data_bind(App.runner_state, App.pending_target, App.search,
                                                         App.live, App.outputs)
                yield ThroughputPanel(classes="top-panel").data_bind(App.snapshot)
                yield LatencyPanel(classes="top-panel").data_bind(App.snapshot)
            yield PanelTabs()
            with DetailGrid():
                yield LevelTable(id="p-levels", classes="detail-panel").data_bind(App.snapshot, App.cut_levels)
                yield KneeChart(id="p-chart", classes="detail-panel").data_bind(App.snapshot, App.search)
                yield ServerPanel(id="p-server", classes="detail-panel").data_bind(App.snapshot)
                yield CrashTable(id="p-crashes", classes="detail-panel").data_bind(App.snapshot)
                yield ErrorsPanel(id="p-errors", classes="detail-panel").data_bind(App.snapshot)
                yield GpuPanel(id="p-gpus", classes="detail-panel").data_bind(App.snapshot)
                yield LogTail(id="p-log", classes="detail-panel").data_bind(tail=App.log_tail)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(CrashTable).t0_ns = self.frame.info.t0_ns
        self.query_one(LatencyPanel).set_objectives(self.frame.info.slo)
        for text, severity in self.startup_notices:
            self._startup_note(text, severity)  # type: ignore[arg-type]
        self.sample()
        self.set_interval(self.refresh_s, self.sample)
        if self.after_start is not None:
            self.call_after_refresh(self.after_start)
        if self.control is not None:
            self._loop = asyncio.get_running_loop()
            # SIGINT and SIGTERM quit as 'q' does (record closed, in-flight requests recorded as
            # cancelled, the launched server stopped), with exit status 128 + the signal; SIGHUP (the
            # terminal went away: ssh dropped, tmux killed) too. Caught before the session starts, so no
            # signal can leave a server without its stop. Python-level handlers, not the loop's: they
            # run even when something blocks the loop, and they arm the watchdog before anything else.
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if self.owns_process else ():
                # not the main thread (an embedding), or no such signal
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(sig, self._on_signal)
            self.run_worker(self._run_source(), name="session", exit_on_error=False)

    def on_app_blur(self, event: events.AppBlur) -> None:
        # a dashboard looks the same focused or not; in a browser (tui --web) Textual's web driver
        # blurs the app at start, and a blurred app's footer stays empty until the page is clicked
        event.prevent_default()

    def on_unmount(self) -> None:
        # the app has shut down: the quit finished in time, so the watchdog must not end the process
        # later (the CLI exits at once, but an embedding, or the test process, lives on)
        self.watchdog.disarm()

    async def _run_source(self) -> None:
        try:
            result = await self.source.run(MessageListener(self.post_message))
            # the worker's end may be handled before the SessionEnded message: an exit then must
            # already have the run's status (3 after a crash, not 0)
            self.result = self.result or result
        except Exception as e:  # noqa: BLE001 - one place for programming errors in the engine
            result = SessionResult("error", ExitCode.ERROR, (), f"internal error: {type(e).__name__}: {e}")
            self.post_message(SessionEnded(result))

    def sample(self) -> None:
        """One refresh: the source's frame into the reactives the panels are bound to."""
        f = self.frame = self.source.frame()
        self.snapshot = f.stats
        self.runner_state = f.runner
        self.state_label = f.state
        self.target_info = (f.url or "", f.model or "", f.api or "")
        self.search = f.search
        self.live = f.live
        if f.outputs is not None and self.outputs is None:
            self.query_one(TopRow).add_class("-outputs")
        self.outputs = f.outputs
        self.cut_levels = f.cut_levels
        rs, cfg = f.runner, getattr(self.source, "cfg", None)
        if (rs is not None and rs.plan_done and rs.state == "finished" and not self._judging
                and isinstance(cfg, RunConfig) and cfg.compare.baseline):
            self._judging = True  # once: the ramp's levels are all in the record now
            self.run_worker(lambda: self._judge_categories(cfg, f.stats.levels), thread=True, exit_on_error=False)
        if self._ticks % LOG_EVERY == 0:
            self.log_tail = f.log
        self._ticks += 1

    def _judge_categories(self, cfg: RunConfig, levels: tuple[LevelSummary, ...]) -> None:
        """In a thread: the record against the baseline by category (``report BASE RUN``'s verdicts)."""
        from specload.headless import baseline_by_category

        c = baseline_by_category(cfg, levels)
        if c is not None:
            self.call_from_thread(self.call_later, self._categories_judged, c)

    async def _categories_judged(self, c: Comparison) -> None:
        self.by_category = c
        if len(self.screen_stack) == 1:  # not over a dialog the user has open
            await self.action_categories()
        else:
            self.notify("the ramp is over: v shows the verdicts by category", timeout=8)

    # ------------------------------------------------------------------ pushed events

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Textual's toast, its text never markup: a notice naming 'pip install specload[gpu]' lost its
        '[gpu]' (the dashboard's texts that want a style pass markup=True)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def _starting(self) -> bool:
        """Start-up: until the load has run STARTUP_S (the prompt-length and GPU checks end then)."""
        if self.frame.runner is None:
            return True
        self._load_seen = self._load_seen or time.monotonic()
        return time.monotonic() - self._load_seen < STARTUP_S

    def _on_notify(self, event: Notify) -> None:
        # a new start-up toast replaces the one before (here, where toasts are added: no race)
        if event.notification.title == STARTING:
            for n in [n for n in self._notifications if n.title == STARTING]:
                self._unnotify(n, refresh=False)
        super()._on_notify(event)

    def on_session_notice(self, msg: SessionNotice) -> None:
        if self._starting():  # one start-up toast
            self._startup_note(msg.text)
        else:
            self.notify(msg.text, timeout=4)

    def _startup_note(self, text: str, severity: SeverityLevel = "information") -> None:
        """Start-up notices in one toast, each new one replacing it (eight toasts covered half of an
        80x24 screen for 10 s), without the notes a later one made stale."""
        self._startup.append((text, severity))
        worst: SeverityLevel = "warning" if any(sev != "information" for _, sev in self._startup) else "information"
        self.notify("\n".join(startup_lines([t for t, _ in self._startup])), title=STARTING, severity=worst,
                    timeout=6)

    def on_run_event_posted(self, msg: RunEventPosted) -> None:
        match msg.event:
            case Marker(note=note):
                self.notify(f"marker{': ' + note if note else ''}", title="marker", timeout=3)
            case ServerExited(description=how):
                self.notify(f"server {how}", title="server", severity="error", timeout=10)
            case SearchProgress(progress=progress):
                self._search_event(progress)
            case OutputDiverged(finding=finding):
                self.sample()  # the count shows with the alert
                self.notify(divergence_text(finding), title="✖ OUTPUT DIVERGES", severity="error", timeout=20,
                            markup=False)
                self.bell()

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

    def on_crash_reported(self, msg: CrashReported) -> None:
        """A new crash signature: the alert (the table shows it from the frame)."""
        c = msg.crash
        self.sample()  # the table and the header show it with the alert, not at the next tick
        table = self.query_one(CrashTable)
        paused = " · load paused" if self.frame.info.on_crash == "pause" else ""
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
                    title="⚠ client starved" if load.starved else "⚠ client saturated", severity="warning", timeout=5)

    def _on_signal(self, sig: int, _frame: object) -> None:
        """A signal handler (main thread, between any two bytecodes): arm the watchdog, then quit from
        the loop."""
        self._arm_watchdog(signal.Signals(sig).name)
        self._call_in_loop(self._hang_up if sig == signal.SIGHUP else self._signalled, sig)

    def on_terminal_lost(self, why: str) -> None:
        """From the terminal driver, in whatever thread saw it (terminal.py): quit as for SIGHUP."""
        self._arm_watchdog(why)
        self._call_in_loop(self._hang_up, signal.SIGHUP)

    def _call_in_loop(self, fn: Callable[[int], None], sig: int) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            # the loop closed meanwhile: the watchdog ends the process
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn, sig)

    def _arm_watchdog(self, why: str) -> None:
        """The process ends at the deadline whatever blocks it (watchdog.py); the run's own teardown
        needs at most the launched server's stop grace and a few seconds."""
        if self.control is not None and self.owns_process:
            grace = getattr(self.source, "stop_grace_s", STOP_GRACE_S)
            self.watchdog.arm(grace + QUIT_DEADLINE_S, why)

    def _process_groups(self) -> list[int]:
        """What the watchdog kills: the engine process's group, a launched server's (as the source says)."""
        groups = getattr(self.source, "process_groups", None)
        return groups() if groups is not None else []

    def _signalled(self, sig: int) -> None:
        """SIGINT/SIGTERM: what 'q' does; a second one while quitting changes nothing (the grace
        timer and the watchdog still end the app if the teardown hangs)."""
        if self._signal is None:
            self._signal = sig
        self.action_quit_run()

    def _hang_up(self, sig: int = signal.SIGHUP) -> None:
        """SIGHUP or the terminal gone: quit as 'q' does, then leave without restoring the terminal
        (there is nothing to restore; the watchdog ends the process if anything hangs)."""
        self._hung_up = True
        if self._signal is None:
            self._signal = sig
        if self.control is None or self.result is not None or self._run_done:
            os._exit(self.exit_code)
        self.action_quit_run()

    def on_session_ended(self, msg: SessionEnded) -> None:
        result = self.result = msg.result
        if self._hung_up:  # the record is closed and the launched server stopped: done
            os._exit(self.exit_code)
        self.sample()
        if self._quitting:
            self.exit(self.exit_code)
            return
        if result.reason == "error" and self.frame.runner is None:
            # the run could not start (the server unreachable, a dataset that cannot be read): there is
            # nothing to look at; the CLI says why and exits 1, as headless does
            self.exit(self.exit_code)
            return
        if result.reason == "error" or result.message:  # e.g. stopped because the disk is full
            self.notify(result.message or "the run failed", title="error", severity="error", timeout=30)
        else:
            self.notify(f"run ended: {result.reason} (q to quit)", timeout=10)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name == "session" and event.worker.is_finished:
            self._run_done = True
            if self._quitting:  # a quit requested while the session was still starting
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
            crashed = bool(self.frame.stats.crashes)
            return ExitCode.CRASHED if crashed else ExitCode.OK
        return r.exit_code if r.exit_code != ExitCode.INTERRUPTED else ExitCode.OK

    # ------------------------------------------------------------------ keys and terminal

    def get_driver_class(self):  # Textual's signature
        cls = super().get_driver_class()
        try:
            from textual.drivers.linux_driver import LinuxDriver

            from specload.ui.terminal import GuardedDriver
        except ImportError:  # no termios (Windows)
            return cls
        return GuardedDriver if cls is LinuxDriver else cls

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # the dashboard's keys only while it is shown: in a dialog, 'q' and 'c' are text and arrows
        # move the cursor
        if action in self.DASHBOARD_ACTIONS and len(self.screen_stack) > 1:
            return False
        # a control that serves only some load keys (a replay: pause and next) hides the others
        served = getattr(type(self.control), "keys", None)  # a class's declaration, not a call through a proxy
        return not (served is not None and action in self.LOAD_ACTIONS and action not in served)

    async def on_event(self, event: events.Event) -> None:
        # our dialogs take their keys here, in the app's queue, in order (keys.py)
        if await take_key(self, event):
            return
        await super().on_event(event)

    # ------------------------------------------------------------------ controls

    def _steerable(self) -> RunnerState | None:
        """The runner's state when the run can be steered now; else a notice and None."""
        if self.control is None:
            return None
        rs = self.source.frame().runner  # now, not as of the last tick: the load may just have started
        if rs is None:
            self.notify("the load has not started yet", severity="warning", timeout=3)
            return None
        if self.result is not None:
            self.notify("the run has ended", severity="warning", timeout=3)
            return None
        return rs

    def _steer(self, command: Callable[[RunControl], object]) -> None:
        """A control command, then the frame at once: a key's effect shows now, not at the next tick."""
        assert self.control is not None
        command(self.control)
        self.sample()

    def action_conc(self, delta: int) -> None:
        if (rs := self._steerable()) is not None:
            self._key_target(self._wanted(rs) + delta)

    def action_scale(self, factor: float) -> None:
        if (rs := self._steerable()) is not None:
            self._key_target(scaled(self._wanted(rs), factor))

    def _wanted(self, rs: RunnerState) -> int:
        return self.pending_target if self.pending_target is not None else rs.requested or rs.target

    def _key_target(self, n: int) -> None:
        """Show ``n`` now; hand it to the runner when no further concurrency key follows in time."""
        self.pending_target = max(1, min(MAX_CONCURRENCY, n))
        self._cancel_settle()
        self._settle_timer = self.set_timer(self.key_settle_s, self._apply_pending)

    def _cancel_settle(self) -> None:
        if self._settle_timer is not None:
            self._settle_timer.stop()
            self._settle_timer = None

    def _apply_pending(self) -> None:
        n, self.pending_target, self._settle_timer = self.pending_target, None, None
        if n is not None and self._steerable() is not None:
            self._steer(lambda c: c.set_target(n))

    async def action_set_concurrency(self) -> None:
        if (rs := self._steerable()) is None:
            return

        def apply(n: int | None) -> None:
            if n is not None and self._steerable() is not None:
                self._cancel_settle()
                self.pending_target = None
                self._steer(lambda c: c.set_target(n))
                self.notify(f"concurrency → {n} (held)", timeout=3)

        await open_modal(self, ConcurrencyScreen(self._wanted(rs)), apply)

    def action_pause(self) -> None:
        if self._steerable() is not None:
            self._steer(lambda c: c.toggle_pause())

    def action_next_level(self) -> None:
        if self._steerable() is not None:
            self._steer(lambda c: c.next_level())

    def action_hold(self) -> None:
        if (rs := self._steerable()) is None:
            return
        if rs.plan_done and not rs.held:  # the ramp is over: nothing runs that could be held
            self.notify("the ramp's levels have all run: nothing to hold (c or ↑ sets a concurrency)",
                        severity="warning", timeout=6)
            return
        self._steer(lambda c: c.toggle_hold())
        if rs.held and rs.plan_done:  # releasing hands back to a plan with no level left: the load ends
            self.notify("the ramp's levels have all run: the load stops here (c or ↑ sets a concurrency)",
                        severity="warning", timeout=8)
        else:
            self.notify("ramp resumed" if rs.held else "holding this level", timeout=3)

    async def action_marker(self) -> None:
        if self._steerable() is None:
            return

        def apply(note: str | None) -> None:
            if note is not None and self.control is not None and self.result is None:
                self.control.marker(note)

        await open_modal(self, MarkerScreen(), apply)

    async def action_crashes(self) -> None:
        crashes = list(self.frame.stats.crashes)
        if not crashes:
            self.notify("no server crash seen", timeout=3)
            return
        await open_modal(self, CrashScreen(crashes, self.frame.info.t0_ns))

    async def action_categories(self) -> None:
        if self.by_category is None:
            self.notify("verdicts by category: with --baseline, --record and a dataset's categories, at the "
                        "ramp's end", timeout=4)
            return
        from rich.text import Text

        from specload.report.compare import category_tables, unsound_notes

        c = self.by_category
        notes = [Text(f"⚠ {n}", style="yellow") for n in unsound_notes(c)]
        await open_modal(self, CategoryScreen([*category_tables(c, max(40, self.size.width - 8)), *notes]))

    async def action_help(self) -> None:
        await open_modal(self, HelpScreen())

    def action_find_max(self) -> None:
        """Start the capacity search from the current concurrency, or stop the one running."""
        if (rs := self._steerable()) is None:
            return
        self._cancel_settle()
        self.pending_target = None
        start = None if self.frame.info.open_loop else rs.target
        self._steer(lambda c: c.find_max(start))

    def action_hold_best(self) -> None:
        """Hold the load at the best point found (stopping a search that still runs)."""
        if self._steerable() is not None:
            self._steer(lambda c: c.hold_best())

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot: saved in the current directory (Textual's default, ~/Downloads,
        is missing on a server) and said where; in a browser (--web) the page downloads it."""
        if self.is_web:
            return super().deliver_screenshot(filename, path, time_format)
        try:
            saved = self.save_screenshot(filename, path or os.getcwd(), time_format)
        except OSError as e:
            self.notify(f"screenshot not saved: {e.strerror or e}", severity="error")
            return None
        self.notify(f"screenshot saved to {saved}", timeout=6)
        return None

    def get_system_commands(self, screen):  # Textual's signature
        yield from super().get_system_commands(screen)
        if self.control is not None:
            yield SystemCommand("Find max (capacity search)",
                                "Search the highest load that meets the objectives and still adds throughput (f)",
                                self.action_find_max)
            yield SystemCommand("Hold at the best point", "Stop the search and hold the best load it found (b)",
                                self.action_hold_best)

    def action_panel(self, delta: int) -> None:
        self.query_one(Dashboard).step_panel(delta)

    async def on_click(self, event) -> None:  # any click
        # clicking the crash table opens the excerpts (the table never takes focus)
        widget = getattr(event, "widget", None)
        if isinstance(widget, CrashTable) and self.frame.stats.crashes:
            await self.action_crashes()

    async def action_quit(self) -> None:
        self.action_quit_run()

    # Textual runs each class's handler in the MRO: App's own takes no message, so the signatures differ
    def _on_exit_app(self, message: messages.ExitApp) -> None:  # type: ignore[override]
        # An exit asked from outside the app: textual-serve's page was closed (its web driver posts
        # ExitApp). Quit as 'q' does first, so in-flight requests are recorded as cancelled and the
        # record and the built-in server are closed; Textual's own handler (App._on_exit_app, run
        # after this one unless prevented) exited at once, with the record left without its end
        # line. The clean quit ends with exit(), which comes back here with _quitting set; with no run
        # to end (none, over, or its source done) the quit is exit() itself: let it through.
        if self.control is not None and self.result is None and not self._run_done and not self._quitting:
            message.prevent_default()
            self.action_quit_run()

    def action_interrupt(self) -> None:
        """ctrl+c: what q does, from any screen (a load tester is expected to stop on ctrl+c)."""
        self.action_quit_run()

    def action_quit_run(self) -> None:
        """Quit cleanly: stop sending, record in-flight requests as cancelled, close the record, exit."""
        if self.control is None or self.result is not None or self._run_done:
            self.exit(self.exit_code)
            return
        if self._quitting:
            return
        self._quitting = True
        self._arm_watchdog("q")
        self._cancel_settle()
        self.pending_target = None
        self.notify("quitting: cancelling in-flight requests and closing the record", timeout=5)
        # with a signal, the record says interrupted, as the exit status (128 + the signal) does; a
        # plain quit's end reason says what had happened by then (RunPolicy.quit_reason)
        self.control.quit(self._signal)
        self.set_timer(QUIT_GRACE_S, lambda: self.exit(self.exit_code))


def create_app(
    cfg: RunConfig | None = None,
    *,
    theme: str | None = None,
    source: RunSource | None = None,
    theme_dirs: list[Path] | None = None,
    process: TuiProcess | None = None,
    engine: str = "process",
    notices: tuple[str, ...] = (),
) -> SpecloadApp:
    """The app for a run (``cfg``) or for a given source (fixed data, a replay): used by the CLI and
    the tests. A run's session runs where ``engine`` says: ``process``, a process of its own (what
    ``specload tui`` ships: nothing of the UI's can delay it), or ``local``, on the app's own loop
    (tests that must look inside the session). ``process``: the UI process's settings applied once
    the engine process runs (the CLI's process only: they cannot be undone). ``notices``: shown on
    screen at the start."""
    if source is None:
        if cfg is None:
            raise ValueError("create_app needs a RunConfig or a source")
        if engine == "process":
            source = ProcessSessionSource(cfg, on_started=process.engine_started if process is not None else None)
        elif engine == "local":
            source = SessionSource(cfg)
        else:
            raise ValueError(f"unknown engine {engine!r}: process or local")
    app = SpecloadApp(source, theme=theme, theme_dirs=theme_dirs)
    app.startup_notices.extend((text, "information") for text in notices)
    return app


def run_app(cfg: RunConfig, theme: str | None = None, notice: str | None = None,
            engine: ProcessSessionSource | None = None) -> int:
    """``specload tui``: run the dashboard until the user quits; the process exit status. ``notice``:
    shown on screen at the start (where the run records to). ``engine``: the run's engine process,
    started by the caller (``ProcessSessionSource(..., wait=False)``, with ``TUI_PROCESS.engine_started``)
    before it imported this module, so that the two processes' start-ups overlap."""
    from specload.headless import print_tui_end

    install_loop()
    TUI_PROCESS.apply()  # process-global: here only, never in a test suite's process
    notices = (notice,) if notice else ()
    try:
        if engine is None:
            app = create_app(cfg, theme=theme, process=TUI_PROCESS, notices=notices)
        else:
            engine.wait_started()
            app = create_app(source=engine, theme=theme, notices=notices)
    except EngineStartError as e:
        sys.stderr.write(f"specload: error: {e}\n")
        return ExitCode.ERROR
    app.owns_process = True
    app.after_start = TUI_PROCESS.after_start
    code = app.run()
    result = app.result
    print_tui_end(result, cfg.record.path, cfg=cfg)
    if result is not None and result.message:
        sys.stderr.write(f"specload: error: {result.message}\n")
    return code if isinstance(code, int) else app.exit_code


def run_replay(source: RunSource, theme: str | None = None) -> int:
    """``specload tui --replay``: the dashboard on a record played back; exit status 0 when quit."""
    install_loop()
    app = create_app(source=source, theme=theme)
    app.owns_process = True
    code = app.run()
    return code if isinstance(code, int) else 0
