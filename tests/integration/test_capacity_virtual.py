"""The capacity search through a whole session against the simulator, in virtual time.

The simulator and the session share one process and one event loop whose clock jumps to the next
timer (``specload.sim.virtual_time``), so the timings are the simulator's schedule exactly, whatever
else the machine is doing: the search finds what the settings imply, not what the machine's load
allows, and a search of minutes of simulated load takes seconds.

What the settings imply (``sim/model.py``; step jitter off, no prefill cost, no speculation, every
request the same length):

- A decode step of b sequences takes ``step_ms * (1 + step_slope * (b - 1))`` and gives each one
  token. The C streams of a closed loop start together and stay in lockstep, so each request's TPOT
  is the step time at batch C, and throughput is C tokens per step: C / (1 + slope (C - 1)) per
  step_ms, up to ``max_batch`` B, beyond which requests queue and throughput stays flat.
- Knee: the search reads it as the lowest C reaching 95 % of the plateau. With slope 0.03 and B = 6,
  C = 5 reaches 5 / 1.12 / (6 / 1.15) = 86 %, C = 6 all of it: the knee is 6.
- Objectives: ``tpot_p50<=L`` holds up to the largest C with step_ms (1 + slope (C - 1)) <= L. For
  step 20 ms, slope 0.1 and L = 45 ms: C = 13 (44 ms), C = 14 takes 46 ms.
- Rate: open loop with pinned timing (TTFT 20 ms, 19 steps of 5 ms: 115 ms a request) and B = 4
  serves at most 4 / 0.115 = 34.8 requests/s; beyond, requests queue. The knee (95 % of that) lies
  at 33 req/s; the search, at 10 % resolution, must land within 10 % of the capacity.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from specload.record.reader import read_record
from specload.session import Session, SessionResult
from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from specload.sim.virtual_time import LoopClock, run_virtual
from specload.stats.slo import parse_slo
from tests.conftest import make_config

BATCH = {"prefill_base_ms": 0.0, "prefill_per_token_ms": 0.0, "spec_tokens": 0, "step_jitter": 0.0,
         "prefill_jitter": 0.0, "eos_prob": 0.0}


def virtual_search(*, sim: dict, start: int = 2, slo: str | None = None, max_tokens: int = 20,
                   rate: float | None = None, record: Path | None = None, **capacity: object) -> SessionResult:
    async def main() -> SessionResult:
        server = SimServer(SimConfig(**{"quiet": True, "seed": 1, **sim}))
        url = await server.start()
        try:
            cfg = make_config(url, concurrency=(start,), rate=rate, max_duration_s=3600,
                              max_tokens=max_tokens, continuous_usage=True, prompt="hi",
                              path=str(record) if record else None, slo=parse_slo(slo) if slo else None,
                              find_max=True, **capacity)
            return await Session(cfg, clock=LoopClock(asyncio.get_running_loop())).run()
        finally:
            await server.stop()

    return run_virtual(main())


@pytest.mark.slow
def test_the_knee_is_the_batch_limit(tmp_path: Path) -> None:
    rec = tmp_path / "knee.jsonl"
    result = virtual_search(sim={**BATCH, "step_ms": 10, "step_slope": 0.03, "max_batch": 6}, record=rec)
    s = result.search
    assert result.reason == "completed" and s is not None
    assert s.knee.reached and s.knee.value == 6 and s.knee.below == 5, s.message
    assert s.best is not None and s.best.value == 6 and s.limited_by == "saturation"
    # at the knee: a round of 20 tokens is a free first token (no prefill cost, nothing decoding yet)
    # and 19 steps of 11.5 ms, 6 streams at once
    assert s.best.throughput.value == pytest.approx(6 * 20 / (19 * 0.0115), rel=0.02)
    # every probe is a level of the record, in the order probed; the record ends with the result
    data = read_record(rec)
    assert [lv["concurrency"] for lv in data.levels] == [p.value for p in s.probes]
    kinds = [e["value"]["phase"] for e in data.events if e.get("kind") == "search"]
    assert kinds[0] == "start" and kinds[-1] == "result" and kinds.count("probe") == len(s.probes)


def test_the_objective_limit_is_what_the_step_time_implies() -> None:
    result = virtual_search(sim={**BATCH, "step_ms": 20, "step_slope": 0.1, "max_batch": 64},
                            slo="tpot_p50<=45ms", max_tokens=16, start=4)
    s = result.search
    assert s is not None and s.best is not None, s
    assert s.best.value == 13 and s.bracket == (13, 14), s.message
    assert s.limited_by == "objectives" and not s.knee.reached
    levels = {lv.concurrency: lv for lv in result.levels}
    assert levels[13].goodput.verdict == "met" and levels[14].goodput.verdict == "missed"
    tpot13 = levels[13].goodput.objectives[0].value_ms.value
    tpot14 = levels[14].goodput.objectives[0].value_ms.value
    assert tpot13 == pytest.approx(44.0, rel=0.01) and tpot14 == pytest.approx(46.0, rel=0.01)
    # goodput at the best point: every request good, 13 streams of 16 tokens in 15 steps of 44 ms
    assert s.best.goodput_tok_s.value == pytest.approx(13 * 16 / (15 * 0.044), rel=0.03)


@pytest.mark.slow
def test_a_p99_objective_gets_the_requests_it_needs() -> None:
    # a p99 objective can only be confirmed by about 381 steady-state requests: probes are that big
    result = virtual_search(sim={**BATCH, "step_ms": 2, "step_slope": 0.1, "max_batch": 64},
                            slo="tpot_p99<=4.5ms", max_tokens=8, start=8)
    s = result.search
    assert s is not None and s.best is not None, s
    assert all(p.requests >= 381 for p in s.probes)
    # at 2 ms a step and 8 tokens a request the streams do not stay in lockstep at high C (arrivals
    # in one instant are admitted over two steps), so the limit is near, not exactly at, 13
    assert 11 <= s.best.value <= 13, s.message
    levels = {lv.concurrency: lv for lv in result.levels}
    assert levels[s.best.value].goodput.verdict == "met"
    assert levels[s.best.value].goodput.steady >= 381


@pytest.mark.slow
def test_the_rate_search_brackets_the_servers_capacity() -> None:
    result = virtual_search(sim={"ttft_ms": 20, "itl_ms": 5, "spec_tokens": 0, "max_batch": 4, "eos_prob": 0.0},
                            rate=4.0, start=64)
    s = result.search
    assert s is not None and s.axis == "rate" and s.knee.reached, s
    capacity_req_s = 4 / 0.115
    assert 0.9 * capacity_req_s <= s.knee.value <= 1.1 * capacity_req_s, s.message
    assert s.best is not None and s.best.value <= capacity_req_s
    assert s.best.in_flight is not None and s.best.in_flight > 3  # the concurrency the best rate held
    assert [p.value for p in s.probes][:4] == [4, 8, 16, 32]


def test_max_probes_and_stop_keep_what_was_confirmed() -> None:
    result = virtual_search(sim={**BATCH, "step_ms": 10, "step_slope": 0.03, "max_batch": 64}, max_probes=3)
    s = result.search
    assert s is not None and s.reason == "max probes"
    assert [p.value for p in s.probes] == [2, 4, 8] and s.best.value == 8
    assert "ended early" in s.message or s.bracket[1] is None


def test_a_level_table_of_a_plain_ramp_gets_goodput() -> None:
    async def main() -> SessionResult:
        server = SimServer(SimConfig(quiet=True, seed=1, **BATCH, step_ms=10, step_slope=0.1, max_batch=64))
        url = await server.start()
        try:
            cfg = make_config(url, concurrency=(2, 16), requests_per_level=64, max_tokens=16,
                              prompt="hi", slo=parse_slo("tpot_p50<=20ms,e2e<=2s"))
            return await Session(cfg, clock=LoopClock(asyncio.get_running_loop())).run()
        finally:
            await server.stop()

    result = run_virtual(main())
    assert result.search is None
    a, b = result.levels
    # C=2: steps of 11 ms; C=16: 25 ms, over the 20 ms p50 limit
    assert a.goodput.verdict == "met" and b.goodput.verdict == "missed"
    assert [o.name for o in b.goodput.objectives] == ["tpot_p50", "attainment"]
    assert dataclasses.asdict(a.goodput)["slo"] == "tpot_p50<=20ms,e2e<=2s,attainment>=90%"


def test_a_server_that_goes_away_mid_search_ends_it_without_a_best_point() -> None:
    async def main() -> SessionResult:
        server = SimServer(SimConfig(quiet=True, seed=1, **BATCH, step_ms=10, step_slope=0.03, max_batch=64))
        url = await server.start()
        cfg = make_config(url, concurrency=(2,), max_duration_s=3600, max_tokens=20, prompt="hi", find_max=True)
        session = Session(cfg, clock=LoopClock(asyncio.get_running_loop()))

        async def kill_when_probing_eight() -> None:
            while not (session.capacity and session.capacity.driver and session.capacity.driver.search.current
                       and session.capacity.driver.search.current.value == 8):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # mid-probe
            await server.stop()

        killer = asyncio.ensure_future(kill_when_probing_eight())
        try:
            return await session.run()
        finally:
            killer.cancel()
            await server.stop()

    result = run_virtual(main())
    s = result.search
    assert s is not None and s.reason == "crashed" and s.best is None, s
    assert "went down" in s.message and "no best point" in s.message
    assert [p.value for p in s.probes] == [2, 4]  # C=8 was cut short: not used


def test_report_judges_a_record_against_objectives_as_the_run_would_have(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from specload.report.report import report_command

    rec = tmp_path / "ramp.jsonl"
    slo = "tpot_p50<=20ms,e2e<=2s"

    async def main() -> SessionResult:
        server = SimServer(SimConfig(quiet=True, seed=1, **BATCH, step_ms=10, step_slope=0.1, max_batch=64))
        url = await server.start()
        try:
            cfg = make_config(url, concurrency=(2, 16), requests_per_level=64, max_tokens=16,
                              prompt="hi", slo=parse_slo(slo), path=str(rec))
            return await Session(cfg, clock=LoopClock(asyncio.get_running_loop())).run()
        finally:
            await server.stop()

    live = run_virtual(main())
    out = CliRunner().invoke(report_command, [str(rec), "--slo", slo, "--json"])
    assert out.exit_code == 0, out.output
    import orjson

    judged = [lv["goodput"] for lv in orjson.loads(out.output)["levels"]]
    # the same requests, the same objectives: the same verdicts and counts as the run itself gave
    assert [g["verdict"] for g in judged] == [lv.goodput.verdict for lv in live.levels] == ["met", "missed"]
    assert [g["good"] for g in judged] == [lv.goodput.good for lv in live.levels]
    assert [g["steady"] for g in judged] == [lv.goodput.steady for lv in live.levels]
    # a stricter objective after the fact
    strict = CliRunner().invoke(report_command, [str(rec), "--slo", "tpot_p50<=5ms", "--json"])
    assert [lv["goodput"]["verdict"] for lv in orjson.loads(strict.output)["levels"]] == ["missed", "missed"]
    bad = CliRunner().invoke(report_command, [str(rec), "--slo", "itl_p50<=5ms"])
    assert bad.exit_code == 2 and "per-token gaps" in bad.output
