"""Reading server logs from a shell command, and the child-process handling it shares with launch.

``CommandSource`` runs something like ``ssh gpu1 tail -F /var/log/sglang.log``,
``docker logs -f NAME`` or ``journalctl -fu UNIT`` and yields its output as lines. Such commands
die (ssh drops, the container restarts), so the source restarts them with a backoff and says so
through a notice rather than an exception: losing the log must never end a load run. Output is
read by a task of its own into a bounded ``LineQueue`` and handed over in turns of
``LINES_PER_TURN`` lines: a command that prints without end costs bounded memory (lines capped,
the oldest dropped and counted when the loop falls behind) and never holds the loop for long.

Also here, because ``launch.py`` needs exactly the same things: spawning a shell command in its
own process group (``spawn_shell``), stopping the whole group (``terminate_group``) and describing
how a process ended (``ProcessExit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from specload.watch.markers import signal_name
from specload.watch.tail import LINES_PER_TURN, LineQueue, LineSplitter, NoticeFn, NoticeLog, read_stream


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """How a child process ended, in words a person can read in one line."""

    returncode: int
    signal_name: str | None  # "SIGKILL" when killed by a signal (directly, or 128+N via a shell)
    description: str  # "exited with code 1", "killed by SIGSEGV", "stopped with SIGTERM"
    requested: bool = False  # True when specload itself asked it to stop

    @classmethod
    def from_returncode(cls, rc: int, *, requested: bool = False) -> ProcessExit:
        if rc < 0:
            name = signal_name(-rc)
            desc = f"killed by {name}"
        elif rc > 128 and _is_signal(rc - 128):
            # A shell that ran the server as a child (no exec) reports a signal death as 128+N.
            name = signal_name(rc - 128)
            desc = f"exited with code {rc} ({name} through the shell)"
        else:
            name = None
            desc = f"exited with code {rc}"
        return cls(returncode=rc, signal_name=name, description=desc, requested=requested)


def _is_signal(n: int) -> bool:
    try:
        signal.Signals(n)
    except ValueError:
        return False
    return True


def _shell() -> str:
    # bash replaces itself with the command when the command is a single simple one, so the
    # process we watch and signal is the server itself and its exit code/signal is the server's.
    # dash (Debian's /bin/sh) keeps a shell parent around the server: its exit status hides
    # the server's signal behind 128+N and it dies on SIGTERM before the server does.
    return shutil.which("bash") or "/bin/sh"


async def spawn_shell(
    cmd: str, *, env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None
) -> asyncio.subprocess.Process:
    """Start ``cmd`` under a shell (bash if present) with stdout and stderr merged into one pipe.

    - Merged into one pipe rather than two: the server's own interleaving of stdout and stderr is
      kept (a traceback on stderr stays next to the stdout line before it).
    - ``stdin`` is /dev/null so the child can never read the keystrokes meant for the TUI.
    - A new session (own process group): Ctrl-C in the terminal does not reach the child behind
      our back, and ``terminate_group`` reaches the shell *and* everything it started.
    """
    return await asyncio.create_subprocess_exec(
        _shell(),
        "-c",
        cmd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )


def process_start_time(pid: int) -> str | None:
    """A process's start time in clock ticks (``/proc``), which tells it from a later one that reuses its
    pid; None when it is gone, a zombie, or there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if not fields or fields[0] == "Z" else fields[19]


