"""Static plots of one or more runs (``specload report ... --plot out.png|.svg``), with matplotlib.

Six panels against concurrency, one colour per run: output throughput, per-request tok/s, TTFT,
TPOT and E2E latency (p50 solid with circles, p99 dashed with triangles), each point with its 95%
interval as an error bar where the run has one, and the trade-off curve (throughput against p99
E2E latency, points joined in concurrency order and labelled with C).

matplotlib is an optional extra (``pip install "specload[report]"``): it is imported only here, when
a plot is asked for, and its absence is a one-line error naming the extra. The Agg backend is used
(no display needed); the output format follows the file's suffix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specload.report.figures import METRICS, RUN_COLORS, ReportSeries

FORMATS = (".png", ".svg")
EXTRA_HINT = 'pip install "specload[report]"'


class PlotError(Exception):
    """A plot cannot be made; the message is one line for the user."""


def pyplot():  # matplotlib's module; PlotError when it is not installed
    try:
        import matplotlib
    except ImportError:
        raise PlotError(f"--plot needs matplotlib, which is not installed: {EXTRA_HINT}") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


# (title, y label, [(metric, label suffix, linestyle, marker)])
PANELS = (
    ("Output throughput", "tok/s", [("throughput", "", "-", "o")]),
    ("Per-request speed", "tok/s per request", [("per_request_tok_s", "", "-", "o")]),
    ("Time to first token", "ms", [("ttft_p50", " p50", "-", "o"), ("ttft_p99", " p99", "--", "^")]),
    ("Time per output token", "ms", [("tpot_p50", " p50", "-", "o"), ("tpot_p99", " p99", "--", "^")]),
    ("End-to-end latency", "s", [("e2e_p50", " p50", "-", "o"), ("e2e_p99", " p99", "--", "^")]),
)


def _points(run: ReportSeries, metric: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """(concurrency, value, error below, error above) of the run's levels that have the metric;
    a level without an interval gets a zero-length bar (the point is still drawn)."""
    scale = METRICS[metric][3]
    xs, ys, lo, hi = [], [], [], []
    for lv in sorted(run.levels, key=lambda lv: lv.concurrency):
        m = lv.metrics.get(metric)
        if not m or m.get("value") is None:
            continue
        v = m["value"] * scale
        xs.append(lv.concurrency)
        ys.append(v)
        a, b = m.get("ci_low"), m.get("ci_high")
        lo.append(max(0.0, v - a * scale) if a is not None else 0.0)
        hi.append(max(0.0, b * scale - v) if b is not None else 0.0)
    return xs, ys, lo, hi


def render_plot(runs: Sequence[ReportSeries], path: str | Path, *, title: str | None = None, dpi: int = 90,
                crashes: Sequence[str] = ()) -> int:
    """Write the figure to ``path`` (.png or .svg); returns the file's size in bytes. ``crashes``: a
    line per server crash, drawn in red above the panels (a crashed run's plot says so)."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot {path}: the file must end in .png or .svg")
    plt = pyplot()
    concurrencies = sorted({lv.concurrency for r in runs for lv in r.levels if lv.concurrency > 0})
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.6), layout="constrained")
    flat = list(axes.flat)
    any_interval = False
    for ax, (name, ylabel, metrics) in zip(flat, PANELS, strict=False):
        for i, run in enumerate(runs):
            color = RUN_COLORS[i % len(RUN_COLORS)]
            for metric, suffix, ls, marker in metrics:
                xs, ys, lo, hi = _points(run, metric)
                if not xs:
                    continue
                any_interval |= any(lo) or any(hi)
                ax.errorbar(
                    xs, ys, yerr=[lo, hi], color=color, linestyle=ls, marker=marker, markersize=5,
                    capsize=3, linewidth=1.6, elinewidth=1, label=f"{run.label}{suffix}",
                )
        ax.set_title(name)
        ax.set_ylabel(ylabel)
        _concurrency_axis(ax, concurrencies)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if not ax.lines:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
    for run in runs:  # a level a crash cut, marked where its throughput is drawn
        for lv in run.levels:
            t = (lv.metrics.get("throughput") or {}).get("value")
            if t is not None and any(n.startswith("cut by") and "crash" in n for n in lv.notes):
                flat[0].annotate("✖ crash", (lv.concurrency, t), textcoords="offset points", xytext=(6, -12),
                                 color="#C0392B", fontsize=9, fontweight="bold")
    ax = flat[5]
    for i, run in enumerate(runs):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        pts = []
        for lv in sorted(run.levels, key=lambda lv: lv.concurrency):
            t, e = lv.metrics.get("throughput"), lv.metrics.get("e2e_p99")
            if t and e and t.get("value") is not None and e.get("value") is not None:
                pts.append((t["value"], e["value"], lv.concurrency))
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color=color, markersize=5, label=run.label)
        for x, y, c in pts:
            ax.annotate(f"C={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    ax.set_title("Throughput vs p99 latency")
    ax.set_xlabel("output tok/s")
    ax.set_ylabel("p99 E2E latency, s")
    ax.set_xlim(left=0, right=ax.get_xlim()[1] * 1.12)  # room for the C= labels
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    # one legend for the whole figure: a colour per run; the line styles are said in the title
    handles = [
        plt.Line2D([], [], color=RUN_COLORS[i % len(RUN_COLORS)], marker="o", linewidth=2, label=run.label)
        for i, run in enumerate(runs)
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(runs), 4), fontsize=9, frameon=False)
    note = "error bars: 95% intervals" if any_interval else "no intervals in these runs"
    head = f"{title or 'specload'} · p50 solid ●, p99 dashed ▲ · {note}"
    if crashes:
        shown = [c if len(c) <= 150 else c[:147] + "..." for c in crashes[:3]]
        more = [f"(and {len(crashes) - 3} more)"] if len(crashes) > 3 else []
        fig.suptitle(head + "\n" + "\n".join(f"✖ {c}" for c in [*shown, *more]), fontsize=12, color="#C0392B",
                     fontweight="bold")
    else:
        fig.suptitle(head, fontsize=12)
    try:
        # a fixed salt for the SVG's element ids, which are random otherwise
        with plt.rc_context({"svg.hashsalt": "specload"}):
            fig.savefig(path, dpi=dpi, metadata=_metadata(path))
    except OSError as e:
        raise PlotError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return path.stat().st_size


def _metadata(path: Path) -> dict:
    # no creation date in the file: the same runs give the same bytes (a plot under docs/ diffs cleanly)
    if path.suffix.lower() == ".svg":
        return {"Date": None, "Creator": "specload"}
    return {"Software": "specload"}


def _concurrency_axis(ax, concurrencies: list[int]) -> None:  # a matplotlib Axes
    ax.set_xlabel("concurrency")
    if len(concurrencies) > 1 and concurrencies[0] > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies)
        ax.set_xticklabels([str(c) for c in concurrencies])
        ax.minorticks_off()
    elif concurrencies:
        ax.set_xticks(concurrencies)
