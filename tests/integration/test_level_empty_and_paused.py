"""Levels that started no request, and a level paused for a long while, in virtual time (issue 11).

A level skipped while paused started nothing: it is in the run's table (TUI and headless) but not in
the record, which keeps measured levels. A 25 s pause inside a level once read 207 tok/s where the
live rate was 574-637: the level's throughput is now over its active time.
"""

from __future__ import annotations

import asyncio

import pytest

from specload.config import RunConfig
from specload.record.reader import read_record
from specload.session import Session
from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from specload.sim.virtual_time import LoopClock, run_virtual
from tests.waiting import until


def _run(tmp_path, script):
    path = tmp_path / "run.jsonl"

    async def main():
        server = SimServer(SimConfig(quiet=True, seed=1, spec_tokens=0))
        url = await server.start()
        try:
            cfg = RunConfig.of(url, api="chat", concurrency=(2, 4), duration_per_level_s=20.0, max_duration_s=3600,
                               max_tokens=32, ignore_eos=True, continuous_usage=True, path=str(path))
            session = Session(cfg, clock=LoopClock(asyncio.get_running_loop()), stay_open=True)
            driver = asyncio.ensure_future(script(session))
            result = await session.run()
            await driver
            return result
        finally:
            await server.stop()

    return run_virtual(main()), read_record(str(path))


def test_a_level_skipped_while_paused_is_in_the_table_not_in_the_record(tmp_path) -> None:
    async def script(session: Session) -> None:
        await until(lambda: session.runner is not None and session.runner.started >= 4)
        r = session.runner
        r.pause()
        r.next_level()  # C=4 opens paused: it will start nothing
        await until(lambda: r.snapshot().level_index == 1)
        r.next_level()
        await until(lambda: r.snapshot().state == "finished")
        r.stop("completed")

    result, data = _run(tmp_path, script)
    assert [(s.concurrency, s.requests) for s in result.levels][:2] == [(2, result.levels[0].requests), (4, 0)]
    assert result.levels[0].requests >= 4
    assert [d["concurrency"] for d in data.levels] == [2]  # the record keeps measured levels
    from specload.formatting import level_cells

    assert level_cells(result.levels[1])["tok/s"] == "-"


def test_a_long_pause_inside_a_level_does_not_count_in_its_throughput(tmp_path) -> None:
    async def script(session: Session) -> None:
        clock = session.clock
        await until(lambda: session.runner is not None and session.runner.started >= 2)
        r = session.runner
        t = clock.now_ns()
        await asyncio.sleep(5)  # virtual seconds
        r.pause()
        await asyncio.sleep(25)
        r.resume()
        await until(lambda: r.snapshot().state == "finished", 120)
        r.stop("completed")
        assert clock.now_ns() - t > 25e9

    result, data = _run(tmp_path, script)
    first = result.levels[0]
    assert first.cut == "pause" and first.wall_s > first.active_s + 20
    # the level's rate is the rate it ran at, not diluted by the idle 25 s
    assert first.throughput_tok_s == pytest.approx(first.output_tokens / first.active_s, rel=0.01)
    assert first.throughput_tok_s > 1.5 * first.output_tokens / first.wall_s
    assert data.levels[0]["cut"] == "pause"
