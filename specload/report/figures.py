"""The figures a report shows, per run and level: the shared input of the HTML page and the plots.

A ``ReportRun`` is a run as a report draws it: its description rows, its levels with each metric's
value and 95% interval (and, when runs are compared, the ratio to the baseline and the verdict), its
time series, its crashes and the notes a reader needs (definitions that differ from specload's, what
the source lacks). It is filled from the run model (``runs.Run``) and the comparison's JSON, so the
HTML page, the PNG/SVG plots and the terminal show the same figures.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specload.report.timeseries import TimeSeries, build_time_series, crash_label
from specload.secrets import redact_command
from specload.stats.level_metrics import LevelKey, level_keys

# the run colours: Okabe-Ito, told apart with colour-blindness as well
RUN_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")

# metric key (the comparison's names) -> (column heading, unit, digits, scale for display); the order
# of the level table's columns. ITL is shown where the run has it but not compared (see README).
METRICS: dict[str, tuple[str, str, int, float]] = {
    "throughput": ("output tok/s", "tok/s", 1, 1.0),
    "per_request_tok_s": ("per-request tok/s", "tok/s", 1, 1.0),
    **{f"ttft_p{q}": (f"TTFT p{q}", "ms", 1, 1.0) for q in (50, 90, 95, 99)},
    **{f"tpot_p{q}": (f"TPOT p{q}", "ms", 2, 1.0) for q in (50, 90, 95, 99)},
    "itl_p50": ("ITL p50", "ms", 2, 1.0),
    **{f"e2e_p{q}": (f"E2E p{q}", "s", 3, 1.0) for q in (50, 90, 95, 99)},
    "error_rate": ("error rate", "%", 1, 100.0),
    "accept_len": ("accept len", "tok", 2, 1.0),
    "tok_per_j": ("tok/J", "tok/J", 3, 1.0),
    "gpu_power_w": ("GPU power", "W", 0, 1.0),
}
# shown only where a run has them (--gpu-metrics): most runs have no GPU samples
ONLY_WHERE_PRESENT = ("tok_per_j", "gpu_power_w")


@dataclass
class ReportLevel:
    concurrency: int
    requests: int | None
    ok: int | None
    errors: dict[str, int] = field(default_factory=dict)
    # metric key -> {"value", "ci_low", "ci_high", "note", and for a compared side "ratio",
    # "ratio_ci_low", "ratio_ci_high", "verdict"}; a metric the run lacks has value None (shown as
    # missing, never 0)
    metrics: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    key: str = ""  # "C=4", or "C=4 #2" for the second level at C=4 (levels set by key repeat)
    # the terminal table's tok/s (every token of the level over its active time, fill and drain
    # included), beside the steady-state figure of ``metrics["throughput"]`` the verdicts use
    level_tok_s: float | None = None


@dataclass
class ReportSeries:
    """What the level tables and the charts against concurrency show: one per side of a comparison
    (its repeats combined), or the one run of a plain report."""

    label: str
    levels: list[ReportLevel]
    baseline: bool = False


@dataclass
class ReportRun:
    """One file's run: its card (description, notes) and its timeline."""

    label: str
    description: list[tuple[str, str]]  # (what, value) rows, secrets already masked
    timeline: TimeSeries | None = None
    crashes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # definitions that differ, what the file lacks
    source: str = ""  # the file it was read from
    side: str = ""  # the series it belongs to
    # per level with dataset categories: (level key, the server's accept len/rate, [(category, figures)])
    categories: list[tuple[str, tuple[float | None, float | None], list[tuple[str, Any]]]] = field(
        default_factory=list)


@dataclass
class ReportPage:
    runs: list[ReportRun]
    series: list[ReportSeries]
    title: str = "specload report"
    baseline: str | None = None  # the label the ratios and verdicts are against
    comparison_notes: list[str] = field(default_factory=list)  # method, threshold, unsound flags
    comparison: dict | None = None  # the comparison's JSON (its outputs section: report/lossless.py)
    summary_html: str = ""  # a section of its own before the runs (a sweep's configurations and verdicts)
    crossover: str | None = None  # the headline metric's crossover, one sentence (the JSON has them all)
    primary: str = "throughput"  # the metric of the comparison's verdicts
    generated_at: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )


