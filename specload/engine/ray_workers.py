"""``--ray``: the ``--workers`` split on Ray actors, so that the load can come from many machines.

The runner, the record and the live statistics stay in this process (the Ray driver); each load
worker is a Ray actor (``StreamWorker``: one asyncio loop with one ``StreamingClient``, built from
the same init data as a ``--workers`` process) placed on the cluster with one CPU each, spread over
the nodes. ``RayPoolClient`` has the interface of ``StreamingClient`` and ``WorkerPoolClient``, so
nothing else knows where the load comes from: each request is sent by one actor and comes back as
one record, so nothing is sent or counted twice; tokens and load samples are polled from each actor
ten times a second.

Time: an actor measures its requests with its own CLOCK_MONOTONIC, and durations (TTFT, E2E,
chunk offsets) never mix two clocks. Only a record's start and end and the live token times are
moved onto the driver's clock, by the actor's offset: zero when the actor runs on this machine
(the same boot id: one CLOCK_MONOTONIC), else estimated NTP-style from round trips (the sample
with the shortest round trip; its half-RTT bounds the error) at start and refined on every poll.
``timeline`` says which for each actor; the record's header carries it.

Faults: an actor that dies (its process, or its node) is seen by Ray (``RayActorError`` on a call)
or by silence on the polls; as with ``--workers``, its in-flight requests come back as ``lost``
records naming it, nothing more is sent to it, and the session continues or stops.

Ray is optional (``pip install "specload[ray]"``) and imported only here, only when used.
"""

from __future__ import annotations

import asyncio
import faulthandler
import importlib.util
import io
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specload.config import RequestConfig, TargetConfig
from specload.datatypes import RequestRecord, RunEvent
from specload.engine.client import StreamingClient
from specload.engine.workers import (
    cancelled_record,
    client_from_init,
    lost_record,
    record_from_wire,
    record_to_wire,
    worker_init,
)
from specload.secrets import Scrubber

RAY_MISSING = 'Ray is not installed: pip install "specload[ray]"'


class RayStartError(RuntimeError):
    """Ray could not give the run its actors (no cluster there, not enough CPUs); one line."""
POLL_S = 0.1
# the actors take one CPU each: one event loop per core is the point of more than one worker
ACTOR_CPUS = 1


def ray_available() -> bool:
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a module hidden with sys.modules["ray"] = None
        return False


def loopback_ray() -> None:
    """Settings for a Ray instance that lives and dies with one run on this machine, read by Ray
    when it is first imported: nothing reported over the internet (usage statistics), and every
    Ray process on 127.0.0.1. Without the second, Ray binds its processes to the machine's network
    address even for a single-node instance (it turns 127.0.0.1 into that address on purpose)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's C++ handler for SIGTERM (and fatal signals) would replace specload's: SIGTERM must end
    # the run as Ctrl-C does, with the record closed
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    # the switch Ray has for single-machine platforms: node address = loopback
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def boot_id() -> str:
    """Machines differ, and so does one machine across reboots: processes with the same boot id
    share one CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return f"host:{socket.gethostname()}"


class StreamWorker:
    """The Ray actor: one event loop streaming the requests the driver sends it.

    Plain class, made a Ray actor with ``ray.remote`` by the driver (so importing this module does
    not need Ray). Every method is async: they all run on the actor's one event loop.
    """

    def __init__(self, init: dict) -> None:
        self._init = init
        self._client: StreamingClient | None = None
        self._tasks: dict[int, asyncio.Task] = {}
        self._cancelled: dict[int, RequestRecord] = {}
        self._tokens = 0.0  # a chunk's tokens may be a share of a multi-token chunk's count
        self._tokens_t = 0
        self._load: tuple[float, float, float | None] | None = None
        self._monitor_task: asyncio.Task | None = None
        # the client's run events and notices (the switch to new connections), until the next poll
        self._said: list[dict] = []

    def _on_tokens(self, t: int, n: float) -> None:
        self._tokens += n
        self._tokens_t = t

    def _on_cancelled(self, rec: RequestRecord) -> None:
        self._cancelled[rec.request_id] = rec

    async def start(self) -> dict:
        from specload.stats.client_load import ClientLoadMonitor

        self._client = client_from_init(self._init, self._on_tokens, self._on_cancelled)
        self._client.on_event = lambda ev: self._said.append({"t": ev.t_ns, "kind": ev.kind, "value": ev.value})
        self._client.on_notice = lambda text: self._said.append({"text": text})
        await self._client.start()

        def sample(s) -> None:
            self._load = (s.cpu_pct, s.loop_lag_ms, s.lag_cpu_wait_ms)

        self._monitor_task = asyncio.ensure_future(ClientLoadMonitor(on_sample=sample).run())
        return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": boot_id(),
                "now_ns": time.perf_counter_ns()}

    async def clock(self) -> int:
        return time.perf_counter_ns()

    async def send(self, msg: dict) -> dict:
        assert self._client is not None
        rid = msg["id"]
        task = asyncio.ensure_future(self._client.send(
            msg["prompt"], request_id=rid, level=msg["level"], level_index=msg["level_index"], warmup=msg["warmup"],
            max_tokens=msg.get("max_tokens"), prompt_tokens_requested=msg.get("ptr")))
        self._tasks[rid] = task
        try:
            rec = await task
        except asyncio.CancelledError:
            # cancelled through cancel(): the client handed its cancelled record to _on_cancelled
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

    async def poll(self) -> dict:
        n, self._tokens = self._tokens, 0
        said, self._said = self._said, []
        return {"now_ns": time.perf_counter_ns(), "n": n, "t": self._tokens_t, "load": self._load, "said": said}

    async def stop(self) -> None:
        for t in list(self._tasks.values()):
            t.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._monitor_task is not None:
            self._monitor_task.cancel()
        if self._client is not None:
            await self._client.close()


