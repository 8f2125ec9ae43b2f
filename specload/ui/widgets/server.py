"""What the server says about itself, and what went wrong with requests.

The server panel puts the server-reported generation throughput next to the client's measured one
(they should agree; when they do not, either the server counts differently or the client is the
bottleneck), the speculative acceptance length as a sparkline, the scheduler's running/queued counts
and the health state. The errors panel counts failures by kind and lists the latest details.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Static

from specload.formatting import num
from specload.stats.live import StatsSnapshot
from specload.ui.widgets.metrics import MetricRow
from specload.ui.widgets.value import ValueLabel

HEALTH = {"up": ("✔ up", "-good"), "down": ("✖ down", "-bad"), "unknown": ("? unknown", "-muted")}


class ServerPanel(Widget):
    DEFAULT_CSS = """
    ServerPanel { height: auto; layout: vertical; padding: 0 1; }
    ServerPanel #srv-queue { color: $text-muted; width: 1fr; height: 1; }
    ServerPanel #srv-health { width: 1fr; height: 1; }
    ServerPanel #srv-health.-good { color: $specload-good; }
    ServerPanel #srv-health.-bad { color: $specload-bad; text-style: bold; }
    ServerPanel #srv-health.-muted { color: $specload-muted; }
    """
    BORDER_TITLE = "server"

    snapshot: var[StatsSnapshot | None] = var(None)

    def compose(self) -> ComposeResult:
        yield MetricRow("gen", kind="server", id="srv-gen")
        yield MetricRow("accept", kind="accept", id="srv-accept")
        yield ValueLabel("running – · queued – · KV –", id="srv-queue")
        yield ValueLabel("health ? unknown", id="srv-health", classes="-muted")

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        s = snap.server
        gen = s.gen_tok_s if s is not None else None
        self.query_one("#srv-gen", MetricRow).show(
            snap.server_gen_tok_s_series, f"server {num(gen, '{:.0f}')} · client {snap.tok_s:.0f} tok/s"
        )
        acc = s.accept_len if s is not None else None
        rate = s.accept_rate if s is not None else None
        rate_text = f" ({rate * 100:.0f}%)" if rate is not None else ""
        self.query_one("#srv-accept", MetricRow).show(
            snap.accept_len_series, f"accept len {num(acc, '{:.2f}')}{rate_text}"
        )
        if s is not None:
            kv = f"{s.token_usage * 100:.0f}%" if s.token_usage is not None else "–"
            text = f"running {num(s.running, '{:.0f}')} · queued {num(s.queued, '{:.0f}')} · KV {kv} · {s.source}"
        else:
            text = "running – · queued – · KV –"
        self.query_one("#srv-queue", ValueLabel).show(text)
        health, cls = HEALTH.get(snap.health, (snap.health, "-muted"))
        label = self.query_one("#srv-health", ValueLabel)
        label.show(f"health {health}")
        if not label.has_class(cls):
            label.set_classes(cls)


class ErrorsPanel(Widget):
    DEFAULT_CSS = """
    ErrorsPanel { height: auto; layout: vertical; padding: 0 1; }
    ErrorsPanel #err-kinds { width: 1fr; height: 1; }
    ErrorsPanel #err-kinds.-bad { color: $specload-bad; text-style: bold; }
    ErrorsPanel #err-last { color: $text-muted; }
    """
    BORDER_TITLE = "errors"

    snapshot: var[StatsSnapshot | None] = var(None)
    LAST = 5
    _last_errors: tuple[str, ...] = ()

    def compose(self) -> ComposeResult:
        yield ValueLabel("✔ no errors", id="err-kinds")
        yield Static("", id="err-last", markup=False)

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        kinds = self.query_one("#err-kinds", ValueLabel)
        if snap.errors_by_kind:
            kinds.show("✖ " + " · ".join(f"{k} {n}" for k, n in snap.errors_by_kind))
            kinds.add_class("-bad")
        else:
            kinds.show("✔ no errors")
            kinds.remove_class("-bad")
        if snap.last_errors != self._last_errors:
            self._last_errors = snap.last_errors
            self.query_one("#err-last", Static).update("\n".join(snap.last_errors[-self.LAST :]))
