"""The server specload starts itself: the built-in simulator (no URL given) or ``--launch CMD``.

``ServerSupervisor`` spawns it, finds its URL (the simulator prints ``listening on URL``; it binds
port 0), waits until its health endpoint answers (the progress of a slow start shown every 5 s),
watches for its exit during the run and stops it at the end (SIGTERM, then SIGKILL after the grace
period), shielded so that a cancelled teardown never leaves a server behind. When specload starts no
server (a URL without ``--launch``), the supervisor does nothing and ``url`` is the configured one.

The launched server's output is one of the log watch's sources (``launched``); the supervisor reads
the URL from those lines through ``observe_line``, which the log watch calls for every line.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any

from specload.config import RunConfig
from specload.secrets import Scrubber
from specload.watch.command import ProcessExit
from specload.watch.launch import LaunchedServer, ReadyTimeoutError, ServerExitedError

_LISTENING = re.compile(r"listening on (https?://\S+)")
URL_TIMEOUT_S = 30.0  # the built-in simulator prints its URL within a second; 30 s means it is stuck


class ServerStartError(Exception):
    """The server could not be started or did not become ready; the message is one line for the user."""


class ServerSupervisor:
    def __init__(self, cfg: RunConfig, *, on_notice: Callable[[str], None], scrub: Scrubber | None = None) -> None:
        self.cfg = cfg
        self._scrub = scrub or Scrubber(cfg.secret_values())  # for the server's lines in an error
        self.builtin = cfg.target.url is None and cfg.watch.launch is None
        self.url: str | None = cfg.target.url
        self.launched: LaunchedServer | None = None
        self._notice = on_notice
        self._url_found: asyncio.Future[str] | None = None

    def command(self) -> str | None:
        """The command that starts the server, or None when specload starts none."""
        if self.builtin:
            args = " ".join(shlex.quote(a) for a in self.cfg.sim_args)
            return f"{shlex.quote(sys.executable)} -m specload.sim --host 127.0.0.1 --port 0 {args}".strip()
        return self.cfg.watch.launch

    async def spawn(self) -> LaunchedServer | None:
        """Start the server process (not yet waiting for it); None when there is nothing to start."""
        cmd = self.command()
        if cmd is None:
            return None
        if self.builtin:
            self._notice("no server URL given: starting the built-in simulator")
        env = None
        if self.builtin:
            from specload.sim.cli import PARENT_ENV

            # the simulator leaves by itself when specload is gone, even by SIGKILL
            env = {**os.environ, PARENT_ENV: str(os.getpid())}
        w = self.cfg.watch
        health_url = None if self.url is None else self.url + "/health"
        self.launched = LaunchedServer(
            cmd, health_url, ready_timeout=w.ready_timeout_s, grace=w.stop_grace_s, on_notice=self._notice, env=env
        )
        self._url_found = asyncio.get_running_loop().create_future()
        try:
            await self.launched.start()
        except OSError as e:
            raise ServerStartError(f"cannot launch {cmd!r}: {e}") from None
        return self.launched

    def observe_line(self, line: str) -> None:
        """A line of the server's output: the built-in simulator's URL is in one of the first."""
        if self._url_found is not None and not self._url_found.done():
            m = _LISTENING.search(line)
            if m:
                self._url_found.set_result(m.group(1).rstrip("/"))

    async def wait_ready(self) -> str:
        """Wait for the URL (when the server picks it) and for the health endpoint; the server's URL."""
        srv = self.launched
        if srv is None:
            assert self.url is not None
            return self.url
        try:
            if self.url is None:
                self.url = await self._wait_for_url(srv)
                srv.health_url = self.url + "/health"
            await srv.wait_ready(on_progress=self._progress)
        except ServerExitedError as e:
            tail = self._scrub(" | ".join(e.last_lines[-3:]))
            raise ServerStartError(f"launched server {e.exit.description} before it was ready: {tail}"[:400]) from None
        except ReadyTimeoutError as e:
            raise ServerStartError(f"launched server: {e}") from None
        if self.builtin:
            self._notice(f"built-in simulator on {self.url}")
        return self.url

    async def _wait_for_url(self, srv: LaunchedServer) -> str:
        assert self._url_found is not None
        exit_wait = asyncio.ensure_future(srv.wait_exit())
        try:
            either: set[asyncio.Future[Any]] = {self._url_found, exit_wait}
            await asyncio.wait(either, timeout=URL_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exit_wait.cancel()
        if self._url_found.done():
            return self._url_found.result()
        raise ServerStartError("the built-in simulator did not start: " + self._scrub(" | ".join(srv.last_lines(3))))

    def _progress(self, elapsed: float, last_line: str | None) -> None:
        if int(elapsed * 4) % 20 == 0:  # every 5 s at the 0.25 s poll
            self._notice(f"waiting for the server ({elapsed:.0f} s){': ' + last_line if last_line else ''}")

    async def watch_exit(self, on_exit: Callable[[ProcessExit], None]) -> None:
        """Until the launched server exits; then ``on_exit`` (the session records it during a run)."""
        if self.launched is not None:
            on_exit(await self.launched.wait_exit())

    async def stop(self) -> None:
        if self.launched is None:
            return
        # shielded: a cancelled teardown must not leave the server running
        ex = await asyncio.shield(self.launched.stop())
        if ex is not None:
            self._notice(f"launched server {ex.description}")