def signal_group(proc: asyncio.subprocess.Process, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``proc``; False when nothing was there."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Only possible if the group id was reused by someone else's process: leave it alone.
        return False
    return True


def group_alive(proc: asyncio.subprocess.Process) -> bool:
    """Whether any process of ``proc``'s group is still there (signal 0 tests without sending)."""
    return signal_group(proc, 0)


async def terminate_group(proc: asyncio.subprocess.Process, grace: float, poll: float = 0.02) -> bool:
    """SIGTERM the group, SIGKILL it after ``grace`` seconds. Returns True when SIGKILL was needed.

    Done means the whole group is gone, not just its leader: a shell leader dies on SIGTERM at
    once while the server it started may still be shutting down, or ignoring the signal.
    """
    if proc.returncode is not None and not group_alive(proc):
        return False
    signal_group(proc, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    leader = asyncio.ensure_future(proc.wait())
    try:
        while not leader.done() or group_alive(proc):
            if loop.time() >= deadline:
                signal_group(proc, signal.SIGKILL)
                await leader
                return True
            # Polling, because there is no way to wait for a group; 20 ms is invisible at shutdown.
            await asyncio.wait({leader}, timeout=poll)
    finally:
        if not leader.done():
            leader.cancel()
    return False


class CommandSource:
    """Log lines from a shell command, restarted with a backoff whenever it exits.

    ``backoff`` is the sequence of delays between restarts; the last value repeats. A command
    that ran for ``stable_after`` seconds or more before exiting counts as having worked, so the
    backoff starts over: an ssh session that drops after three hours comes back in 0.5 s, one that
    fails at once settles at the slowest delay. ``what`` names the command in its notices;
    ``on_exit``, when given, hears each exit and returns False to end the source instead of restarting
    (a command that can never work: not found, no GPU to read).
    """

    def __init__(
        self,
        cmd: str,
        restart: bool = True,
        backoff: Sequence[float] = (0.5, 1, 2, 5, 10),
        *,
        on_notice: NoticeFn | None = None,
        stable_after: float = 30.0,
        kill_grace: float = 2.0,
        env: dict[str, str] | None = None,
        queue_bytes: int | None = None,
        what: str = "log command",
        on_exit: Callable[[ProcessExit], bool] | None = None,
    ) -> None:
        if not backoff:
            raise ValueError("backoff needs at least one delay")
        self.cmd = cmd
        self.restart = restart
        self.backoff = tuple(float(b) for b in backoff)
        self.stable_after = stable_after
        self.kill_grace = kill_grace
        self.notices = NoticeLog(on_notice)
        self.env = env
        self.what = what
        self._on_exit = on_exit
        self.starts = 0  # how many times the command was started
        self.last_exit: ProcessExit | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._stop = asyncio.Event()
        self._queue = LineQueue(queue_bytes) if queue_bytes else LineQueue()
        self._cut = 0
        self._dropped_noticed = 0  # dropped-line count at the last notice (notices at 1, 2, 4, ... x)

    @property
    def held_bytes(self) -> int:
        """The bytes of the lines read from the command and not yet taken (bounded: ``queue_bytes``)."""
        return self._queue.held_bytes

    @property
    def dropped_lines(self) -> int:
        """Lines dropped because the loop fell behind the command (a log flood)."""
        return self._queue.dropped_lines

    @property
    def cut_lines(self) -> int:
        """Pieces of lines cut at the line cap (a command printing without newlines)."""
        return self._cut

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def stop(self) -> None:
        """End the source: kill the running command's process group and stop restarting."""
        self._stopping = True
        self._stop.set()
        proc = self._proc
        if proc is not None:
            await terminate_group(proc, self.kill_grace)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _pump(self, proc: asyncio.subprocess.Process) -> None:
        split = LineSplitter()
        assert proc.stdout is not None
        try:
            await read_stream(proc.stdout, split, self._queue.put)
        finally:
            self._cut += split.cut_lines
            self._queue.wake()

    async def lines(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        attempt = 0
        while not self._stopping:
            started = loop.time()
            rc: int | None = None
            try:
                proc = await spawn_shell(self.cmd, env=self.env)
            except OSError as exc:
                self.notices(f"could not start {self.what}: {exc}")
            else:
                self._proc = proc
                self.starts += 1
                # A reader task drains the pipe into a bounded queue, so the command never blocks on a
                # full pipe and a flood the loop cannot examine is dropped (counted), not buffered.
                pump = asyncio.ensure_future(self._pump(proc))
                queue = self._queue
                try:
                    while True:
                        batch = queue.take(LINES_PER_TURN)
                        if batch:
                            for line in batch:
                                yield line
                            if queue.dropped_lines and queue.dropped_lines >= 2 * self._dropped_noticed:
                                self._dropped_noticed = max(1, queue.dropped_lines)
                                self.notices(f"log flood: {queue.dropped_lines} lines dropped so far "
                                             "(the log is read faster than it can be examined)")
                            await asyncio.sleep(0)  # let the reader and the load engine run
                            continue
                        if pump.done():
                            break
                        await queue.wait()
                    pump.result()
                    rc = await proc.wait()
                finally:
                    # Reached early when the consumer closes the generator: leave no orphan.
                    pump.cancel()
                    if proc.returncode is None:
                        await terminate_group(proc, self.kill_grace)
                    self._proc = None
            if self._stopping:
                return
            if rc is not None:
                self.last_exit = ProcessExit.from_returncode(rc)
                what = f"{self.what} {self.last_exit.description}"
                if self._on_exit is not None and not self._on_exit(self.last_exit):
                    return
            else:
                what = f"{self.what} failed to start"
            if not self.restart:
                self.notices(what)
                return
            if loop.time() - started >= self.stable_after:
                attempt = 0
            delay = self.backoff[min(attempt, len(self.backoff) - 1)]
            attempt += 1
            self.notices(f"{what}, restarting in {delay:g} s")
            await self._sleep(delay)