# ------------------------------------------------------------------------------------------ building


def page_from_runs(sides: Sequence[Any], comparison: dict | None = None, *, title: str | None = None) -> ReportPage:
    """The page of a plain report (one side with one run, ``comparison`` None) or of a comparison
    (``sides`` as compared, ``comparison`` the comparison's JSON, ``compare.to_json``). A side is
    anything with ``label`` and ``runs`` (``runs.Run`` objects)."""
    runs: list[ReportRun] = []
    for side in sides:
        for run in side.runs:
            runs.append(report_run(run, side=side.label))
    if comparison is None:
        # no comparison: each side's (first) run with its own figures and intervals, no verdicts
        series = [ReportSeries(s.label, _levels_alone(s.runs[0]), baseline=False) for s in sides]
        notes: list[str] = []
        baseline = None
    else:
        series = _series_from_comparison(sides, comparison)
        baseline = comparison.get("baseline")
        notes = _comparison_notes(comparison)
    if title is None:
        title = "specload report: " + " vs ".join(s.label for s in series)
    return ReportPage(runs=runs, series=series, title=title, baseline=baseline, comparison_notes=notes,
                      comparison=comparison,
                      crossover=crossover_note(comparison) if comparison is not None else None,
                      primary=str((comparison or {}).get("primary") or "throughput"))


def _metric_cell(est: Any) -> dict:
    return {"value": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high, "note": est.note}


def _counts(levels: Sequence[Any]) -> tuple[int, int, dict[str, int]]:
    n = ok = 0
    errors: dict[str, int] = {}
    for lv in levels:
        n += lv.n
        ok += lv.n_ok
        for kind in lv.error_kind or ():
            if kind is not None:
                errors[kind] = errors.get(kind, 0) + 1
    if not any(lv.error_kind for lv in levels):
        # a source with only counts (a summary-only peer file): failures without a kind
        failed = n - ok
        if failed:
            errors["error"] = failed
    return n, ok, errors


def _itl_cell(levels: Sequence[Any]) -> dict | None:
    """ITL p50 per token: the record's pooled figure (its level line); for a source without one, the
    median of the requests' per-token medians, said in the cell's note. Shown, not compared."""
    if len(levels) != 1:
        return None
    lv = levels[0]
    if lv.summary is not None and lv.summary.itl_ms_p50 is not None:
        return {"value": lv.summary.itl_ms_p50, "ci_low": None, "ci_high": None, "note": "all tokens pooled"}
    itl = getattr(lv, "itl_ms", None)
    if itl is None or not np.isfinite(itl).any():
        return None
    return {"value": float(np.nanmedian(itl)), "ci_low": None, "ci_high": None,
            "note": "median of the requests' per-token medians"}


def _level_notes(lv: Any) -> list[str]:
    notes = []
    if lv.manual:
        notes.append("set by key")
    if lv.open_loop:
        notes.append("open loop")
    st_note = lv.steady().note if lv.start_s is not None else None
    if st_note:
        notes.append(st_note)
    summary = getattr(lv, "summary", None)
    if summary is not None and summary.cut is not None:  # its rates are over its active time only
        from specload.formatting import cut_text

        notes.append(cut_text(summary))
    return notes


def _levels_alone(run: Any) -> list[ReportLevel]:
    """A run's levels with each metric's estimate and interval (no baseline, no verdicts)."""
    from specload.stats.level_metrics import METRICS as COMPARED
    from specload.stats.level_metrics import estimate

    accept, power = run.timeline.server_series("accept_len"), run.timeline.gpu_power()
    out = []
    for key, k, lv in _shown(run.levels):
        metrics = {m: _metric_cell(estimate(lv, m, seed=k, server=accept, gpu_power=power)) for m in COMPARED}
        itl = _itl_cell([lv])
        if itl is not None:
            metrics["itl_p50"] = itl
        n, ok, errors = _counts([lv])
        out.append(ReportLevel(lv.concurrency, n, ok, errors, metrics, _level_notes(lv), key, _level_tok_s([lv])))
    return out


