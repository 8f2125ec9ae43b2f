"""Finished levels: the per-level table (the headless final table's columns) and throughput vs concurrency.

The table fills as levels complete. Rows are keyed by level index, so a level reported twice (the
message and the next sample) updates its cells in place instead of adding a row or rebuilding the
table. The chart plots the finished levels' throughput against their concurrency, which is where the
knee shows: the concurrency beyond which more parallel requests stop adding tokens per second. It is
redrawn only when a level finishes or the theme changes, never on the refresh timer.
"""

from __future__ import annotations

import math

from textual.color import Color
from textual.reactive import var
from textual.widgets import DataTable
from textual_plotext import PlotextPlot

from specload.record.report import level_cells as report_cells
from specload.stats.levels import LevelSummary
from specload.stats.live import StatsSnapshot
from specload.ui.widgets.numbers import DASH

COLUMNS = (
    ("c", "C"),
    ("tput", "tok/s"),
    ("perreq", "req tok/s"),
    ("ttft", "TTFT p50/p99 ms"),
    ("tpot", "TPOT ms"),
    ("lat", "latency avg/p50/p99 s"),
    ("ok", "ok/total"),
    ("errors", "errors"),
)


def level_cells(s: LevelSummary) -> tuple[str, ...]:
    """The row of one level, formatted by the same function as the headless table."""
    cells = report_cells(s, dash=DASH)
    ok = cells["ok"] if s.ok == s.requests else f"✖ {cells['ok']}"
    return (
        cells["C"],
        cells["tok/s"],
        cells["req tok/s"],
        cells["TTFT p50/p99 ms"],
        cells["TPOT ms"],
        cells["latency avg/p50/p99 s"],
        ok,
        cells["errors"],
    )


def row_key(s: LevelSummary) -> str:
    return f"level-{s.level_index}"


class LevelTable(DataTable):
    DEFAULT_CSS = """
    LevelTable { height: 1fr; background: $surface; }
    """

    snapshot: var[StatsSnapshot | None] = var(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        # Arrow keys belong to the concurrency controls, so the table never takes focus.
        self.can_focus = False
        self._shown: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show_level(self, s: LevelSummary) -> None:
        """Add the level's row, or update the cells that changed when it is already there."""
        key = row_key(s)
        cells = level_cells(s)
        old = self._shown.get(key)
        if old == cells:
            return
        if old is None:
            self.add_row(*cells, key=key)
        else:
            for (col, _), new, was in zip(COLUMNS, cells, old, strict=True):
                if new != was:
                    self.update_cell(key, col, new)
        self._shown[key] = cells

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        # Levels normally arrive by message; the sample is the catch-up path (and the static source's).
        if snap is None or len(snap.levels) == len(self._shown):
            return
        for s in snap.levels:
            self.show_level(s)


class KneeChart(PlotextPlot):
    DEFAULT_CSS = """
    KneeChart { height: 1fr; min-height: 8; }
    """

    snapshot: var[StatsSnapshot | None] = var(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._levels: tuple[LevelSummary, ...] = ()

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.redraw()

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is not None and snap.levels != self._levels:
            self.set_levels(snap.levels)

    def set_levels(self, levels: tuple[LevelSummary, ...]) -> None:
        self._levels = tuple(levels)
        self.redraw()

    def _colour(self, variable: str) -> tuple[int, int, int]:
        value = self.app.theme_variables.get(variable) or self.app.theme_variables.get("primary", "white")
        return Color.parse(value).rgb

    def redraw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("throughput vs concurrency")
        plt.xlabel("concurrency")
        plt.ylabel("tok/s")
        # a manual level may repeat a concurrency: the latest measurement of each C is plotted
        by_c: dict[int, float] = {}
        for s in self._levels:
            by_c[s.concurrency] = s.throughput_tok_s
        if by_c:
            cs = sorted(by_c)
            ys = [by_c[c] for c in cs]
            # ramps usually double the concurrency: on a log2 axis each level is one step apart
            xs = [math.log2(c) for c in cs]
            # one line, no separate point markers: plotext rounds scatter points and hd lines
            # differently, and the misaligned dots read as a second series
            plt.plot(xs, ys, marker="hd", color=self._colour("specload-throughput"))
            plt.xticks(xs, [str(c) for c in cs])
            if len(xs) == 1:
                plt.xlim(xs[0] - 1, xs[0] + 1)
            plt.ylim(0, max(ys) * 1.1 if max(ys) > 0 else 1)
        self.refresh()
