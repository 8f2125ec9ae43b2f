"""Fixed dashboard data for snapshot tests: a mid-run state that never changes between runs.

Everything is built from literals (no clock, no randomness), so the SVG snapshots are stable: the
elapsed time is the snapshot's ``elapsed_s``, the crash's "first seen" is relative to ``T0``.
"""

from __future__ import annotations

import dataclasses
import math

from specload.datatypes import CrashEvent, ServerSample
from specload.engine.runner import RunnerState
from specload.sources.static import StaticSource
from specload.stats import intervals as iv
from specload.stats.judgement import LevelJudgement
from specload.stats.levels import LevelSummary
from specload.stats.live import LatencyView, StatsSnapshot
from specload.stats.live_judge import LiveView

NS = 1_000_000_000
T0 = 1_000 * NS


def level(i: int, c: int, tput: float, ttft: float, tpot: float, errors: tuple = ()) -> LevelSummary:
    n = 5 * c
    failed = sum(k for _, k in errors)
    return LevelSummary(
        level_index=i, concurrency=c, requests=n, ok=n - failed, errors=errors, output_tokens=int(tput * 10),
        tokens_estimated=False, wall_s=10.0, throughput_tok_s=tput, per_request_tok_s=tput / c,
        req_s=n / 10.0, ttft_ms_avg=ttft * 1.1, ttft_ms_p50=ttft, ttft_ms_p99=ttft * 2.5,
        tpot_ms_p50=tpot, tpot_ms_p99=tpot * 1.8, itl_ms_p50=tpot, itl_ms_p99=tpot * 2,
        ttft_ms_p90=ttft * 1.6, ttft_ms_p95=ttft * 2.0, tpot_ms_p90=tpot * 1.3, tpot_ms_p95=tpot * 1.5,
        e2e_s_avg=(ttft + 255 * tpot) / 1000, e2e_s_p50=(ttft + 255 * tpot) / 1000,
        e2e_s_p99=(ttft * 2.5 + 255 * tpot * 1.8) / 1000,
        # the server's own figures over the level (speculative decoding, acceptance falling with C)
        accept_len=round(2.9 - 0.04 * c, 2), accept_rate=round(0.72 - 0.01 * c, 2),
        server_gen_tok_s=round(tput * 1.01, 1), server_source="metrics",
    )


LEVELS = (
    level(0, 1, 48.2, 21.0, 20.4),
    level(1, 2, 95.1, 22.5, 20.7),
    level(2, 4, 183.9, 25.1, 21.3),
    level(3, 8, 331.0, 31.8, 23.6),
    level(4, 16, 402.7, 58.3, 38.9, errors=(("timeout", 2),)),
)


def _wave(n: int, base: float, amp: float, period: float = 17.0) -> tuple[float, ...]:
    return tuple(round(base + amp * math.sin(i / period * 2 * math.pi) + i * base / (n * 2), 2) for i in range(n))


CRASH = CrashEvent(
    signature="a1b2c3d4",
    exception_type="AttributeError",
    message="'NoneType' object has no attribute 'draft_tokens'",
    innermost_frame="sim/model.py:212 in verify",
    processes=("TP0", "TP1"),
    count=3,
    first_seen_ns=T0 + 95 * NS,
    last_seen_ns=T0 + 101 * NS,
    excerpt=(
        "Traceback (most recent call last):\n"
        '  File "sim/scheduler.py", line 88, in step\n'
        "    out = self.model.verify(batch)\n"
        '  File "sim/model.py", line 212, in verify\n'
        "    n = req.draft.draft_tokens\n"
        "AttributeError: 'NoneType' object has no attribute 'draft_tokens'"
    ),
)


def mid_run_snapshot(with_crash: bool = True) -> StatsSnapshot:
    n = 120
    ttft = _wave(n, 30.0, 6.0)
    return StatsSnapshot(
        t_ns=T0 + 125 * NS,
        elapsed_s=125.0,
        tok_s_series=_wave(n, 300.0, 60.0),
        tok_s=402.0,
        tok_s_avg10=396.5,
        req_s=1.6,
        req_s_avg10=1.5,
        tokens_total=48_213,
        requests_total=212,
        requests_ok=210,
        requests_failed=2,
        ttft=LatencyView(ttft, tuple(v * 2.4 for v in ttft), 58.3, 145.7),
        tpot=LatencyView(_wave(n, 25.0, 3.0), _wave(n, 44.0, 5.0), 38.9, 70.0),
        e2e=LatencyView(_wave(n, 6000.0, 900.0), _wave(n, 11000.0, 1500.0), 9977.8, 18200.0),
        errors_by_kind=(("timeout", 2),),
        last_errors=("timeout: no response within 600 s", "timeout: no response within 600 s"),
        levels=LEVELS,
        server=ServerSample(
            t_ns=T0 + 124 * NS, source="log:sglang", running=16, queued=3, gen_tok_s=410.0,
            accept_len=2.41, accept_rate=0.47, token_usage=0.62,
        ),
        server_gen_tok_s_series=_wave(60, 310.0, 55.0),
        accept_len_series=_wave(60, 2.4, 0.3, 9.0),
        crashes=(CRASH,) if with_crash else (),
        health="up",
        client_cpu_pct=23.0,
        loop_lag_ms=1.4,
        client_saturated=False,
    )