def _shown(levels: Sequence[Any]) -> Iterator[tuple[str, int, Any]]:
    """(key, occurrence, level) of each level a report shows (one with requests or a summary): the
    k-th at its concurrency is ``C=4 #k+1``, as ``LevelKey`` names it."""
    seen: dict[int, int] = {}
    for lv in levels:
        if lv.n == 0 and lv.summary is None:
            continue
        k = seen.get(lv.concurrency, 0)
        seen[lv.concurrency] = k + 1
        yield str(LevelKey(lv.concurrency, k)), k, lv


def _series_from_comparison(sides: Sequence[Any], comparison: dict) -> list[ReportSeries]:
    by_label = {s.label: s for s in sides}
    levels_of: dict[str, dict[str, list[Any]]] = {}
    for s in sides:
        for run in s.runs:
            for key, _, lv in _shown(run.levels):
                levels_of.setdefault(s.label, {}).setdefault(key, []).append(lv)
    series = {s.label: ReportSeries(s.label, [], baseline=s.label == comparison.get("baseline")) for s in sides}
    for lvj in comparison.get("levels", []):
        flags: dict[str, list[str]] = {}
        for f in lvj.get("flags", []):
            flags.setdefault(f.get("side", ""), []).append(str(f.get("detail")))
        for label, sd in lvj.get("sides", {}).items():
            if label not in series:
                continue
            lvs = levels_of.get(label, {}).get(lvj["key"], [])
            n, ok, errors = _counts(lvs)
            metrics = dict(sd.get("metrics", {}))
            itl = _itl_cell(lvs)
            if itl is not None and len(by_label[label].runs) == 1:
                metrics["itl_p50"] = itl
            notes = list(flags.get(label, []))
            for lv in lvs[:1]:
                notes.extend(_level_notes(lv))
            headline = (lvj.get("headline") or {}).get(label)
            if headline:
                notes.insert(0, f"headline ({comparison.get('primary')}): {headline.replace('_', ' ')}")
            series[label].levels.append(
                ReportLevel(int(lvj["concurrency"]), n or None, ok if lvs else None, errors, metrics, notes,
                            lvj["key"], _level_tok_s(lvs))
            )
    return [series[s.label] for s in sides]


def _comparison_notes(c: dict) -> list[str]:
    out = [
        f"Verdicts on {c.get('primary')} at {100 * float(c.get('confidence', 0.95)):.0f}% confidence; "
        f"differences under {100 * float(c.get('min_effect', 0.02)):g}% count as no difference."
    ]
    for f in c.get("shape_flags", []):
        out.append(f"{f.get('side')}: {f.get('detail')}")
    out.extend(str(n) for n in c.get("notes", []))
    return out


def crossover_note(c: dict) -> str | None:
    """The headline metric's crossovers in one sentence (decided ones; else the point estimates',
    said so); the other metrics' are in the JSON, not in a row of banners."""
    from specload.stats.level_metrics import METRICS as COMPARED

    mine = [x for x in c.get("crossovers", []) if x.get("metric") == c.get("primary")]
    shown = [x for x in mine if x.get("decided")] or mine
    if not shown:
        return None
    spec = COMPARED.get(str(c.get("primary")))
    name = spec.label if spec is not None else str(c.get("primary"))
    parts = [f"{x.get('side')} is {x.get('below')} up to C={x['between'][0]} and {x.get('above')} from "
             f"C={x['between'][1]} (crossing near C≈{float(x.get('at') or 0):.0f})" for x in shown]
    tail = "" if any(x.get("decided") for x in shown) else " (point estimates only: not decided on both sides)"
    return f"Crossover on {name}: " + "; ".join(parts) + tail + "."


def _level_tok_s(levels: Sequence[Any]) -> float | None:
    """The terminal table's tok/s of one level (its level line); None for repeats or a source without one."""
    if len(levels) != 1 or levels[0].summary is None:
        return None
    return levels[0].summary.throughput_tok_s


def report_run(run: Any, *, side: str = "") -> ReportRun:
    """A run's card and timeline."""
    tl = run.timeline
    end = run.end or {}
    servers = tl.server if tl.server is None else tl.server + (tl.gpu_totals() or ())
    ts = build_time_series(run.levels, tl.events, tl.crashes, servers, end_s=end.get("elapsed_s"))
    by_key = {id(lv): str(k) for k, lvs in level_keys(run.levels).items() for lv in lvs}
    cats = [(by_key.get(id(lv), f"C={lv.concurrency}"), (lv.summary.accept_len, lv.summary.accept_rate),
             list(lv.summary.categories)) for lv in run.levels if lv.summary is not None and lv.summary.categories]
    return ReportRun(
        label=run.label,
        description=describe(run),
        timeline=ts,
        crashes=list(tl.crashes or ()),
        notes=list(run.notes),
        source=run.source,
        side=side,
        categories=cats,
    )


