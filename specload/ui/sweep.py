"""``specload tui --sweep ...`` (or ``specload sweep --tui ...``): a sweep watched as it runs.

The sweep runs as ``specload sweep`` in a process of its own, as the dashboard's load runs in an
engine process: nothing the screen does delays a stream or a server's start. That process writes
its progress as JSON lines on a pipe (``--progress-fd``: the plan, each phase, each level, a crash,
each run's end, the comparison so far); its stderr lines fill the log panel. The screen shows the
configuration running and its phase (starting, loading, ready, load, stopping), every
configuration's status and start-up time, the levels of the run under way, the headline comparison
filling in as runs finish, the last crash, and the sweep's ETA (from the start-up and level times
measured so far, counted down between events).

``q`` (or ctrl+c) sends the sweep SIGINT: it stops the server it started and leaves its folder
resumable; the app leaves when the sweep has. After the app, the sweep's table is printed (from its
sweep.json, at this terminal's width).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Any

import orjson
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.widgets import DataTable, Footer, RichLog, Static

from specload.ui.themes import DEFAULT_THEME, FALLBACK_DARK, VARIABLE_DEFAULTS, load_themes

_VERDICT = {"better": "▲", "worse": "▼", "no_difference": "=", "insufficient": "?", "unsound": "⚠"}
_PHASES = ("starting", "loading", "ready", "load", "stopping")


class SweepApp(App[int]):
    CSS = """
    Screen { background: $background; }
    #sweep-head { height: 2; padding: 0 1; color: $text; background: $panel; }
    #sweep-grid { grid-size: 2 2; grid-columns: 1fr 1fr; grid-rows: 1fr 1fr; height: 1fr; }
    #sweep-grid > * { border: round $primary 40%; border-title-color: $text-muted; height: 1fr; }
    #sweep-crash.-crashed { border: round $error; border-title-color: $error; }
    #sweep-crash { color: $text; padding: 0 1; }
    RichLog { background: $surface; color: $text-muted; }
    """
    BINDINGS = [Binding("q", "quit_sweep", "Quit (resumable)"), Binding("ctrl+c", "quit_sweep", "Quit", show=False)]

    def __init__(self, words: list[str], *, theme: str | None = None) -> None:
        super().__init__()
        self.words = words
        self.proc: asyncio.subprocess.Process | None = None
        self.exit_code: int | None = None
        self.plan: dict[str, Any] = {}
        self.status: dict[str, str] = {}  # per configuration: its run's phase, or what its runs came to
        self.slots: dict[int, tuple[str, str]] = {}  # slot -> (configuration, status)
        self.startup: dict[str, list[float]] = {}
        self.current: dict[str, Any] = {}
        self.eta: tuple[float, float] | None = None  # (seconds, when said)
        self.schedule_text = ""
        found = load_themes()
        found.themes.setdefault(DEFAULT_THEME, FALLBACK_DARK)
        for t in found.themes.values():
            self.register_theme(t)
        self.theme = theme if theme in self.available_themes else DEFAULT_THEME

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Static("sweep: starting", id="sweep-head")
        with Grid(id="sweep-grid"):
            configs: DataTable[Any] = DataTable(id="sweep-configs", cursor_type="none")
            configs.border_title = "configurations"
            yield configs
            comparison: DataTable[Any] = DataTable(id="sweep-comparison", cursor_type="none")
            comparison.border_title = "vs baseline (headline)"
            yield comparison
            levels: DataTable[Any] = DataTable(id="sweep-levels", cursor_type="none")
            levels.border_title = "levels of this run"
            yield levels
            crash = RichLog(id="sweep-log", wrap=True, max_lines=500, min_width=20)
            crash.border_title = "log"
            yield crash
        yield Footer()

    async def on_mount(self) -> None:
        t = self.query_one("#sweep-configs", DataTable)
        for col in ("config", "status", "runs", "start s"):
            t.add_column(col, key=col)
        lv = self.query_one("#sweep-levels", DataTable)
        for col in ("C", "tok/s", "TTFT ms", "TPOT ms", "ok"):
            lv.add_column(col, key=col)
        self.set_interval(1.0, self._show_head)
        self.run_worker(self._run_sweep(), exclusive=True)

    # ------------------------------------------------------------------ the sweep process

    async def _run_sweep(self) -> None:
        read, write = os.pipe()
        cmd = [sys.executable, "-m", "specload.cli", "sweep", *self.words, "--progress-fd", str(write)]
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, pass_fds=(write,), start_new_session=True)
        finally:
            os.close(write)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        progress = asyncio.StreamReader(limit=16 * 2**20)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(progress),
                                                    os.fdopen(read, "rb", buffering=0))
        try:
            await asyncio.gather(self._events(progress), self._stderr(self.proc.stderr), self.proc.stdout.read())
            self.exit_code = await self.proc.wait()
        finally:
            transport.close()
        self.current = {}
        self._show_head()

    async def _events(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(ev, dict):
                self.handle(ev)

    async def _stderr(self, stream: asyncio.StreamReader) -> None:
        log = self.query_one("#sweep-log", RichLog)
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip().removeprefix("specload sweep: ")
            if "\r" in text or "\x1b" in text:
                continue
            style = "bold red" if "CRASH" in text or "FAILED" in text else ""
            log.write(Text(text, style=style))

    def action_quit_sweep(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            self.exit(self.exit_code or 0)
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        self.notify("stopping the sweep: its server is stopped, the folder stays resumable")
        self.run_worker(self._leave(), group="leave")

    async def _leave(self) -> None:
        assert self.proc is not None
        await self.proc.wait()
        for _ in range(50):  # the last pipe contents
            if self.exit_code is not None:
                break
            await asyncio.sleep(0.02)
        self.exit(self.proc.returncode or 0)

    # ------------------------------------------------------------------ what the sweep says

    def handle(self, ev: dict[str, Any]) -> None:
        kind = ev.get("kind")
        if "eta_s" in ev:
            self.eta = (ev["eta_s"], time.monotonic()) if ev["eta_s"] is not None else None
        if kind == "plan":
            self.plan = ev
            for s in ev.get("schedule", []):
                self.slots[s["index"]] = (s["config"], s["status"])
                self.status.setdefault(s["config"], "pending")
            for name in self.status:
                self.status[name] = self._decided(name)
            self._show_configs()
        elif kind == "phase":
            self.current = ev
            if ev["phase"] == "starting":
                self.query_one("#sweep-levels", DataTable).clear()
            if ev["phase"] in _PHASES:
                self.status[ev["config"]] = ev["phase"]
            self._show_configs()
        elif kind == "level":
            s = ev["summary"]
            self.query_one("#sweep-levels", DataTable).add_row(
                str(s.get("concurrency")), _num(s.get("throughput_tok_s"), 1), _num(s.get("ttft_ms_p50"), 1),
                _num(s.get("tpot_ms_p50"), 2), f"{s.get('ok')}/{s.get('requests')}")
        elif kind == "crash":
            c = ev["crash"]
            ranks = f" on {', '.join(c['processes'])}" if c.get("processes") else ""
            self.notify(f"{ev['config']}: {c['exception_type']}: {c['message']}{ranks}"[:300], severity="error",
                        title="server crash", timeout=8)
        elif kind == "slot_end":
            att = ev.get("attempt") or {}
            if att.get("startup_s") is not None:
                self.startup.setdefault(ev["config"], []).append(att["startup_s"])
            self.slots[ev["slot"]] = (ev["config"], ev["status"])
            self.status[ev["config"]] = self._decided(ev["config"])
            self._show_configs()
        elif kind == "comparison":
            self._show_comparison(ev)
        elif kind == "end":
            self.schedule_text = (ev.get("result") or {}).get("schedule_text") or ""
        self._show_head()

    def _decided(self, name: str) -> str:
        """What a configuration's runs came to: its status once all are decided, else waiting."""
        from specload.report.sweep import config_status

        mine = [{"status": st} for n, st in self.slots.values() if n == name]
        status = config_status(mine)
        return "waiting" if status == "pending" else status

    def _show_head(self) -> None:
        head = self.query_one("#sweep-head", Static)
        done = sum(1 for v in self.status.values() if v in ("ok", "crashed", "failed_to_start"))
        top = f"sweep {self.plan.get('dir', '')} · {done}/{len(self.status)} configurations decided"
        if self.eta is not None and self.current:
            left = max(0.0, self.eta[0] - (time.monotonic() - self.eta[1]))
            top += f" · ETA {int(left // 60)}:{int(left % 60):02d}"
        if self.exit_code is not None:
            second = f"finished (exit {self.exit_code})" + (f" · best: {self.schedule_text}" if self.schedule_text
                                                             else "") + " · q to leave"
        elif self.current:
            c = self.current
            n = len(self.plan.get("schedule", []))
            rep = f" repeat {c['repeat'] + 1}" if len({s["repeat"] for s in self.plan.get("schedule", [])}) > 1 else ""
            second = f"[{c['slot'] + 1}/{n}] {c['config']}{rep} · {c['phase']}"
        else:
            second = "starting the sweep"
        head.update(Text(f"{top}\n{second}"))

    def _show_configs(self) -> None:
        t = self.query_one("#sweep-configs", DataTable)
        t.clear()
        for name, status in self.status.items():
            mine = [st for n, st in self.slots.values() if n == name]
            done = sum(1 for st in mine if st == "ok")
            st = self.startup.get(name)
            style = "bold red" if status in ("crashed", "failed_to_start") else "bold" if status in _PHASES else ""
            t.add_row(Text(name), Text(status, style=style), f"{done}/{len(mine)}",
                      f"{sorted(st)[len(st) // 2]:.1f}" if st else "-")

    def _show_comparison(self, ev: dict[str, Any]) -> None:
        t = self.query_one("#sweep-comparison", DataTable)
        t.clear(columns=True)
        levels = ev.get("levels") or []
        base = ev.get("baseline")
        names = [n for n in self.status if any(n in lv["sides"] for lv in levels)]
        rows = []
        for n in names:
            cells = [n + (" (base)" if n == base else "")]
            for lv in levels:
                m = lv["sides"].get(n) or {}
                if n == base:
                    cells.append(_num(m.get("value"), 0))
                elif m.get("ratio") is not None:
                    cells.append(f"×{m['ratio']:.2f} {_VERDICT.get(m.get('verdict') or '', '')}")
                else:
                    cells.append("-")
            rows.append(cells)
        # widths given: a table cleared and refilled while on screen may keep the first rows' widths
        for i, label in enumerate(["config", *(lv["key"] for lv in levels)]):
            t.add_column(label, width=max(len(label), *(len(r[i]) for r in rows)) if rows else None)
        for cells in rows:
            t.add_row(Text(cells[0]), *cells[1:])
        if ev.get("schedule_text"):
            t.border_subtitle = f"best: {ev['schedule_text']}"


def _num(v: Any, digits: int) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v:,.{digits}f}"


def run_sweep_tui(words: list[str], theme: str | None = None) -> int:
    """The dashboard over ``specload sweep WORDS``; after it, the sweep's table. The sweep's exit status."""
    from specload.warmup import install_loop

    install_loop()
    app = SweepApp(words, theme=theme)
    app.run()
    if app.proc is not None and app.proc.returncode is None:  # the app ended first (its terminal went away)
        with contextlib.suppress(ProcessLookupError):
            app.proc.send_signal(signal.SIGINT)
    folder = app.plan.get("dir")
    if folder and app.exit_code is not None:  # the sweep's table, at this terminal's width
        from specload.report.report import wide_console
        from specload.report.sweep import SweepReadError, read_sweep, render

        with contextlib.suppress(SweepReadError, KeyError):
            render(read_sweep(folder), wide_console(), title=folder)
    return app.exit_code if app.exit_code is not None else 1
