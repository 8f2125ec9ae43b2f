"""``--workers N`` (and ``--ray``): the streaming hot path in N load workers, the run's control here.

The runner (dispatch, levels, concurrency, pause) stays in this process; what costs per token,
reading and classifying the stream, runs in the workers, each an event loop with its own
``StreamingClient`` (``StreamWorker``). ``WorkerPool`` has the interface of ``StreamingClient``: each
request is sent once, by the least busy worker, and comes back as one record.

How the pool reaches its workers is its transport: ``Pipes`` (processes of this machine, JSON lines
on their stdin/stdout: ``init``, ``send``, ``cancel``, ``exit`` in; ``rec``, ``tokens``, ``load``,
``event``, ``notice`` out) or ``RayActors`` (engine/ray_workers.py). A worker's times are moved onto
this process's clock by its offset (0 on this machine: one CLOCK_MONOTONIC).

A worker that dies (its pipe closes, it says something that is not the protocol, or it is silent
for ``heartbeat_timeout_s``) is taken out of the pool at once: each request it had in flight comes
back as a ``lost`` record naming it, and ``on_worker_lost`` tells the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from specload.config import RequestConfig, TargetConfig
from specload.datatypes import ErrorKind, Output, RequestRecord, RunEvent, event_from_record
from specload.engine import collector
from specload.engine.client import StreamingClient, local_timeline
from specload.options import from_dict, to_dict
from specload.secrets import Scrubber

_STREAM_LIMIT = 64 * 1024 * 1024  # a record with every chunk offset can be long
START_S = 60.0  # how long a worker process may take to come up (imports, its client) on a busy machine
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
    if isinstance(out := kw["output"], dict):  # --check-outputs: the answer, a dataclass as JSON
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in out.items()}
        kw["output"] = Output(**fields)
    return RequestRecord(**kw)


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


def worker_init(base_url: str, flavour: str, *, model: str | None, target: TargetConfig | None,
                request: RequestConfig | None, headers: dict[str, str] | None, scrubber: Scrubber | None) -> dict:
    """What a worker needs to build its ``StreamingClient``, as plain data. The configs travel whole:
    a new option reaches the workers without a change here."""
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


def boot_id() -> str:
    """Machines differ, and so does one machine across reboots: processes with the same boot id
    share one CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return f"host:{socket.gethostname()}"


def _ended_record(rid: int, level: int, level_index: int, warmup: bool, start: int, kind: ErrorKind,
                  why: str) -> RequestRecord:
    return RequestRecord(rid, level, level_index, warmup, start, time.perf_counter_ns(), None, None, 0, True,
                         None, 0, error_kind=kind, error_detail=why)


# ---------------------------------------------------------------------- the worker's side


