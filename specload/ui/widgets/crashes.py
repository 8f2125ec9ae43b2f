"""Server crashes: one row per signature, kept in place as counts grow, with an alert on a new one.

A signature repeats (many ranks, many requests hitting the same bug), so rows are keyed by the
signature and only their count, processes and last-seen cells change. "First seen" is relative to the
run's start because that is how a person correlates it with the level table. The full excerpt is
too long for a cell: it opens in a modal screen (key ``e``).
"""

from __future__ import annotations

from textual.reactive import var

from specload.formatting import clock
from specload.records import CrashEvent
from specload.stats.live import StatsSnapshot
from specload.ui.widgets.keyed import KeyedTable

CRASH_COLUMNS = (("type", "type"), ("message", "message"), ("count", "count"),
                 ("procs", "ranks/processes"), ("first", "first seen"))


def crash_cells(c: CrashEvent, t0_ns: int) -> tuple[str, ...]:
    procs = ", ".join(c.processes) if c.processes else "–"
    if len(procs) > 30:
        procs = f"{procs[:27]}… ({len(c.processes)})"
    message = c.message if len(c.message) <= 60 else c.message[:59] + "…"
    return ("✖ " + c.exception_type, message, str(c.count), procs, "+" + clock((c.first_seen_ns - t0_ns) / 1e9))


class CrashTable(KeyedTable):
    DEFAULT_CSS = """
    CrashTable { height: 1fr; background: $surface; }
    CrashTable > .datatable--header { color: $error; }
    CrashTable.-alert { background: $specload-flash; }
    """
    BORDER_TITLE = "crashes (e: excerpt)"
    COLUMNS = CRASH_COLUMNS

    snapshot: var[StatsSnapshot | None] = var(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.t0_ns = 0
        self.crashes: dict[str, CrashEvent] = {}

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        for c in snap.crashes:
            if self.crashes.get(c.signature) != c:
                self.crashes[c.signature] = c
                self.show(c.signature, crash_cells(c, self.t0_ns))
        self.set_class(bool(self.crashes), "-has-crashes")

    def flash(self, seconds: float = 2.0) -> None:
        self.add_class("-alert")
        self.set_timer(seconds, lambda: self.remove_class("-alert"))
