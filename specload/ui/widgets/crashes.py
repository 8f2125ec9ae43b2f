"""Server crashes: one row per signature, kept in place as counts grow, with an alert on a new one.

A signature repeats (many ranks, many requests hitting the same bug), so rows are keyed by the
signature and only their count, processes and last-seen cells change. "First seen" is relative to the
run's start because that is how a person correlates it with the level table. The full excerpt is
too long for a cell: it opens in a modal screen (key ``e``).
"""

from __future__ import annotations

from textual.reactive import var
from textual.widgets import DataTable

from specload.formatting import clock
from specload.records import CrashEvent
from specload.stats.live import StatsSnapshot

CRASH_COLUMNS = (("type", "type"), ("message", "message"), ("count", "count"),
                 ("procs", "ranks/processes"), ("first", "first seen"))


def crash_cells(c: CrashEvent, t0_ns: int) -> tuple[str, ...]:
    procs = ", ".join(c.processes) if c.processes else "–"
    if len(procs) > 30:
        procs = f"{procs[:27]}… ({len(c.processes)})"
    message = c.message if len(c.message) <= 60 else c.message[:59] + "…"
    return ("✖ " + c.exception_type, message, str(c.count), procs, "+" + clock((c.first_seen_ns - t0_ns) / 1e9))


class CrashTable(DataTable):
    DEFAULT_CSS = """
    CrashTable { height: 1fr; background: $surface; }
    CrashTable > .datatable--header { color: $error; }
    CrashTable.-alert { background: $specload-flash; }
    """

    snapshot: var[StatsSnapshot | None] = var(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self.can_focus = False  # arrow keys drive the concurrency
        self.t0_ns = 0
        self._shown: dict[str, tuple[str, ...]] = {}
        self.crashes: dict[str, CrashEvent] = {}

    def on_mount(self) -> None:
        for key, label in CRASH_COLUMNS:
            self.add_column(label, key=key)

    def show_crash(self, c: CrashEvent) -> None:
        self.crashes[c.signature] = c
        cells = crash_cells(c, self.t0_ns)
        old = self._shown.get(c.signature)
        if old == cells:
            return
        if old is None:
            self.add_row(*cells, key=c.signature)
        else:
            for (col, _), new, was in zip(CRASH_COLUMNS, cells, old, strict=True):
                if new != was:
                    self.update_cell(c.signature, col, new)
        self._shown[c.signature] = cells

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        for c in snap.crashes:
            if self.crashes.get(c.signature) != c:
                self.show_crash(c)

    def flash(self, seconds: float = 2.0) -> None:
        self.add_class("-alert")
        self.set_timer(seconds, lambda: self.remove_class("-alert"))
