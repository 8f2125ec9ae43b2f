"""A run over time for the HTML report's timelines and the plots: binned client series (tokens/s spread
over each request's decode span, in flight, TTFT, TPOT, errors) and the server samples at their own
times, from a run's levels and timeline lines, so any source the run model reads is drawn the same
way; what a source lacks is marked missing, never drawn as zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_BINS = 3600
# the GPUs' fields come in lines of their own (source "GPUs", ``Timeline.gpu_totals``)
SERVER_FIELDS = ("running", "queued", "token_usage", "accept_len", "gen_tok_s", "gpu_power_w", "gpu_util_pct")


@dataclass(frozen=True, slots=True)
class Span:
    """A period on the timeline: paused, server down, warm-up."""

    start_s: float
    end_s: float
    kind: str
    label: str = ""


@dataclass(frozen=True, slots=True)
class Mark:
    """An instant on the timeline: a level boundary, a marker, a crash, a server exit."""

    t_s: float
    kind: str  # level, marker, crash, server_exit, hold, error
    label: str
    detail: str = ""
    manual: bool = False  # a level set by a key in the TUI rather than by the planned ramp


@dataclass
class TimeSeries:
    bin_s: float
    t_s: list[float]  # each bin's start
    series: dict[str, list[float | None]]
    server: dict[str, tuple[list[float], list[float]]]  # field -> (times, values)
    server_source: str | None
    has_server: bool = True  # False: the source has no server samples at all (a peer tool's file)
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    duration_s: float = 0.0

    def as_json(self) -> dict:
        return {
            "bin_s": self.bin_s,
            "t_s": self.t_s,
            "series": self.series,
            "server": {k: {"t": t, "v": v} for k, (t, v) in self.server.items()},
            "server_source": self.server_source,
            "has_server": self.has_server,
            "spans": [{"start": s.start_s, "end": s.end_s, "kind": s.kind, "label": s.label} for s in self.spans],
            "marks": [
                {"t": m.t_s, "kind": m.kind, "label": m.label, "detail": m.detail, "manual": m.manual}
                for m in self.marks
            ],
            "duration_s": self.duration_s,
        }


def bin_width(duration_s: float, max_bins: int = MAX_BINS) -> float:
    """1 s; a round fraction of a second for runs under two minutes (at least ~60 bins, at least
    0.1 s); a round number of seconds that keeps the bin count under ``max_bins`` for long runs."""
    if duration_s < 120:
        for step in (0.1, 0.2, 0.5):
            if duration_s / step <= 240:
                return step
        return 1.0
    if duration_s <= max_bins:
        return 1.0
    raw = duration_s / max_bins
    for step in (2, 5, 10, 15, 30, 60, 120, 300, 600):
        if raw <= step:
            return float(step)
    return float(math.ceil(raw / 600) * 600)


def _integrate(edges: np.ndarray, a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per bin, the integral of sum_i w_i * 1[a_i <= t < b_i]: each interval contributes its weight
    times its overlap with the bin. O((n + bins) log n) through the cumulative function
    F(t) = sum_i w_i * (clip(t, a_i, b_i) - a_i), which is piecewise linear."""
    if len(a) == 0:
        return np.zeros(len(edges) - 1)

    def ramp(starts: np.ndarray, weights: np.ndarray) -> np.ndarray:
        # sum over starts < t of weights * (t - start), at every edge t
        order = np.argsort(starts)
        s, ww = starts[order], weights[order]
        cw = np.concatenate(([0.0], np.cumsum(ww)))
        cws = np.concatenate(([0.0], np.cumsum(ww * s)))
        k = np.searchsorted(s, edges, side="left")
        return edges * cw[k] - cws[k]

    cum = ramp(a, w) - ramp(b, w)
    return np.diff(cum)


def _bin_index(times: np.ndarray, bin_s: float, nbins: int) -> np.ndarray:
    # a hair added before flooring: 1.2 / 0.1 is 11.999... in binary, and 1.2 s belongs to bin 12
    return np.clip(np.floor(times / bin_s + 1e-9).astype(np.int64), 0, nbins - 1)