RUNNER = RunnerState(
    state="ramping", target=16, in_flight=14, level_index=4, level_number=5, level_count=6,
    level_concurrency=16, level_done=52, level_total=80, level_unit="requests", paused=False, held=False,
    started=212,
)

LOG = [
    "[2025-01-01 10:00:01 TP0] Prefill batch. #new-seq: 4, #new-token: 512, #cached-token: 0",
    "[2025-01-01 10:00:02 TP0] Decode batch. #running-req: 16, #token: 4096, gen throughput (token/s): 410.2",
    "Traceback (most recent call last):",
    '  File "sim/model.py", line 212, in verify',
    "AttributeError: 'NoneType' object has no attribute 'draft_tokens'",
    "[2025-01-01 10:00:04 TP0] Decode batch. #running-req: 14, #token: 3900, gen throughput (token/s): 398.7",
]


def mid_run_source(with_crash: bool = True) -> StaticSource:
    return StaticSource(
        mid_run_snapshot(with_crash), RUNNER, state="ramping", url="http://127.0.0.1:30000",
        model="Qwen/Qwen2.5-7B-Instruct", api="chat", t0_ns=T0, log_lines=LOG if with_crash else LOG[:2],
    )


def idle_source() -> StaticSource:
    """Before the server answered: nothing measured yet."""
    empty = LatencyView((), (), None, None)
    snap = StatsSnapshot(
        t_ns=T0, elapsed_s=0.0, tok_s_series=(), tok_s=0.0, tok_s_avg10=0.0, req_s=0.0, req_s_avg10=0.0,
        tokens_total=0, requests_total=0, requests_ok=0, requests_failed=0, ttft=empty, tpot=empty, e2e=empty,
        errors_by_kind=(), last_errors=(), levels=(), server=None, server_gen_tok_s_series=(),
        accept_len_series=(), crashes=(), health="unknown", client_cpu_pct=None, loop_lag_ms=None,
        client_saturated=False,
    )
    return StaticSource(snap, None, state="waiting for server", url="http://127.0.0.1:30000", model=None,
                        api=None, t0_ns=T0)


# --baseline: each finished level judged against a baseline record, the running one so far
def _judged(s: LevelSummary, base: float, lo: float, hi: float, verdict: str, hw: float) -> LevelSummary:
    return dataclasses.replace(s, judged=LevelJudgement(
        metric="throughput", value=s.throughput_tok_s, ci_low=s.throughput_tok_s * (1 - hw / 100),
        ci_high=s.throughput_tok_s * (1 + hw / 100), half_width_pct=hw, baseline=base,
        ratio=s.throughput_tok_s / base, ratio_ci_low=lo, ratio_ci_high=hi, verdict=verdict, done="decided"))


BASELINE_LEVELS = (
    _judged(LEVELS[0], 30.1, 1.41, 1.83, "better", 6.2),
    _judged(LEVELS[1], 61.0, 1.38, 1.74, "better", 5.1),
    _judged(LEVELS[2], 150.3, 1.09, 1.36, "better", 4.4),
    _judged(LEVELS[3], 322.8, 0.93, 1.13, "insufficient", 3.9),
)


def baseline_source() -> StaticSource:
    snap = dataclasses.replace(mid_run_snapshot(with_crash=False), levels=BASELINE_LEVELS)
    live_est = iv.from_se(402.7, 0.03, 52, 51, "little")
    base_est = iv.from_se(455.0, 0.01, 80, 79, "little")
    ratio = iv.sequential_ratio(base_est, live_est, n_design=400)
    live = LiveView(4, 16, "throughput", live_est, base_est, ratio,
                    iv.decided(ratio, lower_is_better=False))
    return StaticSource(snap, RUNNER, state="ramping", url="http://127.0.0.1:30000",
                        model="Qwen/Qwen2.5-7B-Instruct", api="chat", t0_ns=T0, log_lines=LOG[:2], live=live)
