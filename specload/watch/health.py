"""Health polling: is the server up? Emitted as a ``HealthChanged`` event on every change.

``HealthMonitor`` GETs the health URL (``/health`` on SGLang, vLLM and llama-server) every
``interval`` seconds and reports only transitions, each with a detail a person can read ("HTTP
503", "connection refused", "timeout after 2 s"). Connection refused means the process is gone
or restarting, so it marks the server down at once; a timeout or an error status can be a loaded
server being slow, so those need ``down_after`` consecutive failures. The engine, which sees
refused connections first, can short-cut the wait with ``mark_down``.

The checks run on a thread of their own, with its own event loop: a client whose loop the load
saturates (10,000 streams can make each of its turns last seconds) must not time its own backlog
as the server's answer and declare a healthy server down. Only the verdicts cross to the caller's
loop, where the state lives (``observe`` and ``mark_down`` run there and nowhere else). A thread can
be starved too, by other processes on a busy machine: a check that timed out while its own thread,
or the main thread (which holds the interpreter's lock while it waits for a CPU, so the checks wait
with it), spent half the timeout waiting for a CPU (the kernel's run-queue wait) gives no verdict.
Nor does a timeout while the load's streams kept receiving tokens since the last check (``streamed``):
a server too busy to answer its health check in time while it streams is slow, not down.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import HealthChanged, RunEvent
from specload.neterrors import connect_reason, is_client_side
from specload.stats.client_load import RunQueueWait

HealthFn = Callable[[RunEvent, str], None]
# a check every second, each given 2 s (read when a monitor is made: a test may shorten them)
INTERVAL_S = 1.0
TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class HealthCheck:
    ok: bool
    detail: str
    refused: bool = False  # the port is closed: down at once, no second chance
    client_side: bool = False  # the check failed in specload itself (no file descriptor): no verdict


def starved_check(check: HealthCheck, cpu_wait_s: float | None, timeout_s: float) -> HealthCheck:
    """A timed-out check whose thread waited for a CPU for half the timeout or more is no verdict:
    the server had too little of the time to answer in."""
    if check.ok or cpu_wait_s is None or not check.detail.startswith("timeout") or cpu_wait_s < timeout_s / 2:
        return check
    return HealthCheck(False, f"{check.detail}, {cpu_wait_s:.1f} s of it waiting for a CPU here: no verdict",
                       client_side=True)


class HealthMonitor:
    """Poll a health URL; call ``on_change(HealthChanged(t, "up"|"down"), detail)`` on changes.

    The first check always emits (the state goes from unknown to up or down), so a recording
    starts with the server's state.
    """

    def __init__(
        self,
        url: str,
        interval: float | None = None,
        timeout: float | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_change: HealthFn | None = None,
        down_after: int = 2,
        streamed: Callable[[], float] | None = None,
    ) -> None:
        self.url = url
        self.interval = INTERVAL_S if interval is None else interval
        self.timeout = TIMEOUT_S if timeout is None else timeout
        self.down_after = max(1, down_after)
        self.state: str | None = None  # None (not yet known), "up", "down"
        self.detail: str = ""
        self.events: list[RunEvent] = []
        self.checks = 0
        self._clock = clock
        self._on_change = on_change
        self._failures = 0
        self._streamed = streamed  # the tokens the load has received so far
        self._streamed_seen: float | None = None  # ... as at the last check
        self._stop = threading.Event()
        self._wake: Callable[[], None] = lambda: None  # the checking thread's stop, once it runs
        self._first = asyncio.Event()  # set by the first verdict (or the thread's end)

    def _set(self, state: str, detail: str) -> None:
        self.detail = detail
        if state == self.state:
            return
        self.state = state
        event = HealthChanged(self._clock.now_ns(), state)
        self.events.append(event)
        if self._on_change is not None:
            self._on_change(event, detail)

    def mark_down(self, reason: str) -> None:
        """Mark the server down now (e.g. the engine saw connection refused); polls bring it back."""
        self._failures = self.down_after
        self._set("down", reason)

    def observe(self, check: HealthCheck) -> None:
        """Fold one check result into the state (public so tests and replays can drive it)."""
        if check.client_side:
            self.detail = check.detail
            return
        if self._streaming() and not check.ok and check.detail.startswith("timeout"):
            self.detail = f"{check.detail} while its streams went on: slow, not down"
            return
        if check.ok:
            self._failures = 0
            self._set("up", check.detail)
            return
        self._failures += 1
        if check.refused or self._failures >= self.down_after or self.state is None:
            # From "unknown", one failure is enough: there is no "up" to protect from flapping.
            self._set("down", check.detail)
        else:
            self.detail = check.detail

    def _streaming(self) -> bool:
        """Tokens came in since the last check."""
        if self._streamed is None:
            return False
        seen, self._streamed_seen = self._streamed_seen, self._streamed()
        return seen is not None and self._streamed_seen > seen

    async def check_once(self, session: aiohttp.ClientSession) -> HealthCheck:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            async with session.get(
                self.url, timeout=aiohttp.ClientTimeout(total=self.timeout), allow_redirects=False, headers={"Accept-Encoding": "identity"}
            ) as resp:
                await resp.read()
                ms = (loop.time() - t0) * 1000
                if resp.status == 200:
                    return HealthCheck(True, f"HTTP 200 in {ms:.0f} ms")
                return HealthCheck(False, f"HTTP {resp.status}")
        except aiohttp.ClientConnectorError as exc:
            if is_client_side(exc):  # out of file descriptors here: says nothing about the server
                return HealthCheck(False, connect_reason(exc), client_side=True)
            if isinstance(exc.os_error, ConnectionRefusedError):
                return HealthCheck(False, "connection refused", refused=True)
            return HealthCheck(False, f"cannot connect: {exc.os_error or exc}")
        except TimeoutError:
            return HealthCheck(False, f"timeout after {self.timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return HealthCheck(False, f"{type(exc).__name__}: {exc}")

    async def first_verdict(self) -> None:
        """Wait, bounded by one check's timeout, for the first check's verdict: a record then starts
        with the server's state before the load's first line, whatever the thread's start cost."""
        try:
            await asyncio.wait_for(self._first.wait(), self.timeout + 0.5)
        except TimeoutError:
            pass

    async def stop(self) -> None:
        self._stop.set()
        self._wake()

    async def run(self) -> None:
        """Poll until ``stop()`` or cancelled; never raises for anything the server does."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def deliver(check: HealthCheck) -> None:
            if not self._stop.is_set():
                self.checks += 1
                self.observe(check)
            self._first.set()

        def finished() -> None:
            self._first.set()
            if not done.done():
                done.set_result(None)

        def thread() -> None:
            try:
                asyncio.run(self._poll(lambda c: loop.call_soon_threadsafe(deliver, c)))
            except RuntimeError:
                pass  # the caller's loop closed while a verdict was on its way: nobody is listening
            finally:
                try:
                    loop.call_soon_threadsafe(finished)
                except RuntimeError:
                    pass

        worker = threading.Thread(target=thread, name="specload-health", daemon=True)
        worker.start()
        try:
            await done
        finally:
            self._stop.set()
            self._wake()

    async def _poll(self, deliver: Callable[[HealthCheck], object]) -> None:
        """The checking thread's loop: a check every ``interval`` seconds, each verdict delivered."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the thread's loop has ended already

        self._wake = wake
        if self._stop.is_set():
            return
        # New connection per check: with keep-alive, a restarted server shows up as a stale
        # pooled connection ("server disconnected") instead of the telling "connection refused".
        connector = aiohttp.TCPConnector(force_close=True)
        waits = (RunQueueWait(), RunQueueWait(main=True))  # this thread's, the main thread's
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                while not self._stop.is_set():
                    t0, w0 = loop.time(), [w.read() for w in waits]
                    check = await self.check_once(session)
                    waited = [(b - a) / 1e9 for a, b in zip(w0, (w.read() for w in waits), strict=True)
                              if a is not None and b is not None]
                    deliver(starved_check(check, max(waited) if waited else None, self.timeout))
                    await asyncio.sleep(max(0.0, self.interval - (loop.time() - t0)))
        except (asyncio.CancelledError, RuntimeError):
            pass  # stopped (RuntimeError: the caller's loop closed under a delivery)
        finally:
            for w in waits:
                w.close()
