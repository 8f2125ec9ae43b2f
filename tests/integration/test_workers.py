"""``--workers N``: N processes stream, one record comes out, nothing is counted twice or lost."""

from __future__ import annotations

import asyncio

from specload.config import RecordConfig, RequestConfig, RunConfig, TargetConfig, WatchConfig
from specload.engine.load import build_plan
from specload.record.reader import read_record
from specload.session import Session


def config(url: str, record: str, *, workers: int, levels=(2, 6), n: int = 12, max_tokens: int = 20) -> RunConfig:
    return RunConfig(
        target=TargetConfig(url=url, api="chat"),
        plan=build_plan(levels, requests_per_level=n, duration_per_level=None, warmup_requests=2, drain=True),
        request=RequestConfig(max_tokens=max_tokens, ignore_eos=True),
        watch=WatchConfig(health=False, metrics_url="off"),
        record=RecordConfig(path=record),
        workers=workers,
    )


async def test_two_workers_merge_into_one_record(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=3, spec_tokens=2, accept_rate=0.6)
    rec = tmp_path / "w.jsonl"
    result = await asyncio.wait_for(Session(config(server.url, str(rec), workers=2)).run(), 60)
    assert result.reason == "completed", result
    data = read_record(str(rec))
    ids = [r["id"] for r in data.requests]
    assert len(ids) == len(set(ids)) == 2 + 12 + 12  # each request once
    assert server.stats.requests == len(ids)  # and each request sent once
    assert sum(r["output_tokens"] for r in data.requests) == server.stats.completion_tokens_sent
    assert all(r["ok"] for r in data.requests)
    assert [lv["concurrency"] for lv in data.levels] == [2, 6]
    assert [lv["requests"] for lv in data.levels] == [12, 12]
    assert data.end["requests"] == 24 and data.end["ok"] == 24
    # the level's tokens are the sum of its requests' tokens, whichever worker sent them
    for lv in data.levels:
        toks = sum(r["output_tokens"] for r in data.requests if r["level_index"] == lv["level_index"])
        assert lv["output_tokens"] == toks


async def test_one_and_two_workers_write_the_same_record_structure(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=3, spec_tokens=0)
    shapes = []
    for workers in (1, 2):
        rec = tmp_path / f"w{workers}.jsonl"
        await asyncio.wait_for(Session(config(server.url, str(rec), workers=workers, levels=(3,), n=6)).run(), 60)
        data = read_record(str(rec))
        shapes.append((sorted(data.requests[0]), sorted(data.levels[0]), len(data.requests)))
    assert shapes[0] == shapes[1]


async def test_interrupt_with_workers_records_in_flight_as_cancelled(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=30, spec_tokens=0)
    rec = tmp_path / "cut.jsonl"
    session = Session(config(server.url, str(rec), workers=2, levels=(4,), n=10_000, max_tokens=400))
    task = asyncio.ensure_future(session.run())
    deadline = asyncio.get_running_loop().time() + 30
    while session.runner is None or session.runner.in_flight < 4:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    session.interrupt()
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "interrupted"
    data = read_record(str(rec))
    cancelled = [r for r in data.requests if (r["error"] or {}).get("kind") == "cancelled"]
    assert len(cancelled) == 4
    assert data.end["reason"] == "interrupted"
