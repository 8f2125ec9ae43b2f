"""Virtual time: the loop's clock jumps to the next timer, real I/O still flows, and a run against the
pinned simulator measures exactly the simulator's schedule."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from specload.sim.virtual_time import LoopClock, VirtualTimeLoop, run_virtual


def test_sleeping_costs_no_real_time() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        t0, r0 = loop.time(), time.perf_counter()
        await asyncio.sleep(3600)
        return loop.time() - t0, time.perf_counter() - r0

    virtual, real = run_virtual(main())
    assert virtual >= 3600 and real < 5  # an hour of virtual sleep (bounded: a busy machine is slow)


def test_http_against_the_pinned_simulator_measures_its_schedule() -> None:
    async def main() -> list[float]:
        server = SimServer(SimConfig(quiet=True, seed=1, ttft_ms=40, itl_ms=10, spec_tokens=0))
        url = await server.start()
        clock = LoopClock(asyncio.get_running_loop())
        gaps = []
        try:
            async with aiohttp.ClientSession() as s:
                t0 = clock.now_ns()
                body = {"prompt": "x", "max_tokens": 5, "stream": True, "ignore_eos": True}
                async with s.post(url + "/v1/completions", json=body) as r:
                    async for line in r.content:
                        if line.startswith(b"data: {"):
                            gaps.append((clock.now_ns() - t0) / 1e6)
        finally:
            await server.stop()
        return gaps

    arrivals = run_virtual(main())
    # first token at the pinned TTFT, then one per pinned step, to well under a millisecond
    expected = [40.0 + 10.0 * i for i in range(5)]
    assert len(arrivals) >= 5
    assert all(abs(a - e) < 0.5 for a, e in zip(arrivals, expected, strict=False)), arrivals
