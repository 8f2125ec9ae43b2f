"""``--launch CMD``: specload starts the server itself, watches its output and stops it at the end.

``LaunchedServer`` owns the server process for the whole run: it reads the server's merged
stdout/stderr continuously from the moment it starts (a server whose pipe nobody drains blocks on
its next write, and the start-up lines are exactly what a crash report needs), buffers the lines
for ``lines()``, keeps the last few for progress and crash messages, waits for the health URL to
answer 200 (failing at once if the process dies first) and, on ``stop()``, sends SIGTERM to the
process group and SIGKILL after a grace period. Real servers do hang on SIGTERM under load (see the
real-server report), so the SIGKILL step is not optional.
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import aiohttp

from specload.watch.command import ProcessExit, group_alive, spawn_shell, terminate_group
from specload.watch.tail import LineSplitter, NoticeFn, NoticeLog, read_stream

ProgressFn = Callable[[float, "str | None"], None]
T = TypeVar("T")


class ServerExitedError(RuntimeError):
    """The launched server exited before it became ready."""

    def __init__(self, exit: ProcessExit, last_lines: list[str]) -> None:
        super().__init__(f"server {exit.description} before it became ready")
        self.exit = exit
        self.last_lines = last_lines


class ReadyTimeoutError(TimeoutError):
    """The health URL did not answer 200 within the ready timeout."""

    def __init__(self, elapsed: float, last_detail: str | None) -> None:
        msg = f"server not ready after {elapsed:.0f} s"
        if last_detail:
            msg += f" (health: {last_detail})"
        super().__init__(msg)
        self.last_detail = last_detail


class LaunchedServer:
    """A server process started by specload, with its output as log lines.

    ``buffer_lines`` bounds the lines held for a slow or absent ``lines()`` consumer; beyond it
    the oldest are dropped and counted in ``dropped_lines`` (the server is never blocked).
    ``keep_last`` lines stay available in ``last_lines()`` for progress and crash messages.
    """

    def __init__(
        self,
        cmd: str,
        health_url: str | None,
        ready_timeout: float = 900,
        grace: float = 10,
        *,
        on_notice: NoticeFn | None = None,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        buffer_lines: int = 100_000,
        keep_last: int = 200,
    ) -> None:
        self.cmd = cmd
        self.health_url = health_url
        self.ready_timeout = ready_timeout
        self.grace = grace
        self.notices = NoticeLog(on_notice)
        self.env = env
        self.cwd = cwd
        self.dropped_lines = 0
        self.last_health_detail: str | None = None
        self._buffer: collections.deque[str] = collections.deque()
        self._buffer_max = buffer_lines
        self._last: collections.deque[str] = collections.deque(maxlen=keep_last)
        self._proc: asyncio.subprocess.Process | None = None
        self._exit: ProcessExit | None = None
        self._exited = asyncio.Event()
        self._output_done = False
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_requested = False
        self._starting: asyncio.Future[None] | None = None

    # -- state -------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._exit is None

    @property
    def exit(self) -> ProcessExit | None:
        return self._exit

    @property
    def returncode(self) -> int | None:
        return self._exit.returncode if self._exit else None

    @property
    def signal_name(self) -> str | None:
        return self._exit.signal_name if self._exit else None

    @property
    def exit_description(self) -> str | None:
        return self._exit.description if self._exit else None

    @property
    def last_line(self) -> str | None:
        return self._last[-1] if self._last else None

    def last_lines(self, n: int | None = None) -> list[str]:
        lines = list(self._last)
        return lines if n is None else lines[-n:]

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        # start() is awaited by lines() and by the session: a second caller arriving while the
        # first is still spawning must wait for that process, not spawn another server
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._spawn())
        await asyncio.shield(self._starting)

    async def _spawn(self) -> None:
        self._proc = await spawn_shell(self.cmd, env=self.env, cwd=self.cwd)
        self.notices(f"started server (pid {self._proc.pid}): {self.cmd}")
        self._tasks = [
            asyncio.create_task(self._read_output(), name="launched-server-output"),
            asyncio.create_task(self._wait_exit(), name="launched-server-exit"),
        ]

    async def __aenter__(self) -> LaunchedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _read_output(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            await read_stream(self._proc.stdout, LineSplitter(), self._push)
        finally:
            self._output_done = True
            self._wake.set()

    def _push(self, lines: list[str]) -> None:
        if not lines:
            return
        self._last.extend(lines)
        buf = self._buffer
        buf.extend(lines)
        over = len(buf) - self._buffer_max
        if over > 0:
            for _ in range(over):
                buf.popleft()
            self.dropped_lines += over
        self._wake.set()

    async def _wait_exit(self) -> None:
        assert self._proc is not None
        rc = await self._proc.wait()
        self._exit = ProcessExit.from_returncode(rc)
        if not self._stop_requested:
            self.notices(f"server {self._exit.description}")
        self._exited.set()

    async def wait_exit(self) -> ProcessExit:
        await self._exited.wait()
        assert self._exit is not None
        return self._exit

    async def lines(self) -> AsyncIterator[str]:
        """The server's output lines from its start, until its output ends.

        A single consumer is assumed (the session's log pipeline).
        """
        await self.start()
        buf = self._buffer
        while True:
            while buf:
                yield buf.popleft()
            if self._output_done:
                return
            self._wake.clear()
            if buf or self._output_done:
                continue
            await self._wake.wait()

    async def _race_exit(self, aw: Awaitable[T]) -> T | None:
        """Await ``aw`` unless the server exits first (then None)."""
        task = asyncio.ensure_future(aw)
        exit_wait = asyncio.ensure_future(self._exited.wait())
        try:
            await asyncio.wait({task, exit_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exit_wait.cancel()
            if not task.done():
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001 - cancelled probe, its outcome is moot
                    pass
        if task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    async def _probe(self, session: aiohttp.ClientSession, timeout: float) -> bool:
        assert self.health_url is not None
        try:
            async with session.get(
                self.health_url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False, headers={"Accept-Encoding": "identity"}
            ) as resp:
                await resp.read()
                self.last_health_detail = f"HTTP {resp.status}"
                return resp.status == 200
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            self.last_health_detail = "connection refused" if refused else f"cannot connect: {exc}"
        except TimeoutError:
            self.last_health_detail = f"timeout after {timeout:g} s"
        except (aiohttp.ClientError, OSError) as exc:
            self.last_health_detail = f"{type(exc).__name__}: {exc}"
        return False

    async def wait_ready(
        self,
        timeout: float | None = None,
        *,
        on_progress: ProgressFn | None = None,
        poll_interval: float = 0.25,
        request_timeout: float = 2.0,
    ) -> float:
        """Poll the health URL until it answers 200; return the seconds it took.

        ``on_progress(elapsed_s, last_server_line)`` is called before every poll, so a UI can show
        that a 10-minute model load is alive. Raises ``ServerExitedError`` as soon as the process
        exits (with its exit code or signal and its last lines) and ``ReadyTimeoutError`` after
        ``timeout`` (default: the constructor's ``ready_timeout``). Without a health URL the
        server counts as ready once started.
        """
        await self.start()
        timeout = self.ready_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if self.health_url is None:
            self._raise_if_exited()
            return 0.0
        # A fresh connection per poll: a pooled one to a dead server fails as "disconnected"
        # rather than the "connection refused" that tells us the port is not open yet.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while True:
                self._raise_if_exited()
                elapsed = loop.time() - t0
                if on_progress is not None:
                    on_progress(elapsed, self.last_line)
                if elapsed >= timeout:
                    raise ReadyTimeoutError(elapsed, self.last_health_detail)
                remaining = timeout - elapsed
                ok = await self._race_exit(self._probe(session, min(request_timeout, remaining)))
                if ok:
                    elapsed = loop.time() - t0
                    self.notices(f"server ready after {elapsed:.1f} s")
                    return elapsed
                self._raise_if_exited()
                await self._race_exit(asyncio.sleep(min(poll_interval, max(0.0, remaining))))

    def _raise_if_exited(self) -> None:
        if self._exit is not None:
            raise ServerExitedError(self._exit, self.last_lines(50))

    async def stop(self) -> ProcessExit | None:
        """SIGTERM the server's process group, SIGKILL after ``grace`` s; report how it ended.

        Returns None when the server was never started. Safe to call more than once.
        """
        proc = self._proc
        if proc is None:
            return None
        if self._exit is None or group_alive(proc):
            if self._exit is None:
                self._stop_requested = True
                self.notices(f"stopping server (SIGTERM to pid {proc.pid})")
            forced = await terminate_group(proc, self.grace)
            if forced:
                self.notices(f"server ignored SIGTERM for {self.grace:g} s, sent SIGKILL")
            await self._exited.wait()
            assert self._exit is not None
            if self._stop_requested and not self._exit.requested:
                self._exit = self._describe_stop(self._exit, forced)
        # Let the reader take the last lines (the group is dead, so the pipe closes promptly).
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=5.0)
            for t in pending:
                t.cancel()
        assert self._exit is not None
        return self._exit

    def _describe_stop(self, ex: ProcessExit, forced: bool) -> ProcessExit:
        if forced and ex.signal_name == "SIGKILL":
            desc = f"killed by SIGKILL after ignoring SIGTERM for {self.grace:g} s"
        elif forced:
            # The leader (a shell) ended on SIGTERM; what it started did not and was killed.
            desc = f"{ex.description}; its process group ignored SIGTERM for {self.grace:g} s and got SIGKILL"
        elif ex.signal_name == "SIGTERM":
            desc = "stopped by SIGTERM"
        else:
            desc = f"{ex.description} after SIGTERM"
        return replace(ex, description=desc, requested=True)
