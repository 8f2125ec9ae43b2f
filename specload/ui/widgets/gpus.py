"""The server's GPUs (``--gpu-metrics``): one row per GPU, its power as a sparkline and its numbers.

``g3 ▁▂▅▇█▆ 612W 87% 70.1/80G 66°C``: the sparkline is the GPU's power over its recent samples (the
figure energy per token is made of), then power, utilisation, memory used of total and temperature.
A first line sums them up (how many GPUs, their power together, the mean utilisation, the source) or
says the last fault. One line per GPU keeps eight of them inside the panel at 80x24. The rows are
made once, when the GPUs first show, and only updated after that.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.reactive import var
from textual.widget import Widget

from specload.formatting import num
from specload.stats.live import GpuView, StatsSnapshot
from specload.ui.widgets.metrics import MetricRow
from specload.ui.widgets.value import ValueLabel

NO_SOURCE = "no GPU readings (--gpu-metrics nvidia-smi, nvml, dcgm:URL or cmd:'ssh HOST nvidia-smi ...')"


def gpu_text(v: GpuView) -> str:
    s = v.last
    mem = "–" if s.mem_used_mib is None else f"{s.mem_used_mib / 1024:.1f}" + (
        "" if s.mem_total_mib is None else f"/{s.mem_total_mib / 1024:.0f}G")
    temp = "" if s.temp_c is None else f" {s.temp_c:.0f}°C"
    if v.fault is not None and v.fault.startswith("lost"):
        return "✖ lost"
    return f"{num(s.power_w, '{:.0f}'):>4}W {num(s.util_pct, '{:.0f}'):>3}% {mem}{temp}"


def summary_text(snap: StatsSnapshot) -> str:
    gpus = snap.gpus
    if not gpus:
        return snap.gpu_fault or NO_SOURCE
    power = [v.last.power_w for v in gpus if v.last.power_w is not None]
    util = [v.last.util_pct for v in gpus if v.last.util_pct is not None]
    total = f"{sum(power) / 1000:.2f} kW" if sum(power) >= 1000 else f"{sum(power):.0f} W"
    text = (f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} · {total if power else '– W'} · util "
            f"{num(sum(util) / len(util) if util else None, '{:.0f}')}% · {gpus[0].last.source}")
    return text + (f" · ✖ {snap.gpu_fault}" if snap.gpu_fault else "")


class GpuRow(MetricRow):
    DEFAULT_CSS = """
    GpuRow > .metric-name { width: 4; }
    GpuRow > LimitSparkline { min-width: 6; }
    GpuRow > .metric-value { width: 28; }
    GpuRow.-lost > .metric-value { color: $specload-bad; text-style: bold; }
    """

    def __init__(self, gpu: int) -> None:
        super().__init__(f"g{gpu}", kind="server", id=f"gpu-{gpu}")
        self.gpu = gpu

    def show_gpu(self, v: GpuView) -> None:
        self.show(v.power_series, gpu_text(v))
        self.set_class(v.fault is not None and v.fault.startswith("lost"), "-lost")


class GpuPanel(Widget):
    DEFAULT_CSS = """
    GpuPanel { height: auto; layout: vertical; padding: 0 1; }
    GpuPanel #gpu-summary { color: $text-muted; width: 1fr; height: 1; }
    """
    BORDER_TITLE = "GPUs"

    snapshot: var[StatsSnapshot | None] = var(None)

    def compose(self) -> ComposeResult:
        yield ValueLabel(NO_SOURCE, id="gpu-summary")

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        self.query_one("#gpu-summary", ValueLabel).show(summary_text(snap))
        rows = {r.gpu: r for r in self.query(GpuRow)}
        new = [GpuRow(v.last.gpu) for v in snap.gpus if v.last.gpu not in rows]
        if new:
            self.mount_all(new)
            rows.update({r.gpu: r for r in new})
            self.call_after_refresh(self.watch_snapshot, snap)  # their children exist once mounted
            return
        for v in snap.gpus:
            rows[v.last.gpu].show_gpu(v)
        self.app.query_one("Dashboard").set_class(bool(snap.gpus), "-gpus")
