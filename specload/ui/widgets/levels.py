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
from textual_plotext import PlotextPlot

from specload.engine.capacity import SearchView
from specload.formatting import DASH, TPOT, TTFT
from specload.formatting import level_cells as report_cells
from specload.stats.levels import LevelSummary
from specload.stats.live import StatsSnapshot
from specload.ui.widgets.keyed import KeyedTable

# C, tok/s and ok lead (the table scrolls sideways: they are never the columns off screen); the
# server's own throughput and speculative acceptance (length/rate) over each level follow; per-request
# tok/s and the rest are in the record, --json and `report --wide`. Labels are the headless table's.
COLUMNS = (
    ("c", "C"),
    ("tput", "tok/s"),
    ("ok", "ok/total"),
    ("srv", "srv tok/s"),
    ("accept", "accept"),
    ("ttft", TTFT),
    ("tpot", TPOT),
    ("lat", "latency avg/p50/p99 s"),
    ("errors", "errors"),
)
# shown once a level has a figure in them: a server without /metrics, or without speculation, would
# fill them with dashes, and at 80 columns they pushed TTFT and TPOT off the screen
SERVER_COLUMNS = ("srv", "accept")


def own_cells(s: LevelSummary, cells: dict[str, str]) -> dict[str, str]:
    """The cells the dashboard words its own way; the others are the headless table's, by label."""
    # an open-loop level's load is its rate (its concurrency only a cap)
    load = cells["C"] if s.rate is None else f"{cells['rate']}/s"
    return {"c": load, "ok": cells["ok"] if s.ok == s.requests else f"✖ {cells['ok']}"}


def row_key(s: LevelSummary) -> str:
    return f"level-{s.level_index}"


# a level cut by a crash, the server down or a pause: what cut it and the requests it lost (its tok/s
# counts its active time only); the column appears with the first such level, before the errors
CUT_COLUMNS = (("cut", "cut"),)

GOODPUT_COLUMNS = (("slo", "SLO"), ("good", "good %"), ("goodtok", "good tok/s"))
# --baseline: the baseline level's figure, live / baseline with its sequential interval, the verdict;
# --target-ci alone: the interval reached
BASELINE_COLUMNS = (("ci", "±CI %"), ("base", "baseline"), ("ratio", "vs baseline"), ("verdict", "verdict"))
CI_COLUMNS = (("ci", "±CI %"),)


class LevelTable(KeyedTable):
    """The finished levels; with ``--slo`` three more columns (verdict, share of good requests with its
    interval, goodput tok/s), added when the first level with goodput arrives; with ``--baseline`` the
    baseline's figure, the ratio and the verdict (``--target-ci``: the interval reached)."""

    DEFAULT_CSS = """
    LevelTable { height: 1fr; background: $surface; }
    """
    BORDER_TITLE = "levels"
    COLUMNS = tuple(c for c in COLUMNS if c[0] not in SERVER_COLUMNS)  # before the first level

    snapshot: var[StatsSnapshot | None] = var(None)
    # levels a crash, the server down or a pause has cut and that have not ended (the load is paused,
    # perhaps for minutes): shown as they stand, each row replaced in place by the final summary
    cut_levels: var[tuple[LevelSummary, ...]] = var(())

    def __init__(self, **kwargs: object) -> None:
        super().__init__(zebra_stripes=True, **kwargs)
        self._ended = 0  # the finished levels shown (the snapshot's levels)
        self._goodput = False
        self._cut = False
        self._judged: tuple[tuple[str, str], ...] = ()
        self._server: set[str] = set()  # the SERVER_COLUMNS some level has a figure in
        self._levels: dict[str, LevelSummary] = {}  # the latest summary of each row, for a relayout

    def _columns(self) -> tuple[tuple[str, str], ...]:
        # the judged columns go next to tok/s and ok, the figures they judge (the table scrolls sideways and
        # the verdict must not be the column that falls off)
        cut = CUT_COLUMNS if self._cut else ()
        middle = tuple(c for c in COLUMNS[3:-1] if c[0] not in SERVER_COLUMNS or c[0] in self._server)
        return COLUMNS[:3] + self._judged + middle + cut + COLUMNS[-1:] + (
            GOODPUT_COLUMNS if self._goodput else ())

    def _cells(self, s: LevelSummary) -> tuple[str, ...]:
        cells = report_cells(s, dash=DASH)
        own = own_cells(s, cells)
        return tuple(own.get(key) or cells[label] for key, label in self._columns())

    def show_level(self, s: LevelSummary) -> None:
        """Add the level's row, or update the cells that changed when it is already there."""
        columns = self._columns()
        if s.goodput is not None:
            self._goodput = True
        if s.cut is not None:
            self._cut = True
        cells = report_cells(s, dash=DASH)
        self._server.update(key for key, label in COLUMNS if key in SERVER_COLUMNS and cells[label] != DASH)
        j = s.judged
        if j is not None:
            wanted = BASELINE_COLUMNS if j.baseline is not None else CI_COLUMNS
            if len(wanted) > len(self._judged):
                self._judged = wanted
        key = row_key(s)
        # a level's final summary can arrive after a later level's row (a crash cut the later one while
        # the earlier one waited for its last scrape): the rows are laid out again in the levels' order
        late = key not in self._levels and any(x.level_index > s.level_index for x in self._levels.values())
        self._levels[key] = s
        if self._columns() != columns or late:
            ordered = sorted(self._levels.values(), key=lambda x: x.level_index)
            self.relayout(self._columns(), {row_key(x): self._cells(x) for x in ordered})
        else:
            self.show(key, self._cells(s))

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None or len(snap.levels) == self._ended:
            return
        for s in snap.levels:  # rows already shown compare equal and are left alone
            if s.requests or s.cut is not None:  # a level a quick key change ended before any request: no row
                self.show_level(s)
        self._ended = len(snap.levels)

    def watch_cut_levels(self, levels: tuple[LevelSummary, ...]) -> None:
        ended = {s.level_index for s in self.snapshot.levels} if self.snapshot is not None else set()
        for s in levels:
            if s.level_index not in ended:  # a final summary is never overwritten by a provisional one
                self.show_level(s)

