"""``--ray``: the ``--workers`` pool's transport to Ray actors, so that the load can come from many machines.

The runner, the record and the live statistics stay in this process (the Ray driver); each load
worker is a Ray actor (``StreamWorker``, as a ``--workers`` process runs it) with one CPU, spread
over the nodes. The pool is ``WorkerPool`` (engine/workers.py) with ``RayActors`` as its transport:
a request is one actor call whose answer is its record; tokens, load samples and events are polled
from each actor ten times a second.

Time: durations (TTFT, E2E, chunk offsets) never mix two clocks. Only a record's start and end and
the live token times move onto the driver's clock, by the actor's offset: zero on this machine (the
same boot id), else estimated NTP-style from the round trip that was shortest (its half-RTT bounds
the error), refined on every poll. ``timeline`` says which for each actor; the record carries it.

Faults: an actor that dies is seen by Ray (``RayActorError``) or as silence on the polls; as with
processes, its in-flight requests come back as ``lost`` records naming it, and nothing more is sent
to it. Ray is optional (``pip install "specload[ray]"``) and imported only here, only when used.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import importlib.util
import io
import logging
import os
import sys
import threading
import time
from typing import Any

from specload.engine.workers import StreamWorker, Worker, WorkerPool, boot_id

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


def offset_sample(w: Worker, t0: int, remote: int, t1: int) -> None:
    """One clock sample (sent at ``t0``, the actor's clock read ``remote``, answered at ``t1``): the
    offset comes from the sample with the shortest round trip, whose half bounds its error."""
    rtt = t1 - t0
    if w.rtt_ns is None or rtt < w.rtt_ns:
        w.rtt_ns = rtt
        w.offset_ns = remote - (t0 + t1) // 2


class RayActors:
    """The pool's transport to Ray actors: started here (``local``) or joined (an address)."""

    def __init__(self, address: str = "local", *, start_timeout_s: float = 120.0) -> None:
        self.address = address
        self.start_timeout_s = start_timeout_s
        self._pool: WorkerPool | None = None
        self._actors: list[Worker] = []
        self._calls: set[asyncio.Task] = set()
        self._owns_ray = False
        self._release = threading.Event()  # lets the thread that started Ray end (see _connect_bounded)
        self._poller: asyncio.Task | None = None
        self._ray: Any = None

    @property
    def timeline(self) -> dict:
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

    async def start(self, pool: WorkerPool) -> list[Worker]:
        self._pool = pool
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
            await self._connect_bounded(ray, pool.n)
        actor_cls = ray.remote(StreamWorker).options(
            num_cpus=ACTOR_CPUS, max_concurrency=100_000, scheduling_strategy="SPREAD", max_restarts=0)
        self._actors = [Worker(i, actor_cls.remote(pool.init)) for i in range(pool.n)]
        try:
            async with asyncio.timeout(self.start_timeout_s):
                infos = await asyncio.gather(*(a.handle.start.remote() for a in self._actors))
        except TimeoutError:
            self._kill_all()
            raise RayStartError(
                f"the {pool.n} Ray actors did not all start within {self.start_timeout_s:g} s: each takes "
                f"{ACTOR_CPUS} CPU and the cluster has {ray.available_resources().get('CPU', 0):g} free"
            ) from None
        mine = boot_id()
        for a, info in zip(self._actors, infos, strict=True):
            a.pid, a.host, a.same_machine = info["pid"], info["host"], info["boot_id"] == mine
            a.name = f"ray actor {a.index} (pid {a.pid} on {a.host})"
            if not a.same_machine:
                for _ in range(5):
                    t0 = time.perf_counter_ns()
                    remote = await a.handle.clock.remote()
                    offset_sample(a, t0, remote, time.perf_counter_ns())
        self._poller = asyncio.ensure_future(self._poll(pool))
        return self._actors

    async def _connect_bounded(self, ray: Any, n: int) -> None:
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
                self._connect(ray, n)
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

    def _connect(self, ray: Any, n: int) -> None:
        # ray.init turns on faulthandler on sys.stderr, which under the TUI is Textual's capture with
        # no file descriptor ("file.fileno() is not a valid file descriptor"): on the real stderr
        # first, and Ray leaves it be
        if not faulthandler.is_enabled() and sys.__stderr__ is not None:
            with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):
                faulthandler.enable(file=sys.__stderr__, all_threads=False)
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.address == "local":
            # a Ray instance for this run only, with room for every actor
            ray.init(num_cpus=max(n * ACTOR_CPUS, os.cpu_count() or 1), include_dashboard=False, **quiet)
        else:
            ray.init(address=self.address, **quiet)
        self._owns_ray = True

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        ray = self._ray
        if ray is not None:
            stops = [a.handle.stop.remote() for a in self._actors if a.alive]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await asyncio.gather(*stops, return_exceptions=True)
            self._kill_all()
            for t in self._calls:
                t.cancel()
            await asyncio.gather(*self._calls, return_exceptions=True)
            if self._owns_ray:
                await asyncio.to_thread(ray.shutdown)
        self._release.set()

    def _kill_all(self) -> None:
        for a in self._actors:
            try:
                self._ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone; nothing to clean
                pass

    # ------------------------------------------------------------------ the load

    def send(self, w: Worker, msg: dict) -> None:
        call = asyncio.ensure_future(self._call(w, msg["id"], w.handle.send.remote(msg)))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

    async def _call(self, w: Worker, rid: int, ref: Any) -> None:
        """One request's call: its answer is its record (a cancelled one too)."""
        pool, ray = self._pool, self._ray
        assert pool is not None
        try:
            wire = await ref
        except ray.exceptions.RayActorError as e:
            pool.lost(w, _reason(e))
        except ray.exceptions.RayError as e:
            pool.failed(rid, e)
        else:
            pool.heard(w, wire)

    def cancel(self, w: Worker, rid: int) -> None:
        w.handle.cancel.remote(rid)

    def kill(self, w: Worker, why: str) -> None:
        try:
            self._ray.kill(w.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        assert self._pool is not None
        self._pool.lost(w, why)

    async def _poll(self, pool: WorkerPool) -> None:
        """Tokens, load and the client's events from every actor, ten times a second; each poll is
        also a clock sample and a heartbeat."""
        while True:
            await asyncio.sleep(POLL_S)
            await asyncio.gather(*(self._poll_one(pool, a) for a in self._actors if a.alive))

    async def _poll_one(self, pool: WorkerPool, a: Worker) -> None:
        t0 = time.perf_counter_ns()
        try:
            async with asyncio.timeout(max(1.0, pool.heartbeat_timeout_s / 3)):
                p = await a.handle.poll.remote()
        except self._ray.exceptions.RayActorError as e:
            pool.lost(a, _reason(e))
            return
        except TimeoutError:
            return  # the pool judges the silence
        a.last_seen = asyncio.get_running_loop().time()
        if not a.same_machine:
            offset_sample(a, t0, p["now_ns"], time.perf_counter_ns())
        for msg in p["said"]:
            pool.heard(a, msg)


def _reason(e: BaseException) -> str:
    """Ray's long multi-line error as one short line: how the actor died."""
    text = " ".join(str(e).split())
    for marker in ("The actor died because", "The actor is dead because", "Reason:"):
        i = text.find(marker)
        if i >= 0:
            text = text[i:]
            break
    return f"died ({type(e).__name__}: {text[:200]})"
