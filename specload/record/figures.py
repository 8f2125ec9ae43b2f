"""The figures a report shows, per run and level: the shared input of the HTML page and the plots.

A ``ReportRun`` is a run as a report draws it: its description rows, its levels with each metric's
value and 95% interval (and, when runs are compared, the ratio to the baseline and the verdict), its
time series, its crashes and the notes a reader needs (definitions that differ from specload's, what
the source lacks). It is filled from the run model (``runs.Run``) and the comparison's JSON, so the
HTML page, the PNG/SVG plots and the terminal show the same figures.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

from specload.record.timeseries import TimeSeries

# the run colours: Okabe-Ito, told apart with colour-blindness as well
RUN_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")

# metric key (the comparison's names) -> (column heading, unit, digits, scale for display); the order
# of the level table's columns. ITL is shown where the run has it but not compared (see README).
METRICS: dict[str, tuple[str, str, int, float]] = {
    "throughput": ("output tok/s", "tok/s", 1, 1.0),
    "per_request_tok_s": ("per-request tok/s", "tok/s", 1, 1.0),
    "ttft_p50": ("TTFT p50", "ms", 1, 1.0),
    "ttft_p99": ("TTFT p99", "ms", 1, 1.0),
    "tpot_p50": ("TPOT p50", "ms", 2, 1.0),
    "tpot_p99": ("TPOT p99", "ms", 2, 1.0),
    "itl_p50": ("ITL p50", "ms", 2, 1.0),
    "e2e_p50": ("E2E p50", "s", 3, 1.0),
    "e2e_p99": ("E2E p99", "s", 3, 1.0),
    "error_rate": ("errors", "%", 1, 100.0),
    "accept_len": ("accept len", "tok", 2, 1.0),
}


@dataclass
class ReportLevel:
    concurrency: int
    requests: int | None
    ok: int | None
    errors: dict[str, int] = field(default_factory=dict)
    # metric key -> {"value", "ci_low", "ci_high", and for a compared run "ratio", "ratio_ci_low",
    # "ratio_ci_high", "verdict"}; a metric the run lacks is absent (shown as missing, never 0)
    metrics: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class ReportRun:
    label: str
    description: list[tuple[str, str]]  # (what, value) rows, secrets already masked
    levels: list[ReportLevel]
    timeline: TimeSeries | None = None
    crashes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # definitions that differ, what the file lacks
    source: str = ""  # the file it was read from


@dataclass
class ReportPage:
    runs: list[ReportRun]
    title: str = "specload report"
    baseline: str | None = None  # the label the ratios and verdicts are against
    comparison_notes: list[str] = field(default_factory=list)  # method, threshold, unsound flags
    generated_at: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )


def describe_run(run: dict, end: dict | None) -> list[tuple[str, str]]:
    """The rows of a run's card from a record's run (and end) line: what was measured and how."""
    rows: list[tuple[str, str]] = []

    def add(k: str, v: object) -> None:
        if v not in (None, "", [], {}):
            rows.append((k, str(v)))

    add("target", run.get("target"))
    add("model", run.get("model"))
    add("API", run.get("api"))
    shape = []
    if run.get("prompt_source"):
        shape.append(f"prompts {run['prompt_source']}")
    if run.get("prompt_tokens") is not None and run.get("prompt_source") == "synthetic":
        shape.append(f"~{run['prompt_tokens']} tokens")
    if run.get("max_tokens") is not None:
        shape.append(f"max_tokens {run['max_tokens']}")
    if run.get("ignore_eos"):
        shape.append("ignore_eos")
    if run.get("temperature") is not None:
        shape.append(f"temperature {run['temperature']}")
    if run.get("rate"):
        shape.append(f"open loop {run['rate']} req/s")
    add("request shape", ", ".join(shape))
    levels = run.get("levels") or []
    if levels:
        add("levels", ", ".join(f"C={lv.get('concurrency')}" for lv in levels))
    add("command", run.get("command"))
    add("launch", run.get("launch"))
    add("server log command", run.get("server_log_cmd"))
    add("started", run.get("started_at"))
    add("specload", run.get("specload"))
    if end is not None:
        add("end", f"{end.get('reason')} after {end.get('elapsed_s', 0):.1f} s, {end.get('ok')}/{end.get('requests')} ok")
    else:
        add("end", "no end line: the run was cut short")
    return rows
