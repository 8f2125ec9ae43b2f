"""Figures of a level from its requests: the steady-state selection and the throughput estimator, on
closed-loop levels generated here with a known truth (C slots, each request's duration drawn, the
next request sent the moment one ends), plus the specload record reader into the run model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest

from specload.record.runs import Run, RunDescription, Timeline, load_run, register_reader
from specload.stats import intervals as iv
from specload.stats.level_metrics import (
    METRICS,
    LevelRequests,
    estimate,
)

TOKENS = 100


def closed_loop(c: int, n: int, rng: np.random.Generator, *, mean_s: float = 1.0, fill_extra_s: float = 0.0,
                drain_speedup: float = 1.0) -> LevelRequests:
    """``n`` requests at concurrency ``c``: the first cohort starts together at t=10 (and takes
    ``fill_extra_s`` longer: a shared prefill); requests running after the last start go
    ``drain_speedup`` times faster (a shrinking batch)."""
    slots = [10.0] * c
    starts, ends = [], []
    for i in range(n):
        k = int(np.argmin(slots))
        s = slots[k]
        d = rng.gamma(25.0, mean_s / 25.0) + (fill_extra_s if i < c else 0.0)
        starts.append(s)
        ends.append(s + d)
        slots[k] = s + d
    start, end = np.array(starts), np.array(ends)
    last = start.max()
    late = end > last
    end[late] = last + (end[late] - last) / drain_speedup
    dur = end - start
    ttft = np.full(n, 50.0)
    return LevelRequests(
        index=0, concurrency=c, ok=np.ones(n, bool), start_s=start, end_s=end, ttft_ms=ttft,
        tpot_ms=(dur * 1e3 - ttft) / (TOKENS - 1), e2e_ms=dur * 1e3, output_tokens=np.full(n, float(TOKENS)),
        prompt_tokens=np.full(n, 128.0), tokens_estimated=np.zeros(n, bool), error_kind=(None,) * n,
    )


def test_steady_state_excludes_the_first_cohort_and_the_drain() -> None:
    lv = closed_loop(4, 40, np.random.default_rng(1))
    st = lv.steady()
    assert not st.mask[:4].any()  # the first cohort, sent together
    last_start = lv.start_s.max()  # type: ignore[union-attr]
    in_flight_at_last = lv.end_s > last_start  # type: ignore[operator]
    # of the requests still running at the last start only the first to end ran wholly at C
    assert st.mask[in_flight_at_last].sum() == 1
    assert st.count == 40 - 4 - 3
    assert st.mean_in_flight == pytest.approx(4.0, rel=1e-6)
    # at C=1 every request counts: nothing fills or drains
    one = closed_loop(1, 10, np.random.default_rng(2))
    assert one.steady().count == 10


def test_throughput_is_the_steady_rate_not_skewed_by_fill_and_drain() -> None:
    rng = np.random.default_rng(3)
    # true steady rate: C * tokens / mean duration = 8 * 100 / 1.0
    lv = closed_loop(8, 80, rng, fill_extra_s=0.8, drain_speedup=3.0)
    e = estimate(lv, "throughput")
    assert e.value == pytest.approx(800.0, rel=0.06)
    assert e.ci_low < 800.0 < e.ci_high  # type: ignore[operator]
    # the wall-clock figure (tokens / first start to last end) is pulled off by the transients
    wall = 80 * TOKENS / (lv.end_s.max() - lv.start_s.min())  # type: ignore[union-attr]
    assert abs(wall / 800.0 - 1) > abs(e.value / 800.0 - 1)  # type: ignore[operator]


def test_throughput_interval_covers_the_truth_in_repeated_levels() -> None:
    rng = np.random.default_rng(4)
    hits = 0
    trials = 60
    for i in range(trials):
        lv = closed_loop(4, 48, rng)
        e = estimate(lv, "throughput", seed=i)
        hits += e.ci_low <= 400.0 <= e.ci_high  # type: ignore[operator]
    assert hits / trials >= 0.85


def test_batch_means_take_over_when_windows_vary_more_than_requests() -> None:
    # a long level whose server slows down halfway (drift): requests alone look steady within each
    # half, the windows see the change and widen the interval
    rng = np.random.default_rng(5)
    lv = closed_loop(4, 400, rng, mean_s=0.5)
    half = lv.start_s > np.median(lv.start_s)  # type: ignore[operator]
    start, end = lv.start_s.copy(), lv.end_s.copy()  # type: ignore[union-attr]
    t_half = np.median(start)
    stretch = lambda t: np.where(t > t_half, t_half + (t - t_half) * 1.5, t)  # noqa: E731
    drift = LevelRequests(**{**lv.__dict__, "start_s": stretch(start), "end_s": stretch(end),
                             "e2e_ms": (stretch(end) - stretch(start)) * 1e3, "_steady": []})
    assert half.any()
    e = estimate(drift, "throughput")
    assert "batch-means" in e.method
    plain = estimate(lv, "throughput")
    assert e.half_width_pct > plain.half_width_pct  # type: ignore[operator]


def test_a_five_request_level_is_insufficient() -> None:
    lv = closed_loop(1, 5, np.random.default_rng(6))
    for m in ("throughput", "per_request_tok_s", "tpot_p50"):
        e = estimate(lv, m)
        assert e.value is not None and not e.estimable, m
        assert "at least 8" in (e.note or ""), (m, e.note)
    assert iv.ratio(estimate(lv, "throughput"), estimate(lv, "throughput")) is None


def test_missing_columns_are_missing_not_zero() -> None:
    lv = LevelRequests(index=0, concurrency=4, ok=np.ones(20, bool), output_tokens=np.full(20, 10.0))
    for m in METRICS:
        e = estimate(lv, m)
        if m == "error_rate":
            assert e.value == 0.0
            continue
        assert e.value is None and e.note, m
    assert estimate(lv, "accept_len").note == "the source has no server samples"


def write_record(path: Path, lines: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def req(i: int, level: int, idx: int, start: float, dur: float, *, ok: bool = True) -> dict:
    return {
        "type": "request", "id": i, "level": level, "level_index": idx, "warmup": False, "ok": ok,
        "start_s": start, "end_s": start + dur, "ttft_ms": 20.0 if ok else None, "tpot_ms": 5.0 if ok else None,
        "e2e_ms": dur * 1e3 if ok else None, "itl_ms_p50": 5.0 if ok else None,
        "output_tokens": 50 if ok else 0, "tokens_estimated": False, "prompt_tokens": 130, "chunks": 20,
        "error": None if ok else {"kind": "http", "detail": "HTTP 500", "status": 500},
    }


def test_a_specload_record_as_a_run(tmp_path: Path) -> None:
    p = tmp_path / "eagle-run.jsonl"
    lines: list[dict] = [
        {"type": "run", "version": 1, "specload": "0.1.0", "started_at": "x", "target": "http://h:1",
         "api": "chat", "model": "m", "max_tokens": 50, "ignore_eos": True, "prompt_tokens": 128,
         "prompt_source": "synthetic", "rate": None, "label": "eagle3", "command": "specload run --label eagle3"},
        {"type": "event", "t_s": 0.0, "kind": "level", "value": {"index": 0, "concurrency": 1, "manual": False}},
        {"type": "request", "id": 99, "level": 1, "level_index": -1, "warmup": True, "ok": True, "start_s": 0.0},
    ]
    lines += [req(i, 1, 0, 0.1 + i * 0.3, 0.29) for i in range(10)]
    lines += [{"type": "server", "t_s": 1.0, "source": "metrics", "accept_len": 2.5},
              {"type": "client", "t_s": 2.0, "cpu_pct": 5.0, "loop_lag_ms": 1.0, "saturated": True, "level": 1}]
    lines += [{"type": "event", "t_s": 3.2, "kind": "level", "value": {"index": 1, "concurrency": 2, "manual": True}}]
    lines += [req(10 + i, 2, 1, 3.2 + (i // 2) * 0.3, 0.29, ok=i != 3) for i in range(6)]
    write_record(p, lines)  # cut short: no level lines, no end line
    run = load_run(str(p))
    assert run.label == "eagle3" and run.kind == "specload" and run.truncated
    assert run.description.command == "specload run --label eagle3"
    assert run.description.request_shape()["max_tokens"] == 50
    assert [(lv.concurrency, lv.n, lv.manual) for lv in run.levels] == [(1, 10, False), (2, 6, True)]
    lv = run.levels[1]
    assert lv.n_ok == 5 and math.isnan(lv.ttft_ms[3]) and lv.error_kind[3] == "http"  # type: ignore[index]
    assert any("recomputed" in n for n in run.notes)
    assert not run.lacks("server") and not run.lacks("accept_len") and not run.lacks("ttft_ms")
    assert run.during("client", run.levels[0]) and not run.during("client", run.levels[1])
    assert run.during("crashes", run.levels[0]) == ()  # could have had crashes, had none
    assert load_run(str(p), label="other").label == "other"
    (tmp_path / "plain.jsonl").write_bytes(p.read_bytes().replace(b'"label":"eagle3",', b""))
    assert load_run(str(tmp_path / "plain.jsonl")).label == "plain"  # the file name otherwise


def test_other_readers_plug_in_and_unknown_files_fail_in_one_line(tmp_path: Path) -> None:
    from specload.record.runs import RunReadError

    odd = tmp_path / "peer.csv"
    odd.write_text("tool-x,1\n")
    with pytest.raises(RunReadError, match="not a specload record"):
        load_run(str(odd))

    def read(path: str, label: str | None) -> Run:
        return Run(label or "x", path, "tool-x", RunDescription(tool="tool x"), (), Timeline())

    register_reader("tool-x", lambda path, head: head.startswith(b"tool-x,"), read)
    run = load_run(str(odd))
    assert run.kind == "tool-x" and run.lacks("server") and run.lacks("events")


@pytest.mark.parametrize("fast", [True, False])
def test_every_metric_of_a_level_with_no_finished_request_is_missing_not_an_error(fast: bool) -> None:
    # issue 22: the live judge asks for the running level's figure on the TUI's first frame, before
    # any request of the level ended; the throughput's wall-clock fallback took np.nanmax of nothing
    # and ended `specload tui --baseline` / `--target-ci` at start ("engine failed")
    from specload.stats.level_metrics import level_from_records

    empty = level_from_records([], index=0, concurrency=1, t0_ns=0, running=True)
    server = (np.array([1.0]), np.array([2.0]))
    for metric in METRICS:
        est = estimate(empty, metric, fast=fast, server=server)
        assert est.value is None or math.isnan(est.value), (metric, est)
        assert not est.estimable, (metric, est)