def _median_by_bin(times: np.ndarray, values: np.ndarray, nbins: int, bin_s: float) -> list[float | None]:
    out: list[float | None] = [None] * nbins
    if len(times) == 0:
        return out
    idx = _bin_index(times, bin_s, nbins)
    order = np.argsort(idx, kind="stable")
    idx, values = idx[order], values[order]
    bounds = np.flatnonzero(np.diff(idx)) + 1
    for group_idx, group in zip(np.split(idx, bounds), np.split(values, bounds), strict=True):
        out[int(group_idx[0])] = round(float(np.median(group)), 3)
    return out


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _column(level: object, name: str, n: int) -> np.ndarray:
    col = getattr(level, name, None)
    return np.full(n, np.nan) if col is None else np.asarray(col, dtype=np.float64)


def build_time_series(
    levels: Sequence[Any],
    events: Iterable[dict] | None = (),
    crashes: Iterable[dict] | None = (),
    servers: Iterable[dict] | None = (),
    *,
    end_s: float | None = None,
    max_bins: int = MAX_BINS,
) -> TimeSeries | None:
    """The time series of one run from its levels' request columns (``LevelRequests``: ``start_s``,
    ``end_s``, ``ttft_ms``, ``tpot_ms``, ``output_tokens``, ``ok``, ``error_kind``; times in seconds
    since the run started) and its timeline lines. ``None`` when the requests have no start times
    (a peer tool's file that lacks them): there is no time axis to draw on."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "end", "ttft", "tpot", "tokens", "ok", "err")}
    any_start = False
    for lv in levels:
        ok = np.asarray(lv.ok, dtype=bool)
        n = ok.size
        if getattr(lv, "start_s", None) is None:
            continue
        any_start = True
        start = _column(lv, "start_s", n)
        end = _column(lv, "end_s", n)
        ttft = _column(lv, "ttft_ms", n)
        end = np.where(np.isfinite(end), end, start + np.nan_to_num(_column(lv, "e2e_ms", n)) / 1e3)
        kinds = tuple(getattr(lv, "error_kind", ()) or ())
        err = np.array([not o and (kinds[i] if i < len(kinds) else None) != "cancelled" for i, o in enumerate(ok)],
                       dtype=bool)
        cols["start"].append(start)
        cols["end"].append(np.maximum(end, start))
        cols["ttft"].append(ttft)
        cols["tpot"].append(np.where(ok, _column(lv, "tpot_ms", n), np.nan))
        cols["tokens"].append(np.nan_to_num(_column(lv, "output_tokens", n)))
        cols["ok"].append(ok)
        cols["err"].append(err)
    if not any_start:
        return None
    c = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    keep = np.isfinite(c["start"])
    c = {k: v[keep] for k, v in c.items()}
    start, end, ttft, tpot, tokens = c["start"], c["end"], c["ttft"], c["tpot"], c["tokens"]
    events = list(events or ())
    crashes = list(crashes or ())
    server_lines = list(servers or ()) if servers is not None else None

    known_end = float(end.max()) if end.size else 0.0
    for seq in (events, crashes, server_lines or []):
        for line in seq:
            t = _num(line.get("t_s"))
            if t is not None:
                known_end = max(known_end, t)
    duration = max(end_s or 0.0, known_end)
    bin_s = bin_width(duration, max_bins)
    nbins = max(1, math.ceil(duration / bin_s))
    if nbins > 1 and duration - (nbins - 1) * bin_s < bin_s / 2:
        nbins -= 1  # a short tail joins the last bin rather than showing a rate over a sliver of time
    edges = np.arange(nbins + 1, dtype=float) * bin_s
    edges[-1] = max(duration, bin_s * (nbins - 1) + bin_s / 2) if nbins > 1 else max(duration, bin_s)
    widths = np.diff(edges)  # the last bin runs to the end of the run: rates over its real length

    # tokens: the first at TTFT, the other n-1 spread evenly over the decode span
    has_first = np.isfinite(ttft) & (tokens > 0)
    first = start + np.nan_to_num(ttft) / 1e3
    last = np.maximum(end, first)
    spread = has_first & (tokens > 1) & (last > first)
    rate = np.zeros_like(tokens)
    rate[spread] = (tokens[spread] - 1) / (last[spread] - first[spread])
    tok = _integrate(edges, first[spread], last[spread], rate[spread])
    point_t = np.concatenate([first[has_first], last[has_first & (tokens > 1) & ~spread]])
    point_n = np.concatenate([np.ones(int(has_first.sum())), (tokens - 1)[has_first & (tokens > 1) & ~spread]])
    if point_t.size:
        idx = _bin_index(point_t, bin_s, nbins)
        tok += np.bincount(idx, weights=point_n, minlength=nbins)
    inflight = _integrate(edges, start, end, np.ones(start.size))

    series: dict[str, list[float | None]] = {
        "tok_s": [round(float(x), 2) for x in tok / widths],
        "inflight": [round(float(x), 2) for x in inflight / widths],
    }
    f = np.isfinite(ttft)
    series["ttft_ms"] = _median_by_bin(first[f], ttft[f], nbins, bin_s)
    f = np.isfinite(tpot)
    series["tpot_ms"] = _median_by_bin(end[f], tpot[f], nbins, bin_s)
    err_idx = _bin_index(end[c["err"]], bin_s, nbins)
    series["errors"] = [int(x) for x in np.bincount(err_idx, minlength=nbins)]

    server, source = _server_series(server_lines or [], bin_s, nbins)
    spans, marks = _annotations(events, crashes, duration)
    return TimeSeries(
        bin_s=bin_s,
        t_s=[round(float(x), 3) for x in edges[:-1]],
        series=series,
        server=server,
        server_source=source,
        has_server=server_lines is not None,
        spans=spans,
        marks=marks,
        duration_s=round(duration, 3),
    )


def _server_series(
    lines: list[dict], bin_s: float, nbins: int
) -> tuple[dict[str, tuple[list[float], list[float]]], str | None]:
    by_source: dict[str, list[dict]] = {}
    for line in lines:
        by_source.setdefault(str(line.get("source", "?")), []).append(line)
    if not by_source:
        return {}, None
    out: dict[str, tuple[list[float], list[float]]] = {}
    used: list[str] = []
    # /metrics first: its counters are the server's own totals; the log fills the fields it lacks
    ordered = sorted(by_source, key=lambda s: (s != "metrics", s))
    for f in SERVER_FIELDS:
        for src in ordered:
            pts = [(line["t_s"], line[f]) for line in by_source[src]
                   if _num(line.get(f)) is not None and _num(line.get("t_s")) is not None]
            if f == "gen_tok_s":
                pts = windowed_rate(pts, [_interval(line) for line in by_source[src]
                                          if _num(line.get(f)) is not None and _num(line.get("t_s")) is not None])
            if pts:
                t = np.array([p[0] for p in pts], dtype=np.float64)
                v = np.array([p[1] for p in pts], dtype=np.float64)
                if len(pts) > nbins:
                    t, v = _bin_means(t, v, bin_s, nbins)  # more samples than bins: their mean per bin
                out[f] = ([round(float(x), 3) for x in t], [round(float(x), 4) for x in v])
                if src not in used:
                    used.append(src)
                break
    return out, ", ".join(used) or None


RATE_WINDOW_S = 1.0  # a server rate is drawn over at least this long


def _interval(line: dict) -> float | None:
    extra = line.get("extra")
    return _num(extra.get("interval_s")) if isinstance(extra, dict) else None


def windowed_rate(pts: list[tuple[float, float]], intervals: list[float | None],
                  window_s: float = RATE_WINDOW_S) -> list[tuple[float, float]]:
    """A counter's rate samples (time, rate over the sample's interval) merged until each covers at
    least ``window_s``: the same tokens over a longer span. A sample 0.1 s after the last one held a
    single scheduler step's tokens and drew a spike (1,600 tok/s from a server making 300); the
    merged rate is the tokens of the window over its length, nothing smoothed away. Samples without
    an interval are kept as they are."""
    out: list[tuple[float, float]] = []
    tokens = span = 0.0
    for (t, rate), dt in zip(pts, intervals, strict=True):
        if dt is None or dt <= 0:
            out.append((t, rate))
            continue
        tokens += rate * dt
        span += dt
        if span >= window_s * 0.95:  # a one-second poll that came a little early is a whole window
            out.append((t, tokens / span))
            tokens = span = 0.0
    if span > 0:
        out.append((pts[-1][0], tokens / span))
    return out


def _bin_means(t: np.ndarray, v: np.ndarray, bin_s: float, nbins: int) -> tuple[np.ndarray, np.ndarray]:
    idx = _bin_index(t, bin_s, nbins)
    sums = np.bincount(idx, weights=v, minlength=nbins)
    counts = np.bincount(idx, minlength=nbins)
    have = counts > 0
    return (np.flatnonzero(have) + 0.5) * bin_s, sums[have] / counts[have]


def _annotations(events: list[dict], crashes: list[dict], duration: float) -> tuple[list[Span], list[Mark]]:
    spans: list[Span] = []
    marks: list[Mark] = []
    paused_at: float | None = None
    down_at: float | None = None
    for ev in sorted(events, key=lambda e: e.get("t_s") or 0.0):
        t = _num(ev.get("t_s"))
        if t is None:
            continue
        kind, value = ev.get("kind"), ev.get("value")
        if kind == "level" and isinstance(value, dict):
            manual = bool(value.get("manual"))
            c = value.get("concurrency")
            marks.append(
                Mark(t, "level", f"C={c}", "set by key" if manual else f"level {value.get('index')}", manual=manual)
            )
        elif kind == "marker":
            marks.append(Mark(t, "marker", str(value) if value else "marker"))
        elif kind == "pause" and paused_at is None:
            if down_at is not None and t - down_at < 1.0:
                continue  # the load pauses because the server went down: the outage says it
            paused_at = t
        elif kind == "resume" and paused_at is not None:
            spans.append(Span(paused_at, t, "paused", "paused"))
            paused_at = None
        elif kind == "health" and value == "down" and down_at is None:
            down_at = t
        elif kind == "health" and value == "up" and down_at is not None:
            spans.append(Span(down_at, t, "down", "server down"))
            down_at = None
        elif kind == "server_exit":
            marks.append(Mark(t, "server_exit", "server exited", str(value or "")))
        elif kind == "error":
            marks.append(Mark(t, "error", "error", str(value or "")))
    if paused_at is not None:
        spans.append(Span(paused_at, duration, "paused", "paused"))
    if down_at is not None:
        spans.append(Span(down_at, duration, "down", "server down"))
    seen: set[str] = set()
    for c in crashes:
        sig = str(c.get("signature") or c.get("message") or "")
        if sig in seen:
            continue  # the record repeats a signature as more ranks report it; draw it once
        seen.add(sig)
        t = _num(c.get("first_seen_s"))
        if t is None:
            t = _num(c.get("t_s")) or 0.0
        marks.append(Mark(t, "crash", crash_label(c), crash_detail(c)))
    marks.sort(key=lambda m: m.t_s)
    return spans, marks


def crash_label(c: dict) -> str:
    """A crash's signature as one short line: ``AttributeError: 'X' object has no attribute ...``."""
    exc = c.get("exception_type") or "crash"
    msg = c.get("message") or ""
    text = f"{exc}: {msg}" if msg else str(exc)
    return text if len(text) <= 120 else text[:117] + "..."


def crash_detail(c: dict) -> str:
    parts = []
    if c.get("innermost_frame"):
        parts.append(f"at {c['innermost_frame']}")
    procs = c.get("processes") or []
    if procs:
        parts.append("ranks " + ", ".join(str(p) for p in procs[:8]) + (" ..." if len(procs) > 8 else ""))
    if c.get("count"):
        parts.append(f"seen {c['count']}x")
    return "; ".join(parts)
