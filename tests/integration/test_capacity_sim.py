"""The capacity search driving the real runner against the simulator (real HTTP on 127.0.0.1).

The simulator's pinned timing (``--ttft-ms``/``--itl-ms``) makes every request take the same time
whatever the batch, and ``--max-batch B`` lets only B sequences decode at once (the rest queue), so
throughput grows in proportion to concurrency up to B and not at all beyond: the knee is exactly B.
"""

from __future__ import annotations

import asyncio

from specload.engine.api import CHAT, RequestOptions
from specload.engine.capacity import SearchDriver
from specload.engine.client import StreamingClient
from specload.engine.load import LoadPlan
from specload.engine.prompts import PromptSource
from specload.engine.runner import Runner
from specload.engine.search import CapacitySearch, SearchSettings
from specload.records import RequestRecord, RunEvent
from specload.stats.levels import LevelSummary


async def run_search(url: str, driver: SearchDriver, *, max_tokens: int = 20) -> tuple[list[LevelSummary], list[dict]]:
    levels: list[LevelSummary] = []
    records: list[RequestRecord] = []
    events: list[RunEvent] = []

    def on_record(rec: RequestRecord) -> None:
        records.append(rec)
        driver.on_record(rec)

    client = StreamingClient(url, CHAT, RequestOptions(model=None, max_tokens=max_tokens, ignore_eos=True))
    runner = Runner(client, PromptSource(["hello"]), LoadPlan(levels=(), max_requests=3000, max_duration_s=90),
                    on_record=on_record, on_event=events.append, on_level=levels.append, source=driver)
    await client.start()
    try:
        await asyncio.wait_for(runner.run(), 120)
    finally:
        await client.close()
    return levels, [e.value for e in events if e.kind == "level"]


async def test_the_search_finds_the_batch_limit_as_the_knee(sim) -> None:
    server = await sim(ttft_ms=20, itl_ms=5, spec_tokens=0, max_batch=4)
    log: list[dict] = []
    driver = SearchDriver(CapacitySearch(SearchSettings(max_probes=8)), None, on_event=log.append)
    levels, level_events = await run_search(server.url, driver)
    r = driver.result
    assert r is not None and r.best is not None, r
    assert r.best.value == 4 and r.knee.value == 4, r.message
    assert r.limited_by == "saturation"
    # each probe is an ordinary level of the run, in the order probed
    probed = [e["value"] for e in log if e["phase"] == "probe"]
    assert [s.concurrency for s in levels] == [int(v) for v in probed]
    assert all(e.get("probe") for e in level_events)
    phases = [e["phase"] for e in log]
    assert phases[0] == "start" and phases[-1] == "result"
