"""Throughput and latency: live sparklines over the last minutes with the current numbers beside them.

Per refresh a panel only hands the sparklines a new list (at most a few hundred floats) and updates a
few labels; the series themselves are computed once per second by the stats, never here.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Label, Sparkline

from specload.stats.live import LatencyView, StatsSnapshot
from specload.ui.widgets.numbers import count, ms, plottable
from specload.ui.widgets.value import ValueLabel

HISTORY_S = 180  # seconds of history a sparkline shows ("the last minutes")


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
        self._name = name

    def compose(self) -> ComposeResult:
        yield Label(self._name, classes="metric-name")
        yield Sparkline([], summary_function=max)
        yield ValueLabel("–", classes="metric-value")

    def show(self, series: Sequence[float], value: str) -> None:
        data = plottable(series, HISTORY_S)
        spark = self.query_one(Sparkline)
        if data != spark.data:
            spark.data = data
        self.query_one(".metric-value", ValueLabel).show(value)


class ThroughputPanel(Widget):
    DEFAULT_CSS = """
    ThroughputPanel { height: auto; layout: vertical; padding: 0 1; }
    ThroughputPanel #tp-totals { color: $text-muted; width: 1fr; height: 1; }
    """

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


class LatencyPanel(Widget):
    """TTFT, TPOT and E2E; each sparkline is the rolling p50 (the 10 s window of the stats)."""

    DEFAULT_CSS = """
    LatencyPanel { height: auto; layout: vertical; padding: 0 1; }
    """

    snapshot: var[StatsSnapshot | None] = var(None)

    def compose(self) -> ComposeResult:
        yield MetricRow("TTFT", kind="lat", id="lat-ttft")
        yield MetricRow("TPOT", kind="lat", id="lat-tpot")
        yield MetricRow("E2E", kind="lat", id="lat-e2e")

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        for key, view in (("ttft", snap.ttft), ("tpot", snap.tpot), ("e2e", snap.e2e)):
            self.query_one(f"#lat-{key}", MetricRow).show(view.p50_series, latency_text(view))

