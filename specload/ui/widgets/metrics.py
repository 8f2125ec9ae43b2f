"""Throughput and latency: live sparklines over the last minutes with the current numbers beside them.

Per refresh a panel only hands the sparklines a new list (at most a few hundred floats) and updates a
few labels; the series themselves are computed once per second by the stats, never here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Label, Sparkline

from specload.formatting import count, ms
from specload.stats.live import LatencyView, StatsSnapshot
from specload.stats.slo import SloSpec
from specload.ui.widgets.value import ValueLabel

HISTORY_S = 180  # seconds of history a sparkline shows ("the last minutes")


def plottable(series: Sequence[float], last: int) -> list[float]:
    """The last ``last`` points with NaN gaps filled by the previous value (leading NaNs dropped)."""
    out: list[float] = []
    prev: float | None = None
    for v in series[-last:]:
        if v is None or math.isnan(v):
            if prev is None:
                continue
            v = prev
        out.append(v)
        prev = v
    return out


_BARS = "▁▂▃▄▅▆▇█"


BAND = 0.5  # a banded row's scale spans at least half its lowest value


def span_text(lo: float, hi: float) -> str:
    """``26–870``, ``5.4s–9.5s``: a latency row's range in ms (the row's numbers beside it say so),
    seconds from one, two or three digits a figure, so it fits a narrow row; a steady row's one
    figure once (``8.8``, not ``8.8–8.8``)."""

    def short(v: float) -> str:
        return (f"{v:.1f}" if v < 10 else f"{v:.0f}" if v < 1000 else f"{v / 1000:.1f}s" if v < 10_000
                else f"{v / 1000:.0f}s")

    a, b = short(lo), short(hi)
    return a if a == b else f"{a}–{b}"


class _LimitBars:
    """A one-row sparkline on a scale from zero: a bar's height is its value over the row's top (the
    series' highest value), so a 2 % wobble moves a bar by a step at most. Textual's sparkline scales
    from the series' lowest value, where a 2 % wobble of throughput read as a cliff. With ``limit``,
    the scale includes it: bars over it are drawn in another colour, so the objective reads as the
    height where the line changes colour; without, the colour rises from ``under`` to ``over``.

    With ``band`` (latencies, which sit far from zero: from zero a steady one filled the row, a wall)
    and no limit, the scale is a band from the series' lowest value up by its spread, at least
    ``BAND`` of that value: steady latency is a low line, a doubling reaches the top, and the band's
    min–max is written at the row's end where there is room."""

    def __init__(self, data: Sequence[float], width: int, limit: float | None, under: Style, over: Style,
                 band: bool = False) -> None:
        self.data, self.width, self.limit, self.under, self.over = data, width, limit, under, over
        self.band = band and limit is None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = self.width or options.max_width
        data = list(self.data)
        if not data:
            yield Segment("▁" * width, self.under)
            return
        lo, hi = min(data), max(data)
        label = f" {span_text(lo, hi)}" if self.band else ""
        if len(label) > width // 2:  # the bars come first
            label = ""
        bars = width - len(label)
        base = lo if self.band else 0.0
        # the limit sits at 80 % of the scale, so a series under it never fills the row
        top = (lo + max(hi - lo, BAND * lo) if self.band else hi if self.limit is None
               else max(hi, self.limit / 0.8))
        span = top - base if top > base else 1.0
        n = len(data)
        for i in range(bars):
            a, b = i * n // bars, max((i + 1) * n // bars, i * n // bars + 1)
            v = max(data[a:b])
            idx = min(len(_BARS) - 1, max(0, int((v - base) / span * len(_BARS))))
            yield Segment(_BARS[idx], self._style(v, idx))
        if label:
            yield Segment(label, Style(dim=True))

    def _style(self, v: float, idx: int) -> Style:
        if self.limit is not None:
            return self.over if v > self.limit else self.under
        return self.over if idx >= len(_BARS) // 2 else self.under


class LimitSparkline(Sparkline):
    """A sparkline from zero (``_LimitBars``), with ``limit`` set drawn against that limit."""

    DEFAULT_CSS = """
    LimitSparkline > .limitsparkline--over { color: $error; }
    """
    COMPONENT_CLASSES = {"sparkline--max-color", "sparkline--min-color", "limitsparkline--over"}

    limit: var[float | None] = var(None)
    band: var[bool] = var(False)

    def render(self):  # Textual's RenderResult
        under = Style.from_color(self.get_component_styles("sparkline--min-color").color.rich_color)
        high = "sparkline--max-color" if self.limit is None else "limitsparkline--over"
        over = Style.from_color(self.get_component_styles(high).color.rich_color)
        return _LimitBars(self.data or [], self.size.width, self.limit, under, over, self.band)


@dataclass(frozen=True, slots=True)
class RowObjective:
    """What a latency row shows of an objective: which rolling percentile, against which limit (ms)."""

    series: str  # "p50" or "p99": the rolling percentiles the live stats keep
    limit_ms: float
    label: str  # the objective as written, for the value text


def row_objectives(spec: SloSpec | None) -> dict[str, RowObjective]:
    """Per latency row (ttft, tpot, e2e), the objective to draw. The live stats keep rolling p50 and
    p99 only: a p50 objective is drawn on the p50 line, anything higher (p90, p99, per-request
    objectives met by 90 % of requests) on the p99 line, which is then the stricter test."""
    out: dict[str, RowObjective] = {}
    if spec is None:
        return out
    for key in ("ttft", "tpot", "e2e"):
        mine = [o for o in spec.objectives if o.metric == key]
        if not mine:
            continue
        # the tightest limit decides where the line goes
        o = min(mine, key=lambda o: o.limit_ms)
        series = "p50" if o.quantile is not None and o.quantile <= 0.5 else "p99"
        out[key] = RowObjective(series, o.limit_ms, o.text())
    return out


class MetricRow(Horizontal):
    """``NAME  ▁▂▅▇█▆  numbers`` on one line; the sparkline takes whatever width is left."""

    DEFAULT_CSS = """
    MetricRow { height: 1; }
    MetricRow > .metric-name { width: 7; color: $text-muted; }
    MetricRow > Sparkline { width: 1fr; min-width: 8; margin: 0 1 0 0; }
    MetricRow > .metric-value { width: 25; height: 1; }
    MetricRow.-tok > Sparkline > .sparkline--max-color { color: $specload-throughput; }
    MetricRow.-tok > Sparkline > .sparkline--min-color { color: $specload-throughput 40%; }
    MetricRow.-lat > Sparkline > .sparkline--max-color { color: $specload-p99; }
    MetricRow.-lat > Sparkline > .sparkline--min-color { color: $specload-p50; }
    MetricRow.-server > Sparkline > .sparkline--max-color { color: $specload-server; }
    MetricRow.-server > Sparkline > .sparkline--min-color { color: $specload-server 40%; }
    MetricRow.-accept > Sparkline > .sparkline--max-color { color: $specload-accept; }
    MetricRow.-accept > Sparkline > .sparkline--min-color { color: $specload-accept 40%; }
    """

    def __init__(self, name: str, *, kind: str, id: str | None = None) -> None:
        super().__init__(id=id, classes=f"-{kind}")
        self._title = name  # not _name: that is the widget's own name (DOMNode)

    def compose(self) -> ComposeResult:
        yield Label(self._title, classes="metric-name")
        spark = LimitSparkline([], summary_function=max)
        spark.band = self.has_class("-lat")
        yield spark
        yield ValueLabel("–", classes="metric-value")

    def show(self, series: Sequence[float], value: str) -> None:
        data = plottable(series, HISTORY_S)
        spark = self.query_one(LimitSparkline)
        if data != spark.data:
            spark.data = data
        self.query_one(".metric-value", ValueLabel).show(value)

    def set_limit(self, limit: float | None) -> None:
        self.query_one(LimitSparkline).limit = limit


class ThroughputPanel(Widget):
    DEFAULT_CSS = """
    ThroughputPanel { height: auto; layout: vertical; padding: 0 1; }
    ThroughputPanel #tp-totals { color: $text-muted; width: 1fr; height: 1; }
    """
    BORDER_TITLE = "throughput"

    snapshot: var[StatsSnapshot | None] = var(None)

    def compose(self) -> ComposeResult:
        yield MetricRow("tok/s", kind="tok", id="tp-tok")
        yield ValueLabel("– ok · req/s – · tokens –", id="tp-totals")

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        self.query_one("#tp-tok", MetricRow).show(
            snap.tok_s_series, f"[b]{snap.tok_s:7.1f}[/] tok/s · 10s {snap.tok_s_avg10:.0f}"
        )
        # failures first: in a narrow panel the end of the line is what gets cut
        failed = f" · ✖ {snap.requests_failed} failed" if snap.requests_failed else ""
        self.query_one("#tp-totals", ValueLabel).show(
            f"{snap.requests_ok}/{snap.requests_total} ok{failed} · "
            f"req/s {snap.req_s_avg10:.1f} (10s) · tokens {count(snap.tokens_total)}"
        )


def latency_text(view: LatencyView) -> str:
    return f"p50 [b]{ms(view.p50):>7}[/] p99 {ms(view.p99):>7}"


def objective_text(view: LatencyView, o: RowObjective) -> str:
    """``p99  412 ms ✔≤500``: the rolling percentile the objective is drawn on, against its limit."""
    v = view.p50 if o.series == "p50" else view.p99
    mark = "" if v is None else ("✔" if v <= o.limit_ms else "✖")
    limit = f"{o.limit_ms / 1000:g}s" if o.limit_ms >= 1000 else f"{o.limit_ms:g}"
    return f"{o.series} [b]{ms(v):>7}[/] {mark}≤{limit}"


class LatencyPanel(Widget):
    """TTFT, TPOT and E2E; each sparkline is the rolling p50 (the 10 s window of the stats) in a band
    with its min–max written at the end. With
    ``--slo`` a row with an objective shows the percentile it is drawn on against the limit instead:
    bars over the limit in the error colour, the limit at a fixed height."""

    DEFAULT_CSS = """
    LatencyPanel { height: auto; layout: vertical; padding: 0 1; }
    """
    BORDER_TITLE = "latency (rolling 10 s)"

    snapshot: var[StatsSnapshot | None] = var(None)

    def compose(self) -> ComposeResult:
        yield MetricRow("TTFT", kind="lat", id="lat-ttft")
        yield MetricRow("TPOT", kind="lat", id="lat-tpot")
        yield MetricRow("E2E", kind="lat", id="lat-e2e")

    objectives: dict[str, RowObjective] = {}

    def set_objectives(self, spec: SloSpec | None) -> None:
        self.objectives = row_objectives(spec)
        for key in ("ttft", "tpot", "e2e"):
            o = self.objectives.get(key)
            self.query_one(f"#lat-{key}", MetricRow).set_limit(o.limit_ms if o is not None else None)
        self.watch_snapshot(getattr(self, "snapshot", None))

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        for key, view in (("ttft", snap.ttft), ("tpot", snap.tpot), ("e2e", snap.e2e)):
            o = self.objectives.get(key)
            row = self.query_one(f"#lat-{key}", MetricRow)
            if o is None:
                row.show(view.p50_series, latency_text(view))
            else:
                series = view.p50_series if o.series == "p50" else view.p99_series
                row.show(series, objective_text(view, o))

