"""Goodput and objective verdicts of one level, from made-up request records with known figures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specload.datatypes import ErrorKind, RequestRecord
from specload.stats.goodput import LevelRequestColumns, evaluate_level
from specload.stats.slo import MET, MISSED, UNDECIDED, LevelGoodput, parse_slo

MS = 1_000_000


def _record(i: int, start_ms: float, ttft_ms: float, e2e_ms: float, tokens: int, *,
            error: ErrorKind | None = None, gaps_ms: list[float] | None = None) -> RequestRecord:
    if gaps_ms is None:
        gaps_ms = [(e2e_ms - ttft_ms) / (tokens - 1)] * (tokens - 1)
    offs = [ttft_ms]
    for g in gaps_ms:
        offs.append(offs[-1] + g)
    ok = error is None
    return RequestRecord(
        request_id=i, level=2, level_index=0, warmup=False, start_ns=int(start_ms * MS),
        end_ns=int((start_ms + (offs[-1] if ok else e2e_ms)) * MS),
        ttft_ns=int(ttft_ms * MS) if ok else None, e2e_ns=int(offs[-1] * MS) if ok else None,
        output_tokens=len(offs) if ok else 0, tokens_estimated=False, prompt_tokens=10,
        chunks=len(offs) if ok else 0, chunk_offsets_ns=tuple(int(o * MS) for o in offs) if ok else (),
        chunk_tokens=tuple(1 for _ in offs) if ok else None, error_kind=error,
    )


def closed_loop(c: int, n: int, ttft: Callable[[int], float], *, e2e_ms: float = 1000.0, tokens: int = 11,
                error: Callable[[int], ErrorKind | None] = lambda i: None,
                gaps: Callable[[int], list[float] | None] = lambda i: None) -> list[RequestRecord]:
    """n requests on c streams, each stream sending the next as its last one ends."""
    free = [0.0] * c
    out = []
    for i in range(n):
        s = min(range(c), key=lambda k: free[k])
        start = free[s]
        t = ttft(i)
        out.append(_record(i, start, t, e2e_ms, tokens, error=error(i), gaps_ms=gaps(i)))
        free[s] = start + e2e_ms + 0.001
    return out


def evaluate(spec: str | None, records: list[RequestRecord], c: int = 2):
    cols = LevelRequestColumns(0, c, parse_slo(spec) if spec else None)
    for r in records:
        cols.add(r)
    return evaluate_level(cols)


def test_a_level_that_meets_its_objectives() -> None:
    ev = evaluate("ttft_p90<=150ms,e2e_p50<=2s", closed_loop(2, 120, lambda i: 100.0))
    g = ev.goodput
    assert g is not None and g.verdict == MET
    assert [o.verdict for o in g.objectives] == [MET, MET]
    assert g.objectives[0].value_ms.value == pytest.approx(100.0)
    # 2 streams, 1 s per request, 11 tokens: 2 req/s, 22 tok/s, every steady request good
    assert ev.throughput.value == pytest.approx(22.0, rel=0.01)
    assert g.req_s.value == pytest.approx(2.0, rel=0.01)
    assert g.tok_s.value == pytest.approx(22.0, rel=0.01)
    assert g.good == g.steady and g.steady > 100  # fill and drain excluded
    assert g.good_share.value == 1.0 and g.good_share.lo > 0.96


def test_a_level_that_misses_and_its_goodput_counts_only_good_requests() -> None:
    # every third request has a slow first token: 2/3 meet 150 ms, far below the 90 % of a p90
    ev = evaluate("ttft_p90<=150ms", closed_loop(2, 150, lambda i: 400.0 if i % 3 == 0 else 100.0))
    g = ev.goodput
    assert g.verdict == MISSED and g.objectives[0].verdict == MISSED
    assert g.good_share.value == pytest.approx(2 / 3, abs=0.03)
    assert g.req_s.value == pytest.approx(2.0 * g.good_share.value, rel=0.05)
    assert g.objectives[0].value_ms.value == pytest.approx(400.0)


def test_a_borderline_level_is_undecided() -> None:
    # 92 % meet the limit of a p90 objective: true, but 60 requests cannot confirm it
    ev = evaluate("ttft_p90<=150ms", closed_loop(2, 62, lambda i: 400.0 if i % 12 == 5 else 100.0))
    assert ev.goodput.verdict == UNDECIDED
    share = ev.goodput.objectives[0].share
    assert share.lo < 0.90 < share.hi


def test_a_p99_needs_hundreds_of_requests_to_be_met() -> None:
    few = evaluate("ttft_p99<=150ms", closed_loop(2, 100, lambda i: 100.0))
    assert few.goodput.verdict == UNDECIDED  # 100 perfect requests cannot show 99 %
    many = evaluate("ttft_p99<=150ms", closed_loop(2, 400, lambda i: 100.0))
    assert many.goodput.verdict == MET


def test_failed_requests_are_never_good_and_cancelled_ones_not_counted() -> None:
    recs = closed_loop(2, 100, lambda i: 100.0, error=lambda i: ErrorKind.HTTP if i % 4 == 0 else None)
    g = evaluate("e2e<=5s", recs).goodput
    assert g.good_share.value == pytest.approx(0.75, abs=0.03)
    assert g.verdict == MISSED  # 75 % < the default attainment of 90 %
    cancelled = closed_loop(2, 100, lambda i: 100.0, error=lambda i: ErrorKind.CANCELLED if i >= 90 else None)
    g2 = evaluate("e2e<=5s", cancelled).goodput
    assert g2.counted == 90
    assert g2.good_share.value == 1.0


def test_per_request_objectives_and_attainment() -> None:
    # TPOT 90 ms in every request; a quarter of them also have one 300 ms gap (ITL per request: the worst)
    def gaps(i: int) -> list[float]:
        return [300.0] + [600.0 / 9] * 9 if i % 4 == 0 else [90.0] * 10

    recs = closed_loop(2, 120, lambda i: 100.0, gaps=gaps)
    g = evaluate("itl<=200ms,tpot<=100ms,attainment>=70%", recs).goodput
    (att,) = g.objectives
    assert att.name == "attainment" and att.target == pytest.approx(0.70)
    assert att.share.value == pytest.approx(0.75, abs=0.03)
    assert g.verdict in (MET, UNDECIDED)
    g90 = evaluate("itl<=200ms,tpot<=100ms", recs).goodput
    assert g90.verdict == MISSED


def test_itl_percentile_pools_tokens() -> None:
    # one gap in ten is 300 ms, the rest 50 ms: 90 % of tokens within 100 ms
    recs = closed_loop(2, 80, lambda i: 50.0, gaps=lambda i: [50.0] * 9 + [300.0])
    g = evaluate("itl_p50<=100ms,itl_p99<=100ms", recs).goodput
    p50, p99 = g.objectives
    assert p50.share.value == pytest.approx(0.9, abs=0.01)
    assert p50.verdict == MET and p99.verdict == MISSED
    assert p50.value_ms.value == pytest.approx(50.0, rel=0.01)


def test_a_level_too_short_for_steady_state_is_undecided() -> None:
    g = evaluate("ttft_p50<=1s", closed_loop(8, 8, lambda i: 100.0), c=8).goodput
    assert g.verdict == UNDECIDED and g.steady == 0
    assert "steady-state" in g.note


def test_without_objectives_only_throughput_is_evaluated() -> None:
    ev = evaluate(None, closed_loop(2, 40, lambda i: 100.0))
    assert ev.goodput is None
    assert ev.throughput.value == pytest.approx(22.0, rel=0.01)
    assert ev.throughput.lo is not None and ev.throughput.lo <= ev.throughput.value <= ev.throughput.hi
    assert ev.in_flight == pytest.approx(2.0, rel=0.01)


def test_record_round_trip() -> None:
    g = evaluate("ttft_p90<=150ms,e2e<=2s", closed_loop(2, 60, lambda i: 100.0)).goodput
    back = LevelGoodput.from_record(g.as_record())
    assert back.as_record() == g.as_record()
    assert back.verdict == g.verdict and back.objectives[0].name == "ttft_p90"
    assert LevelGoodput.from_record(None) is None


def test_goodput_interval_is_at_least_as_wide_as_the_throughputs() -> None:
    # every request good: goodput is the throughput, and its interval no narrower than the throughput's
    recs = closed_loop(2, 120, lambda i: 100.0, e2e_ms=1000.0)
    ev = evaluate("e2e<=5s", recs)
    g, t = ev.goodput.tok_s, ev.throughput
    assert g.value == pytest.approx(t.value, rel=1e-6)
    assert g.lo <= t.value * (t.lo / t.value) + 1e-9 and g.hi >= t.value * (t.hi / t.value) - 1e-9
