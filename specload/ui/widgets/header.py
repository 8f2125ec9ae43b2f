"""The run header: what is loaded (URL, model, API), how long, in which state, and the client's own load.

Two lines so it fits 80 columns: the target and the run state on the first, the client's CPU and
loop lag with the "client saturated" warning and a crash counter on the second. Every state carries a
symbol as well as a colour, so nothing depends on telling colours apart.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Label

from specload.formatting import clock, num
from specload.stats.live import StatsSnapshot
from specload.ui.widgets.value import ValueLabel

# runner/session state -> (what the user reads, CSS modifier)
STATES: dict[str, tuple[str, str]] = {
    "starting": ("… starting", "wait"),
    "waiting for server": ("… waiting for server", "wait"),
    "calibrating": ("… calibrating", "wait"),  # asking the server how it counts a prompt's tokens
    "warmup": ("◌ warming up", "wait"),
    "idle": ("◌ idle", "wait"),
    "ramping": ("▶ ramping", "run"),
    "holding": ("◆ holding", "hold"),
    "paused": ("‖ paused", "paused"),
    "draining": ("▽ draining", "wait"),
    "server down": ("✖ server down", "down"),
    "finished": ("■ finished", "done"),
    "stopped": ("■ stopped", "done"),
    "crashed": ("✖ crashed", "down"),  # the run ended by a crash (--on-crash stop)
    "error": ("✖ error", "down"),  # the run ended in an error (the server unreachable, the disk full)
    "engine failed": ("✖ engine failed", "down"),  # the engine process died (engine_process.py)
    "engine silent": ("⚠ engine silent", "down"),  # ... sends nothing: stopped, or its loop blocked
}


def state_text(label: str) -> tuple[str, str]:
    return STATES.get(label, (label, "wait"))


class RunHeader(Widget):
    DEFAULT_CSS = """
    RunHeader {
        height: 2;
        background: $panel;
        color: $foreground;
    }
    RunHeader Horizontal { height: 1; }
    RunHeader #h-title { width: 1fr; text-style: bold; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    RunHeader #h-state { width: 22; content-align: right middle; padding: 0 1; text-style: bold; }
    RunHeader #h-elapsed { width: 9; content-align: right middle; padding: 0 1; }
    RunHeader #h-client { width: 1fr; padding: 0 1; color: $specload-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    RunHeader #h-saturated { width: auto; padding: 0 1; display: none;
        background: $warning; color: $background; text-style: bold; }
    RunHeader #h-saturated.-on { display: block; }
    RunHeader #h-crashes { width: 14; padding: 0 1; display: none;
        background: $error; color: $background; text-style: bold; }
    RunHeader #h-crashes.-on { display: block; }
    RunHeader .-run { background: $primary; color: $background; }
    RunHeader .-hold { background: $accent; color: $background; }
    RunHeader .-paused { background: $warning; color: $background; }
    RunHeader .-down { background: $error; color: $background; }
    RunHeader .-done { background: $specload-good; color: $background; }
    RunHeader .-wait { background: $surface; color: $foreground; }
    """

    snapshot: var[StatsSnapshot | None] = var(None)
    state_label: var[str] = var("starting")
    target_info: var[tuple[str, str, str]] = var(("", "", ""))

    _api = ""
    _starved_shown = False

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield ValueLabel("specload", id="h-title")
            yield ValueLabel("", id="h-state")
            yield ValueLabel("00:00", id="h-elapsed")
        with Horizontal():
            yield ValueLabel("client cpu – · loop lag –", id="h-client")
            yield ValueLabel("", id="h-crashes")
            yield Label("⚠ CLIENT SATURATED", id="h-saturated")

    def watch_target_info(self, info: tuple[str, str, str]) -> None:
        url, model, _api = info
        # the API flavour goes on the second line: the first must keep the URL and model at 80 columns
        parts = [p for p in (url, model) if p]
        self.query_one("#h-title", ValueLabel).show(" · ".join(parts) if parts else "specload")
        self._api = _api
        if self.snapshot is not None:
            self.watch_snapshot(self.snapshot)

    def watch_state_label(self, label: str) -> None:
        text, mod = state_text(label)
        badge = self.query_one("#h-state", ValueLabel)
        badge.show(text)
        if not badge.has_class(f"-{mod}"):
            badge.set_classes(f"-{mod}")  # set_classes restyles even when unchanged

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        self.query_one("#h-elapsed", ValueLabel).show(clock(snap.elapsed_s))
        api = f"api {self._api} · " if self._api else ""
        self.query_one("#h-client", ValueLabel).show(
            f"{api}client cpu {num(snap.client_cpu_pct, '{:.0f}')}% · loop lag {num(snap.loop_lag_ms, '{:.1f}')} ms"
        )
        flag = self.query_one("#h-saturated", Label)
        flag.set_class(snap.client_saturated or snap.client_starved, "-on")
        if snap.client_starved != self._starved_shown:
            self._starved_shown = snap.client_starved
            flag.update("⚠ CLIENT STARVED" if snap.client_starved else "⚠ CLIENT SATURATED")
        crashes = self.query_one("#h-crashes", ValueLabel)
        n = len(snap.crashes)
        crashes.set_class(n > 0, "-on")
        if n:
            crashes.show(f"✖ {n} CRASH{'ES' if n > 1 else ''}")
