"""Live (per-second) statistics with an injected clock: what the dashboard's numbers mean."""

from __future__ import annotations

import pytest

from specload.clock import FakeClock
from specload.datatypes import RequestRecord
from specload.stats.live import LiveStats

NS = 1_000_000_000


def done(clock: FakeClock, *, e2e_s: float = 4.0, tokens: int = 100) -> RequestRecord:
    end = clock.now_ns()
    start = end - int(e2e_s * NS)
    return RequestRecord(
        request_id=0, level=4, level_index=0, warmup=False, start_ns=start, end_ns=end,
        ttft_ns=int(0.1 * NS), e2e_ns=int(e2e_s * NS), output_tokens=tokens, tokens_estimated=False,
        prompt_tokens=10, chunks=tokens,
    )


def test_requests_per_second_is_a_ten_second_mean_of_bursty_completions() -> None:
    # C=4 with 4 s requests started together: 4 requests end every 4 s, none in between. The last
    # second's count swings between 0 and 4; the 10 s mean is the true ~1 req/s.
    clock = FakeClock(start_ns=0)
    stats = LiveStats(clock)
    for burst in range(5):  # ends at 3.5, 7.5, 11.5, 15.5, 19.5 s
        clock.set_ns(int((3.5 + 4 * burst) * NS))
        for _ in range(4):
            stats.on_record(done(clock))
    clock.set_ns(20 * NS)
    snap = stats.snapshot()
    assert snap.req_s == 4.0  # second 19 holds a burst
    assert snap.req_s_avg10 == pytest.approx(12 / 10)  # seconds 10-19 hold three bursts
    clock.set_ns(21 * NS)
    snap = stats.snapshot()
    assert snap.req_s == 0.0
    assert snap.req_s_avg10 == pytest.approx(12 / 10)  # seconds 11-20: still three bursts
    assert snap.requests_total == snap.requests_ok == 20


def test_rates_before_ten_seconds_average_over_the_seconds_there_are() -> None:
    clock = FakeClock(start_ns=0)
    stats = LiveStats(clock)
    clock.set_ns(int(1.5 * NS))
    for _ in range(3):
        stats.on_record(done(clock, e2e_s=1.0))
    stats.on_tokens(clock.now_ns(), 300)
    clock.set_ns(3 * NS)
    snap = stats.snapshot()
    # seconds 0, 1 and 2 are complete: 3 requests and 300 tokens, all in second 1
    assert snap.req_s == 0.0 and snap.tok_s_series == (0.0, 300.0, 0.0)
    assert snap.req_s_avg10 == pytest.approx(1.0)
    assert snap.tok_s_avg10 == pytest.approx(100.0)
    assert snap.elapsed_s == pytest.approx(3.0)
