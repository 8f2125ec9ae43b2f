"""The simulator on uvloop, as its CLI runs it: uvloop returns a plain Handle (no ``when()``) from
``call_at`` for a time already past, which once broke the pinned-timing scheduler under load."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from specload.sim.config import SimConfig
from specload.sim.server import SimServer

uvloop = pytest.importorskip("uvloop")


async def _burst() -> list[int]:
    server = SimServer(SimConfig(ttft_ms=0, itl_ms=5, spec_tokens=0, quiet=True, seed=0))
    await server.start()
    body = {"prompt": "x", "max_tokens": 4, "stream": True, "ignore_eos": True}
    try:
        async with aiohttp.ClientSession() as s:

            async def one() -> int:
                async with s.post(server.url + "/v1/completions", json=body) as r:
                    await r.read()
                    return r.status

            return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(32))), 20)
    finally:
        await server.stop()


def test_pinned_scheduler_under_uvloop_serves_a_burst() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        statuses = runner.run(_burst())
    assert statuses == [200] * 32
