"""The report's time series: tokens conserved, in-flight averaged over time, medians per bin,
annotations from the record's events, and what a source lacks left missing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from specload.report.timeseries import bin_width, build_time_series


@dataclass
class Cols:
    """A level's request columns, shaped like the run model's ``LevelRequests``."""

    ok: np.ndarray
    start_s: np.ndarray | None
    end_s: np.ndarray | None = None
    ttft_ms: np.ndarray | None = None
    tpot_ms: np.ndarray | None = None
    e2e_ms: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    error_kind: tuple = ()


def cols(rows: list[tuple], **kw: object) -> Cols:
    """rows: (start_s, end_s, ttft_ms, tpot_ms, tokens, ok, error_kind)"""
    a = list(zip(*rows, strict=True))
    f = lambda xs: np.array([np.nan if x is None else x for x in xs], dtype=float)  # noqa: E731
    return Cols(
        ok=np.array(a[5], dtype=bool), start_s=f(a[0]), end_s=f(a[1]), ttft_ms=f(a[2]), tpot_ms=f(a[3]),
        output_tokens=f(a[4]), error_kind=tuple(a[6]), **kw,
    )


def test_tokens_are_conserved_and_spread_over_the_decode_span() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(500):
        s = rng.uniform(0, 100)
        ttft = rng.uniform(10, 500)
        e = s + ttft / 1e3 + rng.uniform(0.1, 8)
        rows.append((s, e, ttft, 20.0, int(rng.integers(1, 300)), True, None))
    ts = build_time_series([cols(rows)], end_s=120.0)
    assert ts is not None and ts.bin_s == 1.0 and len(ts.t_s) == 120
    widths = np.diff([*ts.t_s, ts.duration_s])
    total = float(np.sum(np.array(ts.series["tok_s"]) * widths))
    assert total == pytest.approx(sum(r[4] for r in rows), rel=1e-4)


def test_one_request_spreads_evenly_and_inflight_is_time_weighted() -> None:
    # 101 tokens: the first at 0.5 s (TTFT), 100 more evenly over [0.5, 4.5): 25 tok/s
    ts = build_time_series([cols([(0.0, 4.5, 500.0, 40.0, 101, True, None)])], end_s=300.0)
    assert ts is not None
    assert ts.series["tok_s"][:6] == pytest.approx([1 + 12.5, 25, 25, 25, 12.5, 0], abs=0.02)
    assert ts.series["inflight"][:6] == pytest.approx([1, 1, 1, 1, 0.5, 0], abs=0.01)
    assert ts.series["ttft_ms"][0] == 500.0 and ts.series["ttft_ms"][1] is None
    assert ts.series["tpot_ms"][4] == 40.0 and ts.series["tpot_ms"][3] is None


def test_errors_counted_where_they_ended_but_not_cancellations() -> None:
    rows = [
        (0.0, 1.2, None, None, 0, False, "http"),
        (0.0, 1.7, None, None, 0, False, "timeout"),
        (0.0, 2.5, None, None, 0, False, "cancelled"),
        (0.0, 3.0, 100.0, 10.0, 20, True, None),
    ]
    ts = build_time_series([cols(rows)], end_s=3.0)  # a short run: 0.1 s bins
    assert ts is not None and ts.bin_s == 0.1 and len(ts.t_s) == 30
    assert [i for i, n in enumerate(ts.series["errors"]) for _ in range(n)] == [12, 17]


def test_a_source_without_start_times_has_no_time_series() -> None:
    c = Cols(ok=np.ones(3, bool), start_s=None, ttft_ms=np.array([1.0, 2.0, 3.0]))
    assert build_time_series([c]) is None


def test_annotations_from_events_and_crashes() -> None:
    events = [
        {"t_s": 0.1, "kind": "level", "value": {"index": 0, "concurrency": 2, "manual": False}},
        {"t_s": 5.0, "kind": "level", "value": {"index": 1, "concurrency": 7, "manual": True}},
        {"t_s": 6.0, "kind": "marker", "value": "draft length 4"},
        {"t_s": 7.0, "kind": "pause", "value": 7},
        {"t_s": 9.0, "kind": "resume", "value": 7},
        {"t_s": 12.0, "kind": "health", "value": "down"},
        {"t_s": 12.01, "kind": "pause", "value": 7},  # the outage's own pause: not a second span
        {"t_s": 15.0, "kind": "health", "value": "up"},
        {"t_s": 18.0, "kind": "health", "value": "down"},
    ]
    crash = {"t_s": 11.5, "first_seen_s": 11.0, "signature": "abc", "exception_type": "AttributeError",
             "message": "'EAGLEWorkerV2' object has no attribute 'x'", "innermost_frame": "w.py:3 in f",
             "processes": ["TP0", "TP1"], "count": 2}
    ts = build_time_series([cols([(0.1, 19.0, 50.0, 5.0, 10, True, None)])], events, [crash, dict(crash, t_s=11.9)],
                           [], end_s=20.0)
    assert ts is not None
    kinds = [(m.kind, m.label, m.manual) for m in ts.marks]
    assert kinds == [
        ("level", "C=2", False), ("level", "C=7", True), ("marker", "draft length 4", False),
        ("crash", "AttributeError: 'EAGLEWorkerV2' object has no attribute 'x'", False),
    ]
    crash_mark = ts.marks[3]
    assert crash_mark.t_s == 11.0 and "w.py:3 in f" in crash_mark.detail and "TP1" in crash_mark.detail
    spans = [(s.kind, s.start_s, s.end_s) for s in ts.spans]
    assert spans == [("paused", 7.0, 9.0), ("down", 12.0, 15.0), ("down", 18.0, 20.0)]


def test_server_samples_prefer_metrics_and_keep_missing_fields_out() -> None:
    servers = [
        {"t_s": 1.0, "source": "metrics", "running": 3, "queued": 0, "token_usage": 0.1},
        {"t_s": 1.1, "source": "log:sglang", "running": 4, "accept_len": 2.5, "gen_tok_s": 100.0},
        {"t_s": 2.0, "source": "metrics", "running": 5, "queued": 1, "token_usage": 0.2},
    ]
    ts = build_time_series([cols([(0.0, 2.5, 50.0, 5.0, 10, True, None)])], [], [], servers, end_s=3.0)
    assert ts is not None
    assert ts.server["running"] == ([1.0, 2.0], [3.0, 5.0])  # metrics, not the log's 4
    assert ts.server["accept_len"] == ([1.1], [2.5])  # only the log has it
    assert "prompt_tok_s" not in ts.server
    assert ts.server_source == "metrics, log:sglang"
    assert ts.has_server


def test_no_server_lines_at_all_is_not_the_same_as_none_seen() -> None:
    c = cols([(0.0, 2.5, 50.0, 5.0, 10, True, None)])
    assert build_time_series([c], servers=None).has_server is False  # the source has no such lines
    assert build_time_series([c], servers=[]).has_server is True


@pytest.mark.parametrize(
    ("duration", "width"),
    [(3, 0.1), (24, 0.1), (30, 0.2), (100, 0.5), (120, 1.0), (3600, 1.0), (3601, 2.0), (7 * 3600, 10.0)],
)
def test_bin_width_keeps_long_runs_small_and_short_ones_detailed(duration: float, width: float) -> None:
    assert bin_width(duration) == width
    assert 20 <= duration / bin_width(duration) <= 3600


def test_a_long_run_keeps_its_size_bounded() -> None:
    # ten hours of requests and a server sample a second: server samples averaged per bin (kept small:
    # this process is the parent whose memory other tests' children inherit at fork)
    n = 5_000
    start = np.linspace(0, 36_000, n)
    c = cols([(s, s + 5.0, 100.0, 20.0, 100, True, None) for s in start])
    servers = [{"t_s": float(t), "source": "metrics", "running": float(t % 7)} for t in range(36_000)]
    ts = build_time_series([c], [], [], servers, end_s=36_010.0)
    assert ts is not None and ts.bin_s == 15.0 and len(ts.t_s) <= 3601  # 36,010 s: just over 10 s bins
    t, v = ts.server["running"]
    assert len(t) <= 3601 and np.mean(v) == pytest.approx(3.0, abs=0.01)  # the mean of 0..6


def test_a_server_rate_is_drawn_over_a_second_or_more_not_a_spike_per_short_poll() -> None:
    """A /metrics poll 0.1 s after the last one held one scheduler step's tokens: 3,000 tok/s from a
    server making 300. It is merged with the next until the window is a second long: the same tokens
    over their own span (the token total is unchanged)."""
    lines = [{"type": "server", "t_s": t, "source": "metrics", "gen_tok_s": r, "extra": {"interval_s": dt}}
             for t, r, dt in ((1.0, 300.0, 1.0), (1.1, 3000.0, 0.1), (2.1, 270.0, 1.0), (3.1, 310.0, 1.0))]
    ts = build_time_series([cols([(0.0, 3.5, 50.0, 5.0, 10, True, None)])], [], [], lines, end_s=4.0)
    assert ts is not None
    t, v = ts.server["gen_tok_s"]
    assert t == [1.0, 2.1, 3.1] and max(v) < 600
    assert v[1] == pytest.approx((3000 * 0.1 + 270 * 1.0) / 1.1)
    assert sum(x * dt for x, dt in zip(v, (1.0, 1.1, 1.0), strict=True)) == pytest.approx(300 + 300 + 270 + 310)
