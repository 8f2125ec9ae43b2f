"""``--workers N``: the streaming hot path in N processes, the run's control in one.

The runner (dispatch, levels, concurrency, pause) stays in the main process; it does per-request
work only. What costs per token, reading and classifying the stream, runs in worker processes,
each with its own event loop and its own ``StreamingClient``. ``WorkerPoolClient`` has the same
interface as ``StreamingClient`` (``start``, ``send``, ``close``, ``on_tokens``, ``on_cancelled``),
so the runner, stats and recorder do not know whether one or N processes send the load: each
request is sent once, by one worker, and comes back as one record, so nothing is counted twice.

The protocol is JSON lines over the worker's stdin/stdout (``init``, ``send``, ``cancel``, ``exit``
in; ``rec``, ``tokens``, ``load`` out). Because it is messages and not shared memory, the same
split can later run across machines: a worker is anything that speaks these lines (README:
"More than one core"). Times are ``perf_counter_ns`` (CLOCK_MONOTONIC), which all processes on one
machine share, so records from every worker sit on one timeline.

A worker that dies (its pipe closes, it exits or is killed, it sends a line that is not the
protocol, or it stays silent for ``heartbeat_timeout_s`` although it reports every second) is taken
out of the pool at once: nothing more is sent to it, each request it had in flight comes back as a
``lost`` record naming it (the server may or may not have finished it), and ``on_worker_lost`` tells
the session, which continues on the others or stops the run. Without that, a dead worker's
requests were awaited forever and the least-busy choice kept sending it more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import signal
import sys
import time
from collections.abc import Callable

import orjson

from specload.config import RequestConfig, TargetConfig
from specload.datatypes import ErrorKind, RequestRecord, RunEvent
from specload.engine.client import StreamingClient
from specload.options import from_dict, to_dict
from specload.secrets import Scrubber
from specload.stats.client_load import ClientLoadMonitor

_STREAM_LIMIT = 64 * 1024 * 1024  # a record with every chunk offset can be long


_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))


def record_to_wire(rec: RequestRecord) -> dict:
    d = {name: getattr(rec, name) for name in _FIELDS}
    d["op"] = "rec"
    if rec.error_kind is not None:
        d["error_kind"] = rec.error_kind.value
    return d


def record_from_wire(d: dict) -> RequestRecord:
    kw = {name: d[name] for name in _FIELDS}
    # JSON has lists, the record tuples; the error kind travels as its value
    kw["chunk_offsets_ns"] = tuple(kw["chunk_offsets_ns"])
    if kw["chunk_tokens"] is not None:
        kw["chunk_tokens"] = tuple(kw["chunk_tokens"])
    if kw["error_kind"] is not None:
        kw["error_kind"] = ErrorKind(kw["error_kind"])
    return RequestRecord(**kw)


class _Worker:
    def __init__(self, index: int, proc: asyncio.subprocess.Process, now: float) -> None:
        self.index = index
        self.proc = proc
        self.in_flight = 0
        self.cpu_pct: float | None = None
        self.lag_ms: float | None = None
        self.lag_wait_ms: float | None = None  # of the worst delay, the time spent waiting for a CPU
        self.alive = True
        self.last_seen = now  # loop time of the last line read from it
        self.why: str | None = None  # set when the pool itself ends the worker (silent, bad line)

    @property
    def name(self) -> str:
        return f"worker {self.index} (pid {self.proc.pid})"

    def write(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(obj) + b"\n")


class WorkerLost(RuntimeError):
    """The worker a request was sent to died; the message names it and says how."""


def exit_description(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def worker_init(
    base_url: str,
    flavour: str,
    *,
    model: str | None,
    target: TargetConfig | None,
    request: RequestConfig | None,
    headers: dict[str, str] | None,
    scrubber: Scrubber | None,
) -> dict:
    """What a worker (process or Ray actor) needs to build its ``StreamingClient``, as plain data.
    The configs travel whole: a new option reaches the workers without a change here."""
    return {
        "op": "init",
        "base_url": base_url,
        "flavour": flavour,
        "model": model,
        "target": to_dict(target or TargetConfig()),
        "request": to_dict(request or RequestConfig()),
        # secrets travel as data, never on a command line where `ps` would show them
        "headers": headers or {},
        "secrets": list(scrubber.values) if scrubber is not None else [],
    }


def client_from_init(
    init: dict, on_tokens: Callable[[int, float], None], on_cancelled: Callable[[RequestRecord], None]
) -> StreamingClient:
    return StreamingClient(
        init["base_url"],
        init["flavour"],
        model=init["model"],
        target=from_dict(TargetConfig, init["target"]),
        request=from_dict(RequestConfig, init["request"]),
        headers=init["headers"],
        on_tokens=on_tokens,
        on_cancelled=on_cancelled,
        scrubber=Scrubber(init["secrets"]),
    )


def lost_record(rid: int, level: int, level_index: int, warmup: bool, start: int, why: str) -> RequestRecord:
    """The record of a request whose worker died: no response known, the worker named in ``why``."""
    return RequestRecord(rid, level, level_index, warmup, start, time.perf_counter_ns(), None, None, 0, True,
                         None, 0, error_kind=ErrorKind.LOST, error_detail=why)


def cancelled_record(rid: int, level: int, level_index: int, warmup: bool, start: int) -> RequestRecord:
    return RequestRecord(rid, level, level_index, warmup, start, time.perf_counter_ns(), None, None, 0, True,
                         None, 0, error_kind=ErrorKind.CANCELLED, error_detail="cancelled by specload")


class WorkerPoolClient:
    def __init__(
        self,
        n: int,
        base_url: str,
        flavour: str,
        *,
        model: str | None = None,
        target: TargetConfig | None = None,
        request: RequestConfig | None = None,
        headers: dict[str, str] | None = None,
        on_tokens: Callable[[int, float], None] | None = None,
        scrubber: Scrubber | None = None,
        heartbeat_timeout_s: float = 30.0,
        **_: object,
    ) -> None:
        self.n = n
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._init = worker_init(base_url, flavour, model=model, target=target, request=request, headers=headers,
                                 scrubber=scrubber)
        self.on_tokens = on_tokens or (lambda t, n: None)
        self.on_cancelled: Callable[[RequestRecord], None] = lambda rec: None
        # (worker index, what happened, workers still alive): set by the session, which records an
        # event and continues or stops the run.
        self.on_worker_lost: Callable[[int, str, int], None] = lambda index, why, left: None
        # a worker's client events and notices (the switch to new connections), tagged with the worker
        self.on_event: Callable[[RunEvent], None] = lambda ev: None
        self.on_notice: Callable[[str], None] = lambda text: None
        self._workers: list[_Worker] = []
        self._alive: list[_Worker] = []
        self._pending: dict[int, tuple[asyncio.Future, _Worker]] = {}
        self._tasks: list[asyncio.Task] = []
        self._closing = False

    @property
    def worker_loads(self) -> list[tuple[float | None, float | None, float | None]]:
        return [(w.cpu_pct, w.lag_ms, w.lag_wait_ms) for w in self._alive]

    @property
    def workers_alive(self) -> int:
        return len(self._alive)

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    @property
    def worker_in_flight(self) -> list[int]:
        return [w.in_flight if w.alive else 0 for w in self._workers]

    async def start(self) -> None:
        if self._workers:
            return
        loop = asyncio.get_running_loop()
        for i in range(self.n):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "specload.engine.workers",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=_STREAM_LIMIT,
            )
            w = _Worker(i, proc, loop.time())
            w.write(self._init)
            self._workers.append(w)
            self._alive.append(w)
            self._tasks.append(asyncio.ensure_future(self._read(w)))
        self._tasks.append(asyncio.ensure_future(self._watch_silence()))

    async def _read(self, w: _Worker) -> None:
        assert w.proc.stdout is not None
        on_tokens = self.on_tokens
        loop = asyncio.get_running_loop()
        try:
            while True:
                line = await w.proc.stdout.readline()
                if not line:
                    break
                w.last_seen = loop.time()
                try:
                    msg = orjson.loads(line)
                    op = msg.get("op")
                    if op == "tokens":
                        on_tokens(msg["t"], msg["n"])
                    elif op == "rec":
                        entry = self._pending.pop(msg["request_id"], None)
                        if entry is not None:
                            w.in_flight -= 1
                            if not entry[0].done():
                                entry[0].set_result(record_from_wire(msg))
                    elif op == "load":
                        w.cpu_pct, w.lag_ms, w.lag_wait_ms = msg["cpu"], msg["lag"], msg.get("wait")
                    elif op == "event":  # the worker's clock is this machine's CLOCK_MONOTONIC too
                        self.on_event(RunEvent(msg["t"], msg["kind"], {**msg["value"], "worker": w.index}))
                    elif op == "notice":
                        self.on_notice(f"{w.name}: {msg['text']}")
                except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as e:
                    # not the protocol: nothing it says can be trusted any more
                    w.why = f"sent a line that is not the worker protocol ({type(e).__name__}); killed"
                    break
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as e:
            w.why = f"its pipe failed ({type(e).__name__}); killed"
        await self._gone(w)

    async def _gone(self, w: _Worker) -> None:
        """The worker's output ended: reap it and, unless the pool is closing, report it lost."""
        if w.why is not None and w.proc.returncode is None:
            w.proc.kill()
        try:
            async with asyncio.timeout(5):
                code = await w.proc.wait()
        except TimeoutError:
            # it closed its output but lives on: of no use any more
            w.proc.kill()
            code = await w.proc.wait()
        if not w.alive:
            return
        w.alive = False
        self._alive = [x for x in self._alive if x.alive]
        why = f"{w.name} {w.why or exit_description(code)}"
        if self._closing:
            self._fail_pending(w, why + " while specload was stopping")
            return
        # Its requests are failed first, the session told second, in the same loop step: the
        # runner, told to stop, launches nothing more before their tasks wake up.
        self._fail_pending(w, why)
        self.on_worker_lost(w.index, why, len(self._alive))

    def _fail_pending(self, w: _Worker, why: str) -> None:
        for rid, (fut, owner) in list(self._pending.items()):
            if owner is w:
                self._pending.pop(rid, None)
                if not fut.done():
                    fut.set_exception(WorkerLost(why))
        w.in_flight = 0

    async def _watch_silence(self) -> None:
        """A worker reports its load every second; one silent for ``heartbeat_timeout_s`` is hung
        (stopped, deadlocked) and is killed, which its reader then reports as a lost worker."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            if now - last > 5.0:
                # this loop itself was held up: a worker's silence may be ours, judge nothing
                for w in self._alive:
                    w.last_seen = max(w.last_seen, now)
            last = now
            for w in self._alive:
                if w.why is None and now - w.last_seen > self.heartbeat_timeout_s:
                    w.why = f"sent nothing for {self.heartbeat_timeout_s:g} s (hung or stopped); killed"
                    w.proc.kill()

    async def send(
        self, prompt: str, *, request_id: int = 0, level: int = 0, level_index: int = 0, warmup: bool = False,
        max_tokens: int | None = None, prompt_tokens_requested: int | None = None,
    ) -> RequestRecord:
        start = time.perf_counter_ns()
        if not self._alive:
            return lost_record(request_id, level, level_index, warmup, start, "no load worker left")
        w = min(self._alive, key=lambda x: x.in_flight)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (fut, w)
        w.in_flight += 1
        try:
            w.write({"op": "send", "id": request_id, "prompt": prompt, "level": level, "level_index": level_index,
                     "warmup": warmup, "max_tokens": max_tokens, "ptr": prompt_tokens_requested})
        except (ConnectionError, RuntimeError):
            pass  # its pipe is closing: the reader reports the worker lost and fails this request
        try:
            return await fut
        except asyncio.CancelledError:
            if not self._closing and w.alive:
                try:
                    w.write({"op": "cancel", "id": request_id})
                except (ConnectionError, RuntimeError):
                    pass
            try:
                async with asyncio.timeout(5):
                    rec = await asyncio.shield(fut)
            except WorkerLost as e:
                # the worker died first (a run stopped because of it cancels every request): the
                # request was lost, not cancelled
                rec = lost_record(request_id, level, level_index, warmup, start, str(e))
            except (TimeoutError, asyncio.CancelledError):
                self._pending.pop(request_id, None)
                rec = cancelled_record(request_id, level, level_index, warmup, start)
            self.on_cancelled(rec)
            raise
        except WorkerLost as e:
            return lost_record(request_id, level, level_index, warmup, start, str(e))

    async def close(self) -> None:
        self._closing = True
        for w in self._alive:
            try:
                w.write({"op": "exit"})
            except (ConnectionError, RuntimeError):
                pass
        for w in self._workers:
            try:
                async with asyncio.timeout(10):
                    await w.proc.wait()
            except TimeoutError:
                w.proc.kill()
                await w.proc.wait()
        # the readers end on their own once the workers' output closes; the silence watch does not
        readers, watch = self._tasks[:-1], self._tasks[-1:]
        try:
            async with asyncio.timeout(10):
                await asyncio.gather(*readers, return_exceptions=True)
        except TimeoutError:
            pass
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*readers, *watch, return_exceptions=True)
        self._workers.clear()
        self._alive.clear()

    async def __aenter__(self) -> WorkerPoolClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------------- the worker process


def _forget(tasks: dict[int, asyncio.Task], rid: int, _task: asyncio.Task) -> None:
    tasks.pop(rid, None)


async def _worker_main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STREAM_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    w_transport, w_protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    out = asyncio.StreamWriter(w_transport, w_protocol, None, loop)

    def emit(obj: dict) -> None:
        out.write(orjson.dumps(obj) + b"\n")

    init = orjson.loads(await reader.readline())
    tokens: list[float] = [0, 0]  # [count since last report, last time]

    def on_tokens(t: int, n: float) -> None:
        tokens[0] += n
        tokens[1] = t

    client = client_from_init(init, on_tokens, lambda rec: emit(record_to_wire(rec)))
    client.on_event = lambda ev: emit({"op": "event", "t": ev.t_ns, "kind": ev.kind, "value": ev.value})
    client.on_notice = lambda text: emit({"op": "notice", "text": text})
    await client.start()
    tasks: dict[int, asyncio.Task] = {}

    async def one(msg: dict) -> None:
        rec = await client.send(msg["prompt"], request_id=msg["id"], level=msg["level"],
                                max_tokens=msg.get("max_tokens"), prompt_tokens_requested=msg.get("ptr"),
                                level_index=msg["level_index"], warmup=msg["warmup"])
        emit(record_to_wire(rec))

    async def report() -> None:
        while True:
            await asyncio.sleep(0.05)
            if tokens[0]:
                emit({"op": "tokens", "t": tokens[1], "n": tokens[0]})
                tokens[0] = 0

    # the same monitor as the main process's: its samples are judged there (starved or saturated)
    monitor = ClientLoadMonitor(
        on_sample=lambda s: emit({"op": "load", "cpu": s.cpu_pct, "lag": s.loop_lag_ms, "wait": s.lag_cpu_wait_ms})
    )
    reporter = asyncio.gather(report(), monitor.run())
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            msg = orjson.loads(line)
            op = msg.get("op")
            if op == "send":
                t = asyncio.ensure_future(one(msg))
                tasks[msg["id"]] = t
                t.add_done_callback(functools.partial(_forget, tasks, msg["id"]))
            elif op == "cancel":
                sent = tasks.get(msg["id"])
                if sent is not None:
                    sent.cancel()
            elif op == "exit":
                break
    finally:
        for t in list(tasks.values()):
            t.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        if tokens[0]:
            emit({"op": "tokens", "t": tokens[1], "n": tokens[0]})
        reporter.cancel()
        # retrieved, or the cancelled gather prints "exception was never retrieved" at exit
        await asyncio.gather(reporter, return_exceptions=True)
        await client.close()
        await out.drain()


def main() -> None:
    # Ctrl-C in the terminal reaches the whole process group: the main process decides what
    # happens to in-flight requests (recorded as cancelled), so workers ignore it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    try:
        asyncio.run(_worker_main())
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
