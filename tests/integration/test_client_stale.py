"""Stale pooled connections (issue 15): a request that met one is timed from the attempt the server
answered, with the lost time kept as ``retry_ns``/``retry_ms``; after 3 in a row the client opens a new
connection per request for the rest of the run, with a notice and a ``fresh_connections`` event.

Against the simulator's close-after-stream mode on 127.0.0.1 with a long ``stale_close_ms``: the
server drops every request sent on a connection it has finished a stream on, whatever the machine's
speed (with llama-server's few milliseconds, a slow client would see the close before reusing), so
which request meets a stale connection is fixed and the counts below are exact.
"""

from __future__ import annotations

import asyncio
import io
import time

from specload.config import RunConfig
from specload.datatypes import RunEvent
from specload.engine.client import FRESH_AFTER_STALE
from specload.headless import HeadlessPrinter
from specload.record.reader import read_record
from specload.session import Session
from tests import conftest

STALE_FOREVER = dict(close_after_stream=True, stale_close_ms=60_000.0)
JUMP_NS = 1000 * 10**9  # what each stale attempt "costs" on the test's clock


class JumpClock:
    """The real clock plus an offset a test moves forward: a stale attempt made to last 1000 s."""

    def __init__(self) -> None:
        self.offset = 0

    def now_ns(self) -> int:
        return time.perf_counter_ns() + self.offset

    def wall_time(self) -> float:
        return time.time()


async def test_a_request_that_met_a_stale_connection_is_timed_from_the_answered_attempt(sim) -> None:
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0, **STALE_FOREVER)
    clock = JumpClock()
    events: list[RunEvent] = []
    notices: list[str] = []
    async with conftest.make_client(server.url, max_tokens=4, ignore_eos=True, clock=clock) as c:
        c.on_event, c.on_notice = events.append, notices.append
        # the client's private step for a stale connection met: no public hook runs at that moment
        stale = c._stale_connection

        def slow_stale() -> None:  # the stale attempt took 1000 s (on the clock), then it is noticed
            clock.offset += JUMP_NS
            stale()

        c._stale_connection = slow_stale
        recs = [await asyncio.wait_for(c.send("x", request_id=i), 10) for i in range(10)]
    assert all(r.ok for r in recs), [r.error_detail for r in recs if not r.ok]
    # On one pooled connection at a time: a new one answers, its reuse meets the close and is sent
    # again on a connection of its own; the third stale one in a row switches to new connections.
    assert [r.retries for r in recs] == [0, 1, 0, 1, 0, 1, 0, 0, 0, 0]
    assert server.stats.requests == len(recs)  # a stale attempt never reached the server's handler
    for r in recs:
        if r.retries:
            assert JUMP_NS <= r.retry_ns < 2 * JUMP_NS  # the lost time, kept apart
            assert r.ttft_ns < JUMP_NS and r.e2e_ns < JUMP_NS  # timed from the attempt that was answered
        else:
            assert r.retry_ns == 0
    assert [(e.kind, e.value) for e in events] == [("fresh_connections", {"stale_closes": FRESH_AFTER_STALE})]
    assert len(notices) == 1 and "new connection" in notices[0]
    assert c.fresh_only and c.stale_total == 3


async def test_a_server_that_answers_on_its_pooled_connections_keeps_the_pool() -> None:
    """A server that closes a connection now and then (here: after 2 answers, unannounced) meets the
    client with a stale connection every third request, but a pooled connection answers in between:
    never 3 in a row, so no switch to new connections."""
    body = b'data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    answered = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        try:
            for _ in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(h.split(b":")[1] for h in head.split(b"\r\n")
                                  if h.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                answered += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # the third request on this connection: dropped unanswered
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed it first (its retries go on connections it closes after one answer)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    events: list[RunEvent] = []
    try:
        async with conftest.make_client(f"http://127.0.0.1:{port}") as c:
            c.on_event = events.append
            recs = [await asyncio.wait_for(c.send("x", request_id=i), 10) for i in range(12)]
    finally:
        server.close()
    assert all(r.ok for r in recs), [r.error_detail for r in recs if not r.ok]
    assert sum(r.retries for r in recs) >= 3  # the closes were met ...
    assert not c.fresh_only and events == []  # ... but never 3 in a row
    assert answered == len(recs)


async def test_the_switch_reaches_the_record_the_listener_and_headless_output(sim, tmp_path) -> None:
    """At C=4 against a server closing after every stream: the switch is one record event and one
    notice (headless prints it), the retried requests' lines carry retry_ms, and the record reads back
    without a bad line."""
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0, **STALE_FOREVER)
    rec = tmp_path / "r.jsonl"
    cfg = RunConfig.of(server.url, api="chat", concurrency=(4,), requests_per_level=40, drain=True, max_tokens=4,
                       ignore_eos=True, prompt="hello", health=False, metrics_url="off", path=str(rec))
    out = io.StringIO()
    result = await asyncio.wait_for(Session(cfg, listener=HeadlessPrinter(out)).run(), 60)
    assert result.reason == "completed", result
    data = read_record(str(rec))
    assert data.bad_lines == 0, data.problems
    reqs = [r for r in data.requests if not r["warmup"]]
    assert len(reqs) == 40 and all(r["ok"] for r in reqs)
    switched = [e for e in data.events if e["kind"] == "fresh_connections"]
    assert len(switched) == 1 and switched[0]["value"] == {"stale_closes": FRESH_AFTER_STALE}
    retried = [r for r in data.requests if r["retries"]]
    assert retried and all(r["retry_ms"] > 0 for r in retried)
    assert all("retry_ms" not in r for r in data.requests if not r["retries"])
    # after the switch no request meets a stale connection: every retried one was first sent before it
    # (start_s is the answered attempt's, retry_ms before it the first send's)
    assert max(r["start_s"] - r["retry_ms"] / 1e3 for r in retried) <= switched[0]["t_s"] + 1e-5
    assert len(retried) <= 4 + FRESH_AFTER_STALE  # at most the pool of 4, and those that met it while it emptied
    printed = [line for line in out.getvalue().splitlines() if "pooled connections in a row" in line]
    assert len(printed) == 1 and printed[0].startswith("specload: ")


async def test_a_worker_process_tells_its_switch_to_the_main_process(sim, tmp_path) -> None:
    """With --workers each process has its own connections and switches on its own; its event reaches
    the record tagged with the worker, its notice names it."""
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0, **STALE_FOREVER)
    rec = tmp_path / "w.jsonl"
    cfg = RunConfig.of(server.url, api="chat", concurrency=(4,), requests_per_level=40, drain=True, max_tokens=4,
                       ignore_eos=True, prompt="hello", health=False, metrics_url="off", path=str(rec), workers=2)
    out = io.StringIO()
    result = await asyncio.wait_for(Session(cfg, listener=HeadlessPrinter(out)).run(), 60)
    assert result.reason == "completed", result
    data = read_record(str(rec))
    assert data.bad_lines == 0 and all(r["ok"] for r in data.requests)
    switched = [e["value"] for e in data.events if e["kind"] == "fresh_connections"]
    assert switched and all(v["stale_closes"] == FRESH_AFTER_STALE for v in switched)
    workers = [v["worker"] for v in switched]
    assert len(set(workers)) == len(workers) and set(workers) <= {0, 1}  # once per worker at most
    printed = [line for line in out.getvalue().splitlines() if "pooled connections in a row" in line]
    assert len(printed) == len(switched) and all(line.startswith("specload: worker ") for line in printed)
