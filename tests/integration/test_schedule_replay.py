"""Replaying a recorded schedule, repeats and extended levels: the runner against the simulator in
virtual time (``specload.sim.virtual_time``), so "pause at 1.5 s" means exactly that."""

from __future__ import annotations

import asyncio

from specload.datatypes import RequestRecord, RunEvent
from specload.engine.prompts import PromptSource
from specload.engine.runner import Runner
from specload.plan import LoadPlan, build_plan, repeat_levels
from specload.record.reader import RecordData
from specload.record.schedule import schedule_from_record
from specload.record.schema import event_line, request_line
from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from specload.sim.virtual_time import LoopClock, run_virtual
from tests.conftest import make_client


async def run_plan(plan: LoadPlan, *, sim: dict, script=None, stay_open: bool = False,
                   extend=None) -> tuple[list[RunEvent], list[RequestRecord], int]:
    """Run ``plan`` against a simulator; ``script(runner)``: a coroutine driving the runner's controls as
    a person at the TUI would."""
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    server = SimServer(SimConfig(quiet=True, seed=1, **sim))
    url = await server.start()
    events: list[RunEvent] = []
    records: list[RequestRecord] = []
    client = make_client(url, max_tokens=16, ignore_eos=True, clock=clock)
    runner = Runner(client, PromptSource(["hello"]), plan, clock=clock, on_record=records.append,
                    on_event=events.append, stay_open=stay_open, extend=extend)
    t0 = clock.now_ns()
    await client.start()
    try:
        driver = asyncio.ensure_future(script(runner)) if script else None
        await asyncio.wait_for(runner.run(), 600)
        if driver is not None:
            await driver
    finally:
        await client.close()
        await server.stop()
    return events, records, t0


def as_record(events: list[RunEvent], records: list[RequestRecord], t0: int, header: dict) -> RecordData:
    return RecordData(run={"type": "run", **header}, requests=[request_line(r, t0) for r in records],
                      events=[event_line(e, t0) for e in events],
                      end={"type": "end", "elapsed_s": max((r.end_ns - t0) / 1e9 for r in records)})


def level_and_concurrency(events: list[RunEvent]) -> list[tuple[str, object]]:
    return [(e.kind, e.value) for e in events if e.kind in ("level", "concurrency")]


def test_a_tui_session_replays_headless_against_another_server() -> None:
    async def person(runner: Runner) -> None:
        # what a user did at the keyboard, at these seconds of the run
        await asyncio.sleep(0.5)
        runner.set_target(3)  # a manual level, held
        await asyncio.sleep(1.0)
        runner.pause()
        await asyncio.sleep(0.5)
        runner.resume()
        await asyncio.sleep(0.7)
        runner.set_target(5)
        await asyncio.sleep(0.8)
        runner.set_hold(False)  # back to the ramp: its next level
        await asyncio.sleep(2.5)
        runner.stop()

    async def main() -> tuple[list[RunEvent], list[RunEvent], RecordData]:
        tui = build_plan((1, 2), requests_per_level=None, duration_per_level=1.0, drain=False)
        events, records, t0 = await run_plan(tui, sim={"ttft_ms": 20, "itl_ms": 10, "spec_tokens": 0},
                                             script=person, stay_open=True)
        original = as_record(events, records, t0, {"drain": False, "warmup_requests": 0})
        plan = schedule_from_record(original)
        # against another server: twice as fast, with speculative decoding
        replayed, _, _ = await run_plan(plan, sim={"ttft_ms": 10, "itl_ms": 5, "spec_tokens": 3})
        return events, replayed, original

    events, replayed, original = run_virtual(main())
    levels = level_and_concurrency(events)
    assert [v["concurrency"] for k, v in levels if k == "level"] == [1, 3, 5, 2]  # type: ignore[index]
    assert [v["manual"] for k, v in levels if k == "level"] == [False, True, True, False]  # type: ignore[index]
    assert level_and_concurrency(replayed) == levels
    # the pause: one, in the second level, half a second long, at the same moment of its active time
    def pauses(evs: list[RunEvent]) -> list[tuple[float, float]]:
        p = [e.t_ns for e in evs if e.kind == "pause"]
        r = [e.t_ns for e in evs if e.kind == "resume"]
        lv = [e.t_ns for e in evs if e.kind == "level"]
        return [((a - lv[1]) / 1e9, (b - a) / 1e9) for a, b in zip(p, r, strict=True)]

    (at, length), = pauses(events)
    (at2, length2), = pauses(replayed)
    assert abs(at2 - at) < 0.02 and abs(length2 - length) < 0.02
    # each level lasted as long (active time), whatever the server's speed
    def spans(evs: list[RunEvent]) -> list[float]:
        lv = [e.t_ns for e in evs if e.kind == "level"]
        return [(b - a) / 1e9 for a, b in zip(lv, lv[1:], strict=False)]

    assert all(abs(a - b) < 0.05 for a, b in zip(spans(events), spans(replayed), strict=True))
    plan = schedule_from_record(original)
    assert [lv.concurrency for lv in plan.levels] == [1, 3, 5, 2] and not plan.drain_between_levels


def test_repeats_interleave_level_by_level_and_levels_can_be_extended() -> None:
    async def main() -> tuple[list[RunEvent], list[RequestRecord]]:
        plan = repeat_levels(build_plan((1, 2), requests_per_level=3, duration_per_level=None, drain=True), 2)
        asked: list[tuple[int, int]] = []

        def extend(level_index: int, started: int) -> int:
            asked.append((level_index, started))
            return 2 if level_index == 3 and started < 7 else 0  # the last level: two rounds more

        events, records, _ = await run_plan(plan, sim={"ttft_ms": 5, "itl_ms": 2, "spec_tokens": 0}, extend=extend)
        assert (3, 3) in asked and (3, 5) in asked and (3, 7) in asked
        return events, records

    events, records = run_virtual(main())
    lv = [e.value for e in events if e.kind == "level"]
    assert [(v["concurrency"], v.get("repeat", 0)) for v in lv] == [(1, 0), (1, 1), (2, 0), (2, 1)]  # type: ignore[index]
    per_level = [sum(1 for r in records if r.level_index == i) for i in range(4)]
    assert per_level == [3, 3, 3, 7]