class StreamWorker:
    """One load worker: an event loop streaming the requests the pool sends it, whatever carries them
    (a process's pipes, a Ray actor's calls: Ray makes this class an actor with ``ray.remote``, so
    importing it does not need Ray). What it says unasked (its client's events and notices, its load
    each second) goes to ``say``, or waits for the next ``poll``; tokens wait for the next poll."""

    def __init__(self, init: dict, say: Callable[[dict], None] | None = None) -> None:
        self._init = init
        self._said: list[dict] = []
        self._say = say or self._said.append
        self._client: StreamingClient | None = None
        self._tasks: dict[int, asyncio.Task] = {}
        self._cancelled: dict[int, RequestRecord] = {}
        self._tokens = 0.0  # a chunk's tokens may be a share of a multi-token chunk's count
        self._tokens_t = 0
        self._monitor: asyncio.Task | None = None

    def _on_tokens(self, t: int, n: float) -> None:
        self._tokens += n
        self._tokens_t = t

    def _on_cancelled(self, rec: RequestRecord) -> None:
        self._cancelled[rec.request_id] = rec

    async def start(self) -> dict:
        from specload.stats.client_load import ClientLoadMonitor

        init = self._init
        self._client = client = StreamingClient(
            init["base_url"], init["flavour"], model=init["model"], target=from_dict(TargetConfig, init["target"]),
            request=from_dict(RequestConfig, init["request"]), headers=init["headers"], on_tokens=self._on_tokens,
            on_cancelled=self._on_cancelled, scrubber=Scrubber(init["secrets"]))
        client.on_event = lambda ev: self._say({"op": "event", "t": ev.t_ns, "kind": ev.kind, "value": ev.value})
        client.on_notice = lambda text: self._say({"op": "notice", "text": text})
        await client.start()
        # the same monitor as the main process's: its samples are judged there (starved or saturated)
        self._monitor = asyncio.ensure_future(ClientLoadMonitor(on_sample=lambda s: self._say(
            {"op": "load", "cpu": s.cpu_pct, "lag": s.loop_lag_ms, "wait": s.lag_cpu_wait_ms})).run())
        collector.freeze_while_loading()  # its thousands of streams kept out of the collector's passes
        return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": boot_id(),
                "now_ns": time.perf_counter_ns()}

    async def clock(self) -> int:
        return time.perf_counter_ns()

    async def send(self, msg: dict) -> dict:
        """One request, to its record (a cancelled one too) on the wire."""
        assert self._client is not None
        rid = msg["id"]
        task = asyncio.ensure_future(self._client.send(
            msg["prompt"], request_id=rid, level=msg["level"], level_index=msg["level_index"], warmup=msg["warmup"],
            max_tokens=msg.get("max_tokens"), prompt_tokens_requested=msg.get("ptr"), reply=bool(msg.get("reply"))))
        self._tasks[rid] = task
        try:
            rec = await task
        except asyncio.CancelledError:
            # cancelled through cancel() or stop(): the client handed its cancelled record to _on_cancelled
            cancelled = self._cancelled.pop(rid, None)
            if cancelled is None:
                raise
            rec = cancelled
        finally:
            self._tasks.pop(rid, None)
        return record_to_wire(rec)

    async def cancel(self, rid: int) -> None:
        task = self._tasks.get(rid)
        if task is not None:
            task.cancel()

    def tokens(self) -> dict | None:
        """The tokens streamed since last asked, as a message (None: none)."""
        if not self._tokens:
            return None
        n, self._tokens = self._tokens, 0
        return {"op": "tokens", "t": self._tokens_t, "n": n}

    async def poll(self) -> dict:
        said = self._said.copy()  # the list ``say`` appends to stays the same
        self._said.clear()
        tokens = self.tokens()
        return {"now_ns": time.perf_counter_ns(), "said": said if tokens is None else [*said, tokens]}

    async def stop(self) -> None:
        for t in list(self._tasks.values()):
            t.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
        collector.thaw()


# ---------------------------------------------------------------------- the pool


@dataclasses.dataclass(eq=False)
class Worker:
    """The pool's view of one worker."""

    index: int
    handle: Any  # the transport's: a process, a Ray actor handle
    name: str = ""
    pid: int = 0
    host: str = ""
    same_machine: bool = True
    offset_ns: int = 0  # worker clock - this process's clock
    rtt_ns: int | None = None  # the round trip of the sample the offset comes from
    alive: bool = True
    in_flight: int = 0
    load: tuple[float | None, float | None, float | None] = (None, None, None)  # CPU %, lag, of it CPU wait
    last_seen: float = 0.0  # loop time it was last heard from
    why: str | None = None  # set when the pool ends it (silent, not the protocol)


class WorkerLost(RuntimeError):
    """The worker a request was sent to died; the message names it and says how."""


class Transport(Protocol):
    """How the pool reaches its workers. It tells the pool what a worker says (``WorkerPool.heard``)
    and that one is gone (``WorkerPool.lost``)."""

    @property
    def timeline(self) -> dict: ...

    async def start(self, pool: WorkerPool) -> list[Worker]: ...

    def send(self, w: Worker, msg: dict) -> None: ...

    def cancel(self, w: Worker, rid: int) -> None: ...

    def kill(self, w: Worker, why: str) -> None:
        """End a worker that cannot be trusted any more; the pool hears ``lost`` once it is gone."""
        ...

    async def close(self) -> None: ...


