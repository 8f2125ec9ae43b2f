"""HealthMonitor against a real aiohttp server on 127.0.0.1: up, down on refused, up again.

Event times come from a FakeClock the test moves between phases, so each transition's t_ns
is checked exactly without any sleeping.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from specload.clock import FakeClock
from specload.datatypes import HealthChanged, RunEvent
from specload.watch.health import HealthCheck, HealthMonitor, starved_check
from tests.waiting import DEADLINE, until


class HealthServer:
    """A /health endpoint whose answer the test controls; stop() closes the port."""

    def __init__(self) -> None:
        self.status = 200
        self.delay = 0.0
        self.port = 0
        self.runner: web.AppRunner | None = None

    async def _health(self, request: web.Request) -> web.Response:
        if self.delay:
            await asyncio.sleep(self.delay)
        return web.json_response({"status": "ok" if self.status == 200 else "loading"}, status=self.status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]  # keep the port for the restart

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[RunEvent, str]] = []

    def __call__(self, event: RunEvent, detail: str) -> None:
        self.events.append((event, detail))

    @property
    def values(self) -> list[object]:
        return [e.value for e, _ in self.events]


async def test_up_then_down_on_refused_then_up_again() -> None:
    server = HealthServer()
    await server.start()
    clock = FakeClock(start_ns=1_000)
    rec = Recorder()
    mon = HealthMonitor(server.url, interval=0.02, timeout=1.0, clock=clock, on_change=rec)
    task = asyncio.create_task(mon.run())
    try:
        await until(lambda: rec.values == ["up"])
        assert rec.events[0][0] == HealthChanged(1_000, "up")
        assert rec.events[0][1].startswith("HTTP 200")

        clock.set_ns(2_000)
        await server.stop()
        await until(lambda: rec.values == ["up", "down"])
        event, detail = rec.events[1]
        assert event == HealthChanged(2_000, "down")
        assert detail == "connection refused"  # one refusal is enough: down_after applies to others

        clock.set_ns(3_000)
        await server.start()
        await until(lambda: rec.values == ["up", "down", "up"])
        assert rec.events[2][0].t_ns == 3_000
        assert mon.state == "up" and mon.events == [e for e, _ in rec.events]
    finally:
        await mon.stop()
        await asyncio.wait_for(task, DEADLINE)
        await server.stop()


async def test_error_status_needs_consecutive_failures_and_timeout_is_down() -> None:
    server = HealthServer()
    await server.start()
    rec = Recorder()
    mon = HealthMonitor(server.url, interval=0.02, timeout=0.1, on_change=rec, down_after=2)
    task = asyncio.create_task(mon.run())
    try:
        await until(lambda: rec.values == ["up"])
        server.status = 503
        await until(lambda: rec.values == ["up", "down"])
        assert rec.events[1][1] == "HTTP 503"
        assert mon.checks >= 3  # the first 503 alone did not flip it (checked exactly below)
        server.status = 200
        await until(lambda: rec.values == ["up", "down", "up"])
        server.delay = 0.5  # longer than the 0.1 s timeout
        await until(lambda: rec.values == ["up", "down", "up", "down"])
        assert rec.events[3][1] == "timeout after 0.1 s"
    finally:
        await mon.stop()
        await asyncio.wait_for(task, DEADLINE)
        await server.stop()


async def test_stop_returns_promptly_with_a_long_interval() -> None:
    server = HealthServer()
    await server.start()
    mon = HealthMonitor(server.url, interval=30.0)
    task = asyncio.create_task(mon.run())
    try:
        await until(lambda: mon.state == "up")
        await mon.stop()
        await asyncio.wait_for(task, 1.0)
    finally:
        await server.stop()


def test_transition_rules_without_a_server() -> None:
    clock = FakeClock(start_ns=0)
    rec = Recorder()
    mon = HealthMonitor("http://127.0.0.1:1/health", clock=clock, on_change=rec, down_after=2)
    mon.observe(HealthCheck(False, "HTTP 503"))  # unknown -> down on the first failure
    mon.observe(HealthCheck(True, "HTTP 200 in 1 ms"))
    clock.advance(ns=5)
    mon.observe(HealthCheck(False, "HTTP 503"))  # one slow/failed check does not flap an up server
    assert rec.values == ["down", "up"] and mon.detail == "HTTP 503"
    mon.observe(HealthCheck(False, "HTTP 503"))
    assert rec.values == ["down", "up", "down"] and rec.events[2][0].t_ns == 5
    mon.observe(HealthCheck(True, "HTTP 200 in 1 ms"))
    # the engine saw refused connections before the next poll
    mon.mark_down("connection refused (seen by requests)")
    assert rec.values == ["down", "up", "down", "up", "down"]
    assert rec.events[-1][1] == "connection refused (seen by requests)"
    mon.mark_down("again")  # already down: no duplicate event
    assert len(rec.events) == 5
    mon.observe(HealthCheck(True, "HTTP 200 in 1 ms"))
    assert mon.state == "up"


def test_a_timeout_while_the_checking_thread_waited_for_a_cpu_is_no_verdict() -> None:
    rec = Recorder()
    mon = HealthMonitor("http://127.0.0.1:1/health", timeout=2.0, on_change=rec, down_after=1)
    mon.observe(HealthCheck(True, "HTTP 200 in 1 ms"))
    timeout = HealthCheck(False, "timeout after 2 s")
    mon.observe(starved_check(timeout, 1.2, 2.0))  # the server had 0.8 s of the 2: no verdict
    assert rec.values == ["up"] and "waiting for a CPU here" in mon.detail
    assert starved_check(HealthCheck(False, "HTTP 503"), 1.9, 2.0).client_side is False  # an answer is one
    assert starved_check(timeout, None, 2.0) is timeout  # not known (not Linux): the timeout stands
    mon.observe(starved_check(timeout, 0.3, 2.0))  # the server had most of the time: down
    assert rec.values == ["up", "down"]


def test_a_timeout_while_the_streams_go_on_is_no_verdict() -> None:
    # a server too busy to answer /health in time while it streams tokens is slow, not down
    rec = Recorder()
    tokens = [0.0]
    mon = HealthMonitor("http://127.0.0.1:1/health", timeout=2.0, on_change=rec, down_after=1,
                        streamed=lambda: tokens[0])
    mon.observe(HealthCheck(True, "HTTP 200 in 1 ms"))
    timeout = HealthCheck(False, "timeout after 2 s")
    tokens[0] = 500.0
    mon.observe(timeout)  # tokens came since the last check
    assert rec.values == ["up"] and "slow, not down" in mon.detail
    mon.observe(HealthCheck(False, "HTTP 503"))  # an answer is one, streams or not
    assert rec.values == ["up", "down"]
    mon.observe(HealthCheck(True, "HTTP 200 in 1 ms"))
    mon.observe(timeout)  # no token since the last check: the timeout stands
    assert rec.values == ["up", "down", "up", "down"]
