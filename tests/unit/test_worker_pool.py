"""The pool of load workers on a transport that is a list: which worker gets a request, what a lost
worker's requests become, a cancel, and times moved by a worker's clock offset. The real
transports (processes, Ray actors) are driven in tests/integration/test_workers.py and test_ray.py."""

from __future__ import annotations

import asyncio
import dataclasses

from specload.datatypes import ErrorKind, Noted, RequestRecord, RunEvent
from specload.engine.workers import Worker, WorkerPool, record_to_wire


class Listed:
    """A transport that only writes down what the pool asks of it."""

    def __init__(self, n: int) -> None:
        self.workers = [Worker(i, None, name=f"worker {i}") for i in range(n)]
        self.sent: list[tuple[int, int]] = []  # (worker, request id)
        self.cancelled: list[tuple[int, int]] = []
        self.pool: WorkerPool | None = None
        self.closed = False

    @property
    def timeline(self) -> dict:
        return {"workers": [w.index for w in self.workers]}

    async def start(self, pool: WorkerPool) -> list[Worker]:
        self.pool = pool
        return self.workers

    def send(self, w: Worker, msg: dict) -> None:
        self.sent.append((w.index, msg["id"]))

    def cancel(self, w: Worker, rid: int) -> None:
        self.cancelled.append((w.index, rid))

    def kill(self, w: Worker, why: str) -> None:
        assert self.pool is not None
        self.pool.lost(w, why)

    async def close(self) -> None:
        self.closed = True


def answer(rid: int, *, start: int = 1_000, error: ErrorKind | None = None) -> dict:
    rec = RequestRecord(rid, 4, 0, False, start, start + 500, 10, 400, 8, False, 3, 8, error_kind=error)
    return record_to_wire(rec)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_requests_go_to_the_least_busy_worker_and_come_back_as_their_records() -> None:
    t = Listed(2)
    async with WorkerPool(2, "http://127.0.0.1:1", "chat", transport=t) as pool:
        sends = [asyncio.ensure_future(pool.send("x", request_id=i)) for i in range(3)]
        await settle()
        assert t.sent == [(0, 0), (1, 1), (0, 2)] and pool.worker_in_flight == [2, 1]
        w0, w1 = t.workers
        w1.offset_ns = 400  # worker 1's clock reads 400 ns ahead of this process's
        pool.heard(w1, answer(1, start=1_400))
        pool.heard(w0, answer(0))
        pool.heard(w0, answer(2))
        recs = await asyncio.gather(*sends)
        assert [r.request_id for r in recs] == [0, 1, 2] and all(r.ok for r in recs)
        assert (recs[1].start_ns, recs[1].end_ns, recs[1].e2e_ns) == (1_000, 1_500, 400)  # moved, durations kept
        assert pool.worker_in_flight == [0, 0]
        assert pool.timeline == {"workers": [0, 1]}
    assert t.closed


async def test_what_a_worker_says_reaches_the_run_tagged_with_it() -> None:
    t = Listed(2)
    tokens: list[tuple[int, float]] = []
    events: list[RunEvent] = []
    notices: list[str] = []
    async with WorkerPool(2, "http://127.0.0.1:1", "chat", transport=t, on_tokens=lambda at, n: tokens.append((at, n))) as pool:
        pool.on_event, pool.on_notice = events.append, notices.append
        w1 = t.workers[1]
        w1.offset_ns = 50
        pool.heard(w1, {"op": "tokens", "t": 1_050, "n": 3.5})
        pool.heard(w1, {"op": "load", "cpu": 80.0, "lag": 2.5, "wait": 1.0})
        pool.heard(w1, {"op": "event", "t": 2_050, "kind": "fresh_connections", "value": {"stale_closes": 3}})
        pool.heard(w1, {"op": "notice", "text": "switched"})
        assert tokens == [(1_000, 3.5)]
        assert pool.worker_loads == [(None, None, None), (80.0, 2.5, 1.0)]
        assert events == [Noted(2_000, "fresh_connections", {"stale_closes": 3, "worker": 1})]
        assert notices == ["worker 1: switched"]


async def test_a_lost_worker_fails_its_requests_as_lost_and_gets_no_more() -> None:
    t = Listed(2)
    told: list[tuple[int, str, int]] = []
    async with WorkerPool(2, "http://127.0.0.1:1", "chat", transport=t,
                          on_worker_lost=lambda i, why, left: told.append((i, why, left))) as pool:
        sends = [asyncio.ensure_future(pool.send("x", request_id=i)) for i in range(4)]
        await settle()
        t.kill(t.workers[1], "was killed by SIGKILL")
        assert told == [(1, "worker 1 was killed by SIGKILL", 1)]
        assert pool.workers_alive == 1 and pool.worker_in_flight == [2, 0]
        after = asyncio.ensure_future(pool.send("x", request_id=4))
        await settle()
        assert t.sent[-1] == (0, 4)  # nothing more to the lost one
        for rid in (0, 2, 4):
            pool.heard(t.workers[0], answer(rid))
        recs = await asyncio.gather(*sends, after)
        lost = [r for r in recs if not r.ok]
        assert [r.request_id for r in lost] == [1, 3]
        assert all(r.error_kind is ErrorKind.LOST and r.error_detail == "worker 1 was killed by SIGKILL" for r in lost)
        t.kill(t.workers[0], "exited with code 1")
        last = await pool.send("x", request_id=5)
        assert last.error_kind is ErrorKind.LOST and last.error_detail == "no load worker left"
        assert [i for i, _, _ in told] == [1, 0] and told[-1][2] == 0


async def test_a_cancelled_request_is_cancelled_at_its_worker_and_its_record_handed_in() -> None:
    t = Listed(1)
    handed: list[RequestRecord] = []
    async with WorkerPool(1, "http://127.0.0.1:1", "chat", transport=t) as pool:
        pool.on_cancelled = handed.append
        send = asyncio.ensure_future(pool.send("x", request_id=7))
        await settle()
        send.cancel()
        await settle()
        assert t.cancelled == [(0, 7)]
        pool.heard(t.workers[0], answer(7, error=ErrorKind.CANCELLED))  # the worker's own record of it
        await asyncio.gather(send, return_exceptions=True)
        assert send.cancelled()
        assert [(r.request_id, r.error_kind) for r in handed] == [(7, ErrorKind.CANCELLED)]
        assert dataclasses.replace(handed[0], error_kind=None).e2e_ns == 400  # the worker's, not made up
        assert pool.worker_in_flight == [0]
