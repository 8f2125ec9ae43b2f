"""The --slo spec: parsing, one-line errors, and what a single request meets."""

from __future__ import annotations

import pytest

from specload.datatypes import ErrorKind, RequestRecord
from specload.stats.slo import Objective, SloError, parse_slo

MS = 1_000_000


def test_the_issue_example() -> None:
    spec = parse_slo("ttft_p99<=500ms,tpot_p50<=40ms,e2e_p99<=10s")
    assert spec.objectives == (
        Objective("ttft", 0.99, 500.0),
        Objective("tpot", 0.50, 40.0),
        Objective("e2e", 0.99, 10_000.0),
    )
    assert spec.per_request == ()
    assert spec.text() == "ttft_p99<=500ms,tpot_p50<=40ms,e2e_p99<=10s"
    assert spec.targets() == (("ttft_p99", 0.99), ("tpot_p50", 0.5), ("e2e_p99", 0.99))


def test_per_request_objectives_attainment_and_spelling() -> None:
    spec = parse_slo(" TTFT <= 0.5s , itl<=50ms, tpot_p90 < 40 ms, attainment>=95% ")
    assert [o.name for o in spec.objectives] == ["ttft", "itl", "tpot_p90"]
    assert spec.objectives[0].limit_ms == 500.0
    assert spec.attainment == pytest.approx(0.95)
    assert spec.text() == "ttft<=500ms,itl<=50ms,tpot_p90<=40ms,attainment>=95%"
    assert parse_slo("e2e<=2s").attainment == pytest.approx(0.90)  # the default
    assert parse_slo("e2e_p99.9<=2s").objectives[0].quantile == pytest.approx(0.999)


def test_minimum_requests_to_confirm() -> None:
    # Wilson's lower bound with every request meeting the limit is n / (n + 1.96^2)
    assert parse_slo("ttft_p99<=1s").min_requests() == 381
    assert parse_slo("ttft_p90<=1s").min_requests() == 35
    assert parse_slo("ttft_p50<=1s").min_requests() == 4
    assert parse_slo("ttft<=1s,attainment>=0.8").min_requests() == 16


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "is empty"),
        ("ttft_p99<=500", "needs a unit"),
        ("ttft_p99<=500us", "unknown unit"),
        ("latency_p99<=5s", "unknown metric"),
        ("ttft_p99>=5s", "ceilings"),
        ("ttft_p100<=5s", "between p0 and p100"),
        ("ttft_p99<=0ms", "positive"),
        ("ttft_p99 500ms", "expected METRIC"),
        ("ttft<=1s,ttft<=2s", "twice"),
        ("attainment>=95%", "no latency objective"),
        ("ttft_p99<=1s,attainment>=95%", "per-request objectives"),
        ("ttft<=1s,attainment>=120%", "between 0 and 100"),
        ("ttft<=1s,attainment<=95%", "is a floor"),
        ("ttft<=1s,attainment>=95ms", "is a share"),
    ],
)
def test_bad_specs_are_one_line_errors(spec: str, message: str) -> None:
    with pytest.raises(SloError) as e:
        parse_slo(spec)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def _rec(*, ttft_ms: float = 100, e2e_ms: float = 1000, tokens: int = 10, gaps_ms: list[float] | None = None,
         error: ErrorKind | None = None) -> RequestRecord:
    if gaps_ms is None:
        gaps_ms = [(e2e_ms - ttft_ms) / (tokens - 1)] * (tokens - 1)
    offs = [ttft_ms]
    for g in gaps_ms:
        offs.append(offs[-1] + g)
    return RequestRecord(
        request_id=0, level=1, level_index=0, warmup=False, start_ns=0, end_ns=int(offs[-1] * MS),
        ttft_ns=None if error else int(ttft_ms * MS), e2e_ns=None if error else int(offs[-1] * MS),
        output_tokens=0 if error else len(offs), tokens_estimated=False, prompt_tokens=5,
        chunks=0 if error else len(offs), chunk_offsets_ns=() if error else tuple(int(o * MS) for o in offs),
        chunk_tokens=None if error else tuple(1 for _ in offs), error_kind=error,
    )


def test_a_request_against_per_request_objectives() -> None:
    spec = parse_slo("ttft<=200ms,tpot<=120ms,itl<=150ms,e2e<=2s")
    fast = spec.request_values(_rec())
    assert fast.ttft_ms == pytest.approx(100) and fast.tpot_ms == pytest.approx(100)
    assert fast.good(spec)
    # the same mean TPOT, but one gap of 300 ms: the ITL objective (every token within 150 ms) is missed
    jerky = spec.request_values(_rec(gaps_ms=[75, 75, 75, 75, 75, 75, 75, 75, 300]))
    assert jerky.tpot_ms == pytest.approx(100)
    assert jerky.itl_max_ms == pytest.approx(300)
    assert not jerky.good(spec)
    assert [jerky.meets(o) for o in spec.objectives] == [True, True, False, True]
    slow_start = spec.request_values(_rec(ttft_ms=250, e2e_ms=1150))
    assert not slow_start.good(spec)


def test_failed_requests_meet_nothing_and_cancelled_ones_are_not_counted() -> None:
    spec = parse_slo("ttft<=10s")
    failed = spec.request_values(_rec(error=ErrorKind.HTTP))
    assert failed.failed and not failed.cancelled and not failed.good(spec)
    assert not failed.meets(spec.objectives[0])
    cancelled = spec.request_values(_rec(error=ErrorKind.CANCELLED))
    assert cancelled.cancelled and not cancelled.failed


def test_a_one_token_answer_cannot_miss_tpot_or_itl() -> None:
    spec = parse_slo("tpot<=1ms,itl<=1ms")
    one = spec.request_values(_rec(tokens=1, e2e_ms=100, gaps_ms=[]))
    assert one.tpot_ms is None and one.itl_max_ms is None
    assert one.good(spec)