def aligned(rec: RequestRecord, w: Worker) -> RequestRecord:
    """The record on this process's clock: start and end moved by the worker's offset, durations untouched."""
    if not w.offset_ns:
        return rec
    return dataclasses.replace(rec, start_ns=rec.start_ns - w.offset_ns, end_ns=rec.end_ns - w.offset_ns)


class WorkerPool:
    """``n`` load workers behind the interface of ``StreamingClient``, on ``Pipes`` unless told otherwise."""

    def __init__(self, n: int, base_url: str, flavour: str, *, transport: Transport | None = None,
                 model: str | None = None, target: TargetConfig | None = None, request: RequestConfig | None = None,
                 headers: dict[str, str] | None = None, on_tokens: Callable[[int, float], None] | None = None,
                 on_worker_lost: Callable[[int, str, int], None] | None = None, scrubber: Scrubber | None = None,
                 heartbeat_timeout_s: float = 30.0) -> None:
        self.n = n
        self.transport: Transport = transport or Pipes()
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.init = worker_init(base_url, flavour, model=model, target=target, request=request, headers=headers,
                                scrubber=scrubber)
        self.on_tokens = on_tokens or (lambda t, n: None)
        self.on_cancelled: Callable[[RequestRecord], None] = lambda rec: None
        # (worker index, what happened, workers still alive): the session records an event and
        # continues or stops the run
        self.on_worker_lost = on_worker_lost or (lambda index, why, left: None)
        # a worker's client events and notices (the switch to new connections), tagged with the worker
        self.on_event: Callable[[RunEvent], None] = lambda ev: None
        self.on_notice: Callable[[str], None] = lambda text: None
        self.workers: list[Worker] = []
        self._alive: list[Worker] = []
        self._pending: dict[int, tuple[asyncio.Future, Worker]] = {}
        self._watch: asyncio.Task | None = None
        self.closing = False

    @property
    def worker_loads(self) -> list[tuple[float | None, float | None, float | None]]:
        return [w.load for w in self._alive]

    @property
    def workers_alive(self) -> int:
        return len(self._alive)

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    @property
    def worker_in_flight(self) -> list[int]:
        return [w.in_flight if w.alive else 0 for w in self.workers]

    @property
    def timeline(self) -> dict:
        """How the workers' times sit on this process's timeline, for the record's header."""
        return self.transport.timeline

    async def start(self) -> None:
        if self.workers:
            return
        self.workers = await self.transport.start(self)
        now = asyncio.get_running_loop().time()
        for w in self.workers:
            w.last_seen = now
        self._alive = list(self.workers)
        self._watch = asyncio.ensure_future(self._watch_silence())

    def heard(self, w: Worker, msg: dict) -> None:
        """What worker ``w`` said: a record, tokens, a load sample, a client event or notice. A message
        that is not the protocol raises (AttributeError, KeyError, TypeError, ValueError)."""
        w.last_seen = asyncio.get_running_loop().time()
        op = msg.get("op")
        if op == "tokens":
            self.on_tokens(msg["t"] - w.offset_ns, msg["n"])
        elif op == "rec":
            entry = self._pending.pop(msg["request_id"], None)
            if entry is not None:
                w.in_flight -= 1
                if not entry[0].done():
                    entry[0].set_result(aligned(record_from_wire(msg), w))
        elif op == "load":
            w.load = (msg["cpu"], msg["lag"], msg.get("wait"))
        elif op == "event":
            self.on_event(event_from_record(msg["t"] - w.offset_ns, msg["kind"], {**msg["value"], "worker": w.index}))
        elif op == "notice":
            self.on_notice(f"{w.name}: {msg['text']}")

    def lost(self, w: Worker, how: str) -> None:
        """Worker ``w`` is gone (``how``: "was killed by SIGKILL", ...): its requests are failed first,
        the session told second, in the same loop step, so the runner, told to stop, launches nothing
        more before their tasks wake up."""
        if not w.alive:
            return
        w.alive = False
        self._alive = [x for x in self._alive if x.alive]
        why = f"{w.name} {how}" + (" while specload was stopping" if self.closing else "")
        for rid, (fut, owner) in list(self._pending.items()):
            if owner is w:
                del self._pending[rid]
                if not fut.done():
                    fut.set_exception(WorkerLost(why))
        w.in_flight = 0
        if not self.closing:
            self.on_worker_lost(w.index, why, len(self._alive))

    async def _watch_silence(self) -> None:
        """A worker reports its load every second; one silent for ``heartbeat_timeout_s`` is hung
        (stopped, deadlocked) and is killed. Only the time this loop was listening counts: when it was
        held up itself (a busy machine), what the workers said meanwhile is still unread."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            late = now - last - 1.0
            if late > 0.1:
                for w in self._alive:
                    w.last_seen += late
            last = now
            for w in list(self._alive):
                if w.why is None and now - w.last_seen > self.heartbeat_timeout_s:
                    w.why = f"sent nothing for {self.heartbeat_timeout_s:g} s (hung or stopped); killed"
                    self.transport.kill(w, w.why)

    async def send(
        self, prompt: str | list[dict], *, request_id: int = 0, level: int = 0, level_index: int = 0,
        warmup: bool = False, max_tokens: int | None = None, prompt_tokens_requested: int | None = None,
        reply: bool = False,
    ) -> RequestRecord:
        start = time.perf_counter_ns()
        if not self._alive:
            return _ended_record(request_id, level, level_index, warmup, start, ErrorKind.LOST, "no load worker left")
        w = min(self._alive, key=lambda x: x.in_flight)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (fut, w)
        w.in_flight += 1
        self.transport.send(w, {"op": "send", "id": request_id, "prompt": prompt, "level": level,
                                "level_index": level_index, "warmup": warmup, "max_tokens": max_tokens,
                                "ptr": prompt_tokens_requested, "reply": reply})
        try:
            return await asyncio.shield(fut)  # a cancel leaves fut to the worker's own record of it
        except asyncio.CancelledError:
            if not self.closing and w.alive:
                self.transport.cancel(w, request_id)
            try:
                async with asyncio.timeout(5):
                    rec = await asyncio.shield(fut)
            except WorkerLost as e:
                # the worker died first (a run stopped because of it cancels every request): the
                # request was lost, not cancelled
                rec = _ended_record(request_id, level, level_index, warmup, start, ErrorKind.LOST, str(e))
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - no record came back: cancelled
                if self._pending.pop(request_id, None) is not None:
                    w.in_flight -= 1
                rec = _ended_record(request_id, level, level_index, warmup, start, ErrorKind.CANCELLED,
                                    "cancelled by specload")
            self.on_cancelled(rec)
            raise
        except WorkerLost as e:
            return _ended_record(request_id, level, level_index, warmup, start, ErrorKind.LOST, str(e))

    def failed(self, rid: int, exc: BaseException) -> None:
        """A request the transport could not carry (no record will come): its send raises ``exc``."""
        entry = self._pending.pop(rid, None)
        if entry is not None:
            entry[1].in_flight -= 1
            if not entry[0].done():
                entry[0].set_exception(exc)

    async def close(self) -> None:
        self.closing = True
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        await self.transport.close()
        self._alive = []

    async def __aenter__(self) -> WorkerPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------------- processes on pipes


class Pipes:
    """The transport to worker processes of this machine (``python -m specload.engine.workers``):
    JSON lines on their stdin and stdout, one reader task each. The load starts once every worker
    has said it is up: one still starting (seconds, on a busy machine) is not judged silent, and
    requests do not wait in its pipe meanwhile."""

    @property
    def timeline(self) -> dict:
        return local_timeline(workers=True)

    def __init__(self) -> None:
        self._readers: list[asyncio.Task] = []
        self._workers: list[Worker] = []

    async def start(self, pool: WorkerPool) -> list[Worker]:
        up: list[asyncio.Event] = []
        for i in range(pool.n):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "specload.engine.workers",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=_STREAM_LIMIT,
            )
            w = Worker(i, proc, name=f"worker {i} (pid {proc.pid})", pid=proc.pid)
            self._write(w, pool.init)
            self._workers.append(w)
            up.append(asyncio.Event())
            self._readers.append(asyncio.ensure_future(self._read(pool, w, up[-1])))
        # one that does not come up in time is judged by the pool's silence watch
        waits = [asyncio.ensure_future(e.wait()) for e in up]
        try:
            await asyncio.wait(waits, timeout=START_S)
        finally:
            for t in waits:
                t.cancel()
        return self._workers

    @staticmethod
    def _write(w: Worker, obj: dict) -> None:
        # its pipe is closing: the reader reports the worker lost, and fails its requests
        with contextlib.suppress(ConnectionError, RuntimeError):
            w.handle.stdin.write(orjson.dumps(obj) + b"\n")

    def send(self, w: Worker, msg: dict) -> None:
        self._write(w, msg)

    def cancel(self, w: Worker, rid: int) -> None:
        self._write(w, {"op": "cancel", "id": rid})

    def kill(self, w: Worker, why: str) -> None:
        w.why = why
        w.handle.kill()  # its reader sees the pipe close and reports it lost

    async def _read(self, pool: WorkerPool, w: Worker, up: asyncio.Event) -> None:
        proc = w.handle
        try:
            while line := await proc.stdout.readline():
                up.set()  # its first line (or its end) says it is up, or will never be
                try:
                    pool.heard(w, orjson.loads(line))
                except (AttributeError, KeyError, TypeError, ValueError) as e:
                    # not the protocol: nothing it says can be trusted any more
                    w.why = f"sent a line that is not the worker protocol ({type(e).__name__}); killed"
                    break
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as e:
            w.why = f"its pipe failed ({type(e).__name__}); killed"
        up.set()
        if w.why is not None and proc.returncode is None:
            proc.kill()
        try:
            async with asyncio.timeout(5):
                code = await proc.wait()
        except TimeoutError:
            # it closed its output but lives on: of no use any more
            proc.kill()
            code = await proc.wait()
        pool.lost(w, w.why or exit_description(code))

    async def close(self) -> None:
        for w in self._workers:
            if w.alive:
                self._write(w, {"op": "exit"})
        for w in self._workers:
            try:
                async with asyncio.timeout(10):
                    await w.handle.wait()
            except TimeoutError:
                w.handle.kill()
                await w.handle.wait()
        # the readers end on their own once the workers' output closes
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await asyncio.gather(*self._readers, return_exceptions=True)
        for t in self._readers:
            t.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


async def _worker_main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STREAM_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    w_transport, w_protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    out = asyncio.StreamWriter(w_transport, w_protocol, None, loop)

    def emit(obj: dict | None) -> None:
        if obj is not None:
            out.write(orjson.dumps(obj) + b"\n")

    worker = StreamWorker(orjson.loads(await reader.readline()), say=emit)
    await worker.start()
    emit({"op": "ready"})
    sends: set[asyncio.Task] = set()

    async def one(msg: dict) -> None:
        emit(await worker.send(msg))

    async def report() -> None:
        while True:
            await asyncio.sleep(0.05)
            emit(worker.tokens())

    reporter = asyncio.ensure_future(report())
    try:
        while line := await reader.readline():
            msg = orjson.loads(line)
            op = msg.get("op")
            if op == "send":
                t = asyncio.ensure_future(one(msg))
                sends.add(t)
                t.add_done_callback(sends.discard)
            elif op == "cancel":
                await worker.cancel(msg["id"])
            elif op == "exit":
                break
    finally:
        await worker.stop()  # its requests end cancelled, and their records go out
        await asyncio.gather(*sends, return_exceptions=True)
        emit(worker.tokens())
        reporter.cancel()
        # retrieved, or the cancelled task prints "exception was never retrieved" at exit
        await asyncio.gather(reporter, return_exceptions=True)
        await out.drain()


def main() -> None:
    # Ctrl-C in the terminal reaches the whole process group: the main process decides what
    # happens to in-flight requests (recorded as cancelled), so workers ignore it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        asyncio.run(_worker_main())
    os._exit(0)


if __name__ == "__main__":
    main()