class KneeChart(PlotextPlot):
    """Throughput against load. A capacity search draws on it too: its probes (those it could not
    accept marked x), the bracket it is narrowing (two vertical lines) and, at the end, its best point
    (*) and what it found in the title. A rate search plots against the offered rate."""

    DEFAULT_CSS = """
    KneeChart { height: 1fr; min-height: 8; }
    """
    BORDER_TITLE = "throughput vs concurrency"

    snapshot: var[StatsSnapshot | None] = var(None)
    search: var[SearchView | None] = var(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._levels: tuple[LevelSummary, ...] = ()

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.redraw()

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is not None and snap.levels != self._levels:
            self.set_levels(snap.levels)

    def watch_search(self, _search: SearchView | None) -> None:
        self.redraw()

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
        sv = self.search
        rate_axis = sv is not None and sv.axis == "rate"
        # the panel's border says what the chart is; the plot's own title only says where a search is
        plt.title(chart_title(sv) if sv is not None else "")
        plt.xlabel("request rate (req/s)" if rate_axis else "concurrency")
        plt.ylabel("tok/s")
        # a manual level may repeat a concurrency: the latest measurement of each load is plotted
        by_x: dict[float, float] = {}
        for s in self._levels:
            if s.requests == 0:  # a level that started no request measured nothing
                continue
            if rate_axis:
                if s.rate is not None:
                    by_x[s.rate] = s.throughput_tok_s
            elif s.rate is None or sv is None:
                by_x[float(s.concurrency)] = s.throughput_tok_s
        if by_x:
            loads = sorted(by_x)
            ys = [by_x[c] for c in loads]
            # ramps usually double the load: on a log2 axis each level is one step apart
            xs = [math.log2(c) for c in loads]
            # one line, no separate point markers: plotext rounds scatter points and hd lines
            # differently, and the misaligned dots read as a second series
            plt.plot(xs, ys, marker="hd", color=self._colour("specload-throughput"))
            shown = tick_loads(loads)
            plt.xticks([math.log2(c) for c in shown], [f"{c:g}" for c in shown])
            if len(xs) == 1:
                plt.xlim(xs[0] - 1, xs[0] + 1)
            top = max(ys) if max(ys) > 0 else 1
            ticks = nice_ticks(top * 1.1)
            plt.ylim(0, ticks[-1])
            plt.yticks(ticks, [f"{t:g}" for t in ticks])
            if sv is not None:
                self._draw_search(sv)
        self.refresh()

    def _draw_search(self, sv: SearchView) -> None:
        plt = self.plt
        bad = [(math.log2(p.value), p.throughput) for p in sv.probes if not p.acceptable and p.value > 0]
        if bad:
            plt.scatter([x for x, _ in bad], [y for _, y in bad], marker="x", color=self._colour("error"))
        if sv.result is None:
            for edge in sv.bracket:
                if edge is not None and edge > 0:
                    plt.vline(math.log2(edge), color=self._colour("accent"))
        elif sv.result.best is not None and sv.result.best.value > 0:
            plt.scatter([math.log2(sv.result.best.value)], [sv.result.best.throughput.value], marker="*",
                        color=self._colour("specload-good"))


def nice_ticks(top: float, most: int = 5) -> list[float]:
    """0, then evenly spaced round values (steps of 1, 2, 2.5 or 5 times a power of ten) up to the
    first at or above ``top``: plotext's own ticks skipped one (625, 521, 417, 208, 104)."""
    raw = top / max(1, most - 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def tick_loads(loads: list[float], most: int = 6) -> list[float]:
    """The loads to label on the x axis: all of them when few, else the ends and powers of two (a
    bisection's probes 12, 13, 14 would print over each other)."""
    if len(loads) <= most:
        return loads
    keep = [c for c in loads if c == loads[0] or c == loads[-1] or math.log2(c).is_integer()]
    if len(keep) > most:
        step = math.ceil(len(keep) / most)
        keep = keep[::step] + ([keep[-1]] if keep[-1] not in keep[::step] else [])
    return keep


def chart_title(sv: SearchView | None) -> str:
    if sv is None:
        return "throughput vs concurrency"
    unit = "C=" if sv.axis == "concurrency" else ""
    suffix = "" if sv.axis == "concurrency" else "/s"

    def v(x: float | None) -> str:
        return "?" if x is None else f"{unit}{x:g}{suffix}"

    r = sv.result
    if r is None:
        lo, hi = sv.bracket
        if hi is not None:
            return f"search: {sv.phase} {v(lo)}..{v(hi)}"
        if lo is not None:
            return f"search: {sv.phase} from {v(lo)}"
        now = sv.current.value if sv.current is not None else None
        return f"search: probing {v(now)}"
    if r.best is None:
        return "search: crashed, no best point" if r.reason == "crashed" else f"search: {r.reason}, no best point"
    knee = f" · knee {v(r.knee.value)}" if r.knee.reached else ""
    return f"best {v(r.best.value)} ({r.limited_by or r.reason}){knee}"
