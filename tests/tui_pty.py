"""Run the TUI as a person does: a real process on a real pseudo-terminal of its own.

``TuiInPty`` starts ``specload tui ...`` with a pty as its controlling terminal (a session of its
own, as a login shell gives it), drains what the app draws (a full pty buffer would block it) and,
whatever the test does, leaves no process behind: the TUI and the simulators it started are killed
at the end if they are still there.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
import threading
from pathlib import Path

import psutil

from tests import processes
from tests.waiting import DEADLINE, holds, pid_gone, running, wait_until


def _controlling_tty() -> None:  # in the child, in the session of its own popen gives it: the pty as its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class TuiInPty:
    def __init__(self, args: list[str], rows: int = 40, cols: int = 120, cwd: Path | None = None) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = processes.popen(
            [sys.executable, "-m", "specload.cli", "tui", *args],
            stdin=slave, stdout=slave, stderr=slave, preexec_fn=_controlling_tty, close_fds=True, cwd=cwd,
        )  # fmt: skip
        os.close(slave)
        self.output = bytearray()  # everything the app wrote to its terminal (a minute is a few MB)
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.sims: list[int] = []
        self._master_open = True

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.output += data

    def wait_for_load(self, record: Path, timeout: float = DEADLINE) -> None:
        """Until the record has its first level event; then note the simulators the TUI started."""
        wait_until(lambda: running(self.proc) and holds(record, b'"kind":"level"'),
                   timeout, "the load to start")
        self.sims = self.simulators()

    def simulators(self) -> list[int]:
        return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)
                if "specload.sim" in " ".join(c.cmdline())]

    def send(self, data: bytes) -> None:
        """Bytes typed at the terminal, in one write: the app reads them together, as over ssh."""
        os.write(self.master, data)

    def wait_for_line(self, record: Path, needle: bytes, what: str, timeout: float = DEADLINE) -> None:
        """Until ``needle`` is in the record (its event lines are written at once)."""
        wait_until(lambda: running(self.proc) and holds(record, needle), timeout, what)

    def wait_exit(self, timeout: float = DEADLINE) -> int:
        """The TUI's exit status once it has ended, and everything it wrote read (the reader sees EOF
        once the pty has no writer)."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def close_terminal(self) -> None:
        self._stop.set()
        os.close(self.master)  # the kernel sends SIGHUP to the session
        self._master_open = False

    def wait_sims_gone(self, timeout: float = DEADLINE) -> None:
        wait_until(lambda: all(pid_gone(p) for p in self.sims), timeout, "the built-in simulator to end with the TUI")

    def __enter__(self) -> TuiInPty:
        return self

    def __exit__(self, *exc: object) -> None:  # a failed run must not leave processes behind
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in self.sims:
            if not pid_gone(pid):
                os.kill(pid, 9)
        self._stop.set()
        if self._master_open:
            os.close(self.master)