def describe(run: Any) -> list[tuple[str, str]]:
    """The rows of a run's card: what was measured and how, as far as the source says."""
    d = run.description
    cfg = d.config or {}
    rows: list[tuple[str, str]] = []

    def add(k: str, v: object) -> None:
        if v not in (None, "", [], {}, ()):
            rows.append((k, str(v)))

    add("source", f"{d.tool} {d.version or ''}".strip() + f" · {run.source}")
    add("target", d.target or ("built-in simulator " + " ".join(d.sim_args or ()) if d.tool == "specload" else None))
    add("model", d.model)
    add("API", d.api)
    shape = []
    if d.prompt_source:
        shape.append(f"prompts {d.prompt_source}")
    if d.prompt_tokens is not None:
        shape.append(f"~{d.prompt_tokens} prompt tokens")
    if d.max_tokens is not None:
        shape.append(f"max_tokens {d.max_tokens}")
    if d.ignore_eos:
        shape.append("ignore_eos")
    if cfg.get("temperature") is not None:
        shape.append(f"temperature {cfg['temperature']}")
    if d.rate:
        shape.append(f"open loop {d.rate:g} req/s")
    add("request shape", ", ".join(shape))
    add("levels", ", ".join(f"C={lv.concurrency}" + (" (key)" if lv.manual else "") for lv in run.levels))
    # the record masks secrets when it is written; masked again here for records from older versions
    add("command", redact_command(d.command))
    add("launch", redact_command(cfg.get("launch")))
    add("server log command", redact_command(cfg.get("server_log_cmd")))
    add("started", d.started_at)
    if run.kind == "specload":
        if run.end is not None:
            e = run.end
            add("end", f"{e.get('reason')} after {float(e.get('elapsed_s') or 0):.1f} s, "
                       f"{e.get('ok')}/{e.get('requests')} ok")
        else:
            add("end", "no end line: the run was cut short")
    summary = cfg.get("tool_summary")
    if summary:
        for i, s in enumerate(summary if isinstance(summary, list) else [summary]):
            add(f"{d.tool}'s own summary" + (f" (line {i + 1})" if isinstance(summary, list) else ""),
                tool_summary_text(s))
    return rows


def tool_summary_text(s: dict) -> str:
    """A peer tool's summary figures as it printed them (two decimals, its names)."""
    parts = []
    if "output_throughput" in s:
        parts.append(f"output {s['output_throughput']:.2f} tok/s")
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL per chunk"), ("e2el", "E2EL"),
                        ("e2e_latency", "E2E")):
        vals = [(stat, s.get(f"{stat}_{name}_ms")) for stat in ("mean", "median", "p99")]
        if any(v is not None for _, v in vals):
            parts.append(f"{label} mean/median/p99 " + "/".join("–" if v is None else f"{v:.2f}" for _, v in vals)
                         + " ms")
    for k, label in (("spec_decode_acceptance_length", "acceptance length"), ("accept_length", "accept length")):
        if s.get(k) is not None:
            parts.append(f"{label} {s[k]:.2f} (server, whole run)")
    return "\n".join(parts)


def distinct_crashes(crashes: list[dict]) -> list[tuple[dict, object]]:
    """A run's crash lines, the first of each signature, each with the time it was first seen."""
    seen: set[str] = set()
    out = []
    for c in crashes:
        sig = str(c.get("signature") or c.get("message"))
        if sig not in seen:
            seen.add(sig)
            out.append((c, c.get("first_seen_s", c.get("t_s"))))
    return out


def crash_lines(page: ReportPage) -> list[str]:
    """One line per crash signature of the page's runs: the page's answer and the plot say it first."""
    return [f"{run.label}: server crashed{f' at {t:.1f} s' if isinstance(t, int | float) else ''}: {crash_label(c)}"
            for run in page.runs for c, t in distinct_crashes(run.crashes)]
