"""The client-saturation flag: a blocked event loop must be seen, flagged and recorded."""

from __future__ import annotations

import asyncio
import time

from specload.config import RecordConfig, RequestConfig, RunConfig, TargetConfig, WatchConfig
from specload.engine.load import build_plan
from specload.record.reader import read_record
from specload.session import Session
from specload.stats.client_load import ClientLoad, ClientLoadMonitor


def block_loop(seconds: float) -> None:
    # deliberately burns the event loop, as a saturated client's parsing would
    time.sleep(seconds)


async def test_monitor_flags_a_blocked_loop() -> None:
    samples: list[ClientLoad] = []
    mon = ClientLoadMonitor(interval_s=0.3, tick_s=0.02, on_sample=samples.append)
    task = asyncio.ensure_future(mon.run())
    try:
        deadline = time.monotonic() + 10
        while not samples:  # first, an idle interval: not saturated
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert not samples[0].saturated
        asyncio.get_running_loop().call_soon(block_loop, 0.25)
        while not any(s.saturated for s in samples):
            assert time.monotonic() < deadline, samples
            await asyncio.sleep(0.02)
    finally:
        mon.stop()
        await asyncio.wait_for(task, 5)
    flagged = next(s for s in samples if s.saturated)
    assert flagged.loop_lag_ms >= 200


async def test_session_records_and_announces_saturation_with_the_level(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=10, spec_tokens=0)
    rec = tmp_path / "sat.jsonl"
    cfg = RunConfig(
        target=TargetConfig(url=server.url, api="chat"),
        plan=build_plan((3,), requests_per_level=None, duration_per_level=2.5, drain=True),
        request=RequestConfig(max_tokens=20, ignore_eos=True),
        watch=WatchConfig(health=False, metrics_url="off"),
        record=RecordConfig(path=str(rec)),
    )
    heard: list[tuple[str, object]] = []
    session = Session(cfg, listener=lambda kind, payload: heard.append((kind, payload)))
    task = asyncio.ensure_future(session.run())
    deadline = time.monotonic() + 20
    while session.runner is None or session.runner.started < 3:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    block_loop(0.3)  # the client is stuck: every stream's timing in this second is client-bound
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "completed"
    sat = [p for k, p in heard if k == "saturated"]
    # announced with the level (its concurrency) and the lag that caused it
    assert any(level == 3 and load.loop_lag_ms >= 200 for load, level in sat), sat
    data = read_record(str(rec))
    flagged = [c for c in data.clients if c["saturated"] and c["loop_lag_ms"] >= 200]
    assert flagged and flagged[0]["level"] == 3
    assert any(not c["saturated"] for c in data.clients)
