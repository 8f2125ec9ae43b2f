"""Health polling: is the server up? Emitted as a ``HealthChanged`` event on every change.

``HealthMonitor`` GETs the health URL (``/health`` on SGLang, vLLM and llama-server) every
``interval`` seconds and reports only transitions, each with a detail a person can read ("HTTP
503", "connection refused", "timeout after 2 s"). Connection refused means the process is gone
or restarting, so it marks the server down at once; a timeout or an error status can be a loaded
server being slow, so those need ``down_after`` consecutive failures. The engine, which sees
refused connections first, can short-cut the wait with ``mark_down``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import HealthChanged, RunEvent
from specload.neterrors import connect_reason, is_client_side

HealthFn = Callable[[RunEvent, str], None]


@dataclass(frozen=True, slots=True)
class HealthCheck:
    ok: bool
    detail: str
    refused: bool = False  # the port is closed: down at once, no second chance
    client_side: bool = False  # the check failed in specload itself (no file descriptor): no verdict


class HealthMonitor:
    """Poll a health URL; call ``on_change(HealthChanged(t, "up"|"down"), detail)`` on changes.

    The first check always emits (the state goes from unknown to up or down), so a recording
    starts with the server's state.
    """

    def __init__(
        self,
        url: str,
        interval: float = 1.0,
        timeout: float = 2.0,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_change: HealthFn | None = None,
        down_after: int = 2,
    ) -> None:
        self.url = url
        self.interval = interval
        self.timeout = timeout
        self.down_after = max(1, down_after)
        self.state: str | None = None  # None (not yet known), "up", "down"
        self.detail: str = ""
        self.events: list[RunEvent] = []
        self.checks = 0
        self._clock = clock
        self._on_change = on_change
        self._failures = 0
        self._stop = asyncio.Event()

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

    async def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Poll until ``stop()``; never raises for anything the server does."""
        loop = asyncio.get_running_loop()
        # New connection per check: with keep-alive, a restarted server shows up as a stale
        # pooled connection ("server disconnected") instead of the telling "connection refused".
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not self._stop.is_set():
                t0 = loop.time()
                check = await self.check_once(session)
                self.checks += 1
                self.observe(check)
                wait = max(0.0, self.interval - (loop.time() - t0))
                try:
                    async with asyncio.timeout(wait):
                        await self._stop.wait()
                except TimeoutError:
                    pass