@dataclass
class _Actor:
    index: int
    handle: Any  # a Ray ActorHandle: its remote methods are made at run time, no type describes them
    pid: int = 0
    host: str = ""
    same_machine: bool = False
    offset_ns: int = 0  # actor clock - driver clock
    rtt_ns: int | None = None  # the round trip of the sample the offset comes from
    alive: bool = True
    in_flight: int = 0
    load: tuple = field(default_factory=lambda: (None, None, None))
    last_seen: float = 0.0

    @property
    def name(self) -> str:
        return f"ray actor {self.index} (pid {self.pid} on {self.host})"


class RayPoolClient:
    """The load workers as Ray actors; the interface of ``WorkerPoolClient``."""

    def __init__(
        self,
        n: int,
        base_url: str,
        flavour: str,
        *,
        address: str = "local",
        model: str | None = None,
        target: TargetConfig | None = None,
        request: RequestConfig | None = None,
        headers: dict[str, str] | None = None,
        on_tokens: Callable[[int, float], None] | None = None,
        scrubber: Scrubber | None = None,
        heartbeat_timeout_s: float = 30.0,
        start_timeout_s: float = 120.0,
        **_: object,
    ) -> None:
        self.n = n
        self.address = address
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.start_timeout_s = start_timeout_s
        self._init = worker_init(base_url, flavour, model=model, target=target, request=request, headers=headers,
                                 scrubber=scrubber)
        self.on_tokens = on_tokens or (lambda t, n: None)
        self.on_cancelled: Callable[[RequestRecord], None] = lambda rec: None
        self.on_worker_lost: Callable[[int, str, int], None] = lambda index, why, left: None
        # what the actors' clients say (the switch to new connections), as WorkerPoolClient passes on
        self.on_event: Callable[[RunEvent], None] = lambda ev: None
        self.on_notice: Callable[[str], None] = lambda text: None
        self._actors: list[_Actor] = []
        self._alive: list[_Actor] = []
        self._owns_ray = False
        self._release = threading.Event()  # lets the thread that started Ray end (see start)
        self._poller: asyncio.Task | None = None
        self._closing = False
        self._ray = None

    # ------------------------------------------------------------------ the pool's state

    @property
    def worker_loads(self) -> list[tuple[float | None, float | None, float | None]]:
        return [a.load for a in self._alive]

    @property
    def workers_alive(self) -> int:
        return len(self._alive)

    @property
    def worker_pids(self) -> list[int]:
        return [a.pid for a in self._actors]

    @property
    def worker_in_flight(self) -> list[int]:
        return [a.in_flight if a.alive else 0 for a in self._actors]

    @property
    def timeline(self) -> dict:
        """How each actor's times were put on the driver's clock, for the record's header."""
        return {
            "clock": "CLOCK_MONOTONIC of each Ray actor, moved onto the driver's",
            "alignment": "same machine: one clock, offset 0; other machines: offset from the round "
                         "trip with the shortest time (error at most half of it), refined on every poll",
            "workers": [
                {"worker": a.index, "host": a.host, "pid": a.pid, "same_machine": a.same_machine,
                 "offset_ns": a.offset_ns, "rtt_ns": a.rtt_ns}
                for a in self._actors
            ],
        }

    # ------------------------------------------------------------------ start and stop

    async def start(self) -> None:
        if self._actors:
            return
        if self.address == "local":
            loopback_ray()
        else:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
        try:
            import ray
        except ImportError:
            raise RayStartError(RAY_MISSING) from None
        self._ray = ray
        if not ray.is_initialized():
            await self._connect_bounded(ray)
        actor_cls = ray.remote(StreamWorker).options(
            num_cpus=ACTOR_CPUS, max_concurrency=100_000, scheduling_strategy="SPREAD", max_restarts=0)
        self._actors = [_Actor(i, actor_cls.remote(self._init)) for i in range(self.n)]
        mine = boot_id()
        try:
            async with asyncio.timeout(self.start_timeout_s):
                infos = await asyncio.gather(*(a.handle.start.remote() for a in self._actors))
        except TimeoutError:
            await self._kill_all()
            raise RayStartError(
                f"the {self.n} Ray actors did not all start within {self.start_timeout_s:g} s: each takes "
                f"{ACTOR_CPUS} CPU and the cluster has {ray.available_resources().get('CPU', 0):g} free"
            ) from None
        loop = asyncio.get_running_loop()
        for a, info in zip(self._actors, infos, strict=True):
            a.pid, a.host, a.last_seen = info["pid"], info["host"], loop.time()
            a.same_machine = info["boot_id"] == mine
            if not a.same_machine:
                for _ in range(5):
                    t0 = time.perf_counter_ns()
                    remote = await a.handle.clock.remote()
                    self._offset_sample(a, t0, remote, time.perf_counter_ns())
        self._alive = list(self._actors)
        self._poller = asyncio.ensure_future(self._poll())

    async def _connect_bounded(self, ray) -> None:
        """ray.init, bounded: a wrong address makes it retry for many minutes (and a blocked call
        cannot be cancelled), so nobody answering on the port is an error at once, and the call runs
        in a daemon thread that is waited for at most ``start_timeout_s`` (an interrupt stops the
        wait; the thread never holds the process at exit)."""
        if self.address not in ("local", "auto"):
            host, _, port = self.address.removeprefix("ray://").rpartition(":")
            try:
                await asyncio.wait_for(asyncio.open_connection(host.strip("[]") or "127.0.0.1", int(port)), 5)
            except (OSError, ValueError, TimeoutError) as e:
                raise RayStartError(f"no Ray cluster answers at {self.address}: {type(e).__name__}: "
                                    f"{' '.join(str(e).split())[:150]}") from None
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()

        def settle(exc: BaseException | None) -> None:
            if not done.done():
                done.set_exception(exc) if exc is not None else done.set_result(None)

        def connect() -> None:
            try:
                self._connect(ray)
            except BaseException as e:  # noqa: BLE001 - handed to the loop whatever it is
                loop.call_soon_threadsafe(settle, e)
                return
            loop.call_soon_threadsafe(settle, None)
            # The thread that called ray.init stays until the run ends: Ray's calls from the loop's
            # thread (creating actors) hang for good once it has exited.
            self._release.wait()

        threading.Thread(target=connect, name="ray-init", daemon=True).start()
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await done
        except TimeoutError:
            raise RayStartError(f"Ray at {self.address!r} did not answer within {self.start_timeout_s:g} s") from None
        except Exception as e:  # noqa: BLE001 - Ray's errors for a wrong address vary by version
            raise RayStartError(f"cannot start or join Ray at {self.address!r}: "
                                f"{' '.join(str(e).split())[:200]}") from None

    def _connect(self, ray) -> None:
        # ray.init turns on faulthandler on sys.stderr, which under the TUI is Textual's capture with
        # no file descriptor ("file.fileno() is not a valid file descriptor"): on the real stderr
        # first, and Ray leaves it be
        if not faulthandler.is_enabled() and sys.__stderr__ is not None:
            try:
                faulthandler.enable(file=sys.__stderr__, all_threads=False)
            except (ValueError, OSError, io.UnsupportedOperation):
                pass
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.address == "local":
            # a Ray instance for this run only, with room for every actor
            ray.init(num_cpus=max(self.n * ACTOR_CPUS, os.cpu_count() or 1), include_dashboard=False, **quiet)
        else:
            ray.init(address=self.address, **quiet)
        self._owns_ray = True

    @staticmethod
    def _offset_sample(a: _Actor, t0: int, remote: int, t1: int) -> None:
        rtt = t1 - t0
        if a.rtt_ns is None or rtt < a.rtt_ns:
            a.rtt_ns = rtt
            a.offset_ns = remote - (t0 + t1) // 2

    async def close(self) -> None:
        self._closing = True
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        ray = self._ray
        if ray is not None:
            stops = [a.handle.stop.remote() for a in self._alive]
            try:
                async with asyncio.timeout(10):
                    await asyncio.gather(*stops, return_exceptions=True)
            except TimeoutError:
                pass
            await self._kill_all()
            if self._owns_ray:
                await asyncio.to_thread(ray.shutdown)
        self._release.set()
        self._alive = []

    async def _kill_all(self) -> None:
        ray = self._ray
        assert ray is not None
        for a in self._actors:
            try:
                ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone; nothing to clean
                pass

    async def __aenter__(self) -> RayPoolClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the load

    async def _poll(self) -> None:
        """Tokens and load from every actor, ten times a second; each poll is also a clock sample
        and a heartbeat."""
        while True:
            await asyncio.sleep(POLL_S)
            await asyncio.gather(*(self._poll_one(a) for a in list(self._alive)))

    async def _poll_one(self, a: _Actor) -> None:
        ray = self._ray
        assert ray is not None
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter_ns()
        try:
            async with asyncio.timeout(max(1.0, self.heartbeat_timeout_s / 3)):
                p = await a.handle.poll.remote()
        except ray.exceptions.RayActorError as e:
            self._gone(a, _reason(e))
            return
        except TimeoutError:
            if loop.time() - a.last_seen > self.heartbeat_timeout_s:
                ray.kill(a.handle, no_restart=True)
                self._gone(a, f"answered nothing for {self.heartbeat_timeout_s:g} s (hung); killed")
            return
        a.last_seen = loop.time()
        if not a.same_machine:
            self._offset_sample(a, t0, p["now_ns"], time.perf_counter_ns())
        if p["n"]:
            self.on_tokens(p["t"] - a.offset_ns, p["n"])
        if p["load"] is not None:
            a.load = tuple(p["load"])
        for said in p.get("said", ()):  # the actor's client switched to new connections, say
            if "text" in said:
                self.on_notice(f"{a.name}: {said['text']}")
            else:
                self.on_event(RunEvent(said["t"] - a.offset_ns, said["kind"], {**said["value"], "worker": a.index}))

    def _gone(self, a: _Actor, why: str) -> None:
        if not a.alive:
            return
        a.alive = False
        a.in_flight = 0
        self._alive = [x for x in self._alive if x.alive]
        if not self._closing:
            self.on_worker_lost(a.index, f"{a.name} {why}", len(self._alive))

    async def send(
        self, prompt: str, *, request_id: int = 0, level: int = 0, level_index: int = 0, warmup: bool = False,
        max_tokens: int | None = None, prompt_tokens_requested: int | None = None,
    ) -> RequestRecord:
        start = time.perf_counter_ns()
        if not self._alive:
            return lost_record(request_id, level, level_index, warmup, start, "no load worker left")
        ray = self._ray
        assert ray is not None
        a = min(self._alive, key=lambda x: x.in_flight)
        a.in_flight += 1
        msg = {"id": request_id, "prompt": prompt, "level": level, "level_index": level_index, "warmup": warmup,
               "max_tokens": max_tokens, "ptr": prompt_tokens_requested}
        ref = a.handle.send.remote(msg)
        try:
            wire = await ref
        except asyncio.CancelledError:
            rec = await self._cancel(a, ref, request_id, level, level_index, warmup, start)
            self.on_cancelled(rec)
            raise
        except ray.exceptions.RayActorError as e:
            why = f"{a.name} {_reason(e)}"
            self._gone(a, _reason(e))
            return lost_record(request_id, level, level_index, warmup, start, why)
        finally:
            if a.alive:
                a.in_flight -= 1
        return self._aligned(record_from_wire(wire), a)

    async def _cancel(
        self, a: _Actor, ref: object, rid: int, level: int, level_index: int, warmup: bool, start: int
    ) -> RequestRecord:
        """The runner cancelled the request: the actor cancels it and hands back its record."""
        ray = self._ray
        assert ray is not None
        try:
            if a.alive:
                a.handle.cancel.remote(rid)
            async with asyncio.timeout(5):
                wire = await ref
            return self._aligned(record_from_wire(wire), a)
        except ray.exceptions.RayActorError as e:
            # it died first (a run stopped because of that cancels every request): lost, not cancelled
            self._gone(a, _reason(e))
            return lost_record(rid, level, level_index, warmup, start, f"{a.name} {_reason(e)}")
        except (TimeoutError, asyncio.CancelledError, ray.exceptions.RayError):
            return cancelled_record(rid, level, level_index, warmup, start)

    @staticmethod
    def _aligned(rec: RequestRecord, a: _Actor) -> RequestRecord:
        if not a.offset_ns:
            return rec
        from dataclasses import replace

        return replace(rec, start_ns=rec.start_ns - a.offset_ns, end_ns=rec.end_ns - a.offset_ns)


def _reason(e: BaseException) -> str:
    """Ray's long multi-line error as one short line: how the actor died."""
    text = " ".join(str(e).split())
    for marker in ("The actor died because", "The actor is dead because", "Reason:"):
        i = text.find(marker)
        if i >= 0:
            text = text[i:]
            break
    return f"died ({type(e).__name__}: {text[:200]})"
