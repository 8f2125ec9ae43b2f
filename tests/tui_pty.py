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
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import psutil

from tests.waiting import pid_gone


def _controlling_tty() -> None:  # in the child: a session of its own with the pty as its terminal
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class TuiInPty:
    def __init__(self, args: list[str], rows: int = 40, cols: int = 120, cwd: Path | None = None) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
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

    def wait_for_load(self, record: Path, timeout: float = 30) -> None:
        """Until the record has its first level event; then note the simulators the TUI started."""
        deadline = time.monotonic() + timeout
        while not (record.exists() and b'"kind":"level"' in record.read_bytes()):
            assert self.proc.poll() is None, f"the TUI exited early with {self.proc.returncode}"
            assert time.monotonic() < deadline, "the load never started"
            time.sleep(0.05)
        self.sims = self.simulators()

    def simulators(self) -> list[int]:
        return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)
                if "specload.sim" in " ".join(c.cmdline())]

    def send(self, data: bytes) -> None:
        """Bytes typed at the terminal, in one write: the app reads them together, as over ssh."""
        os.write(self.master, data)

    def wait_for_line(self, record: Path, needle: bytes, what: str, timeout: float = 30) -> None:
        """Until ``needle`` is in the record (its event lines are written at once)."""
        deadline = time.monotonic() + timeout
        while needle not in record.read_bytes():
            assert self.proc.poll() is None, f"the TUI exited early with {self.proc.returncode}"
            assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
            time.sleep(0.05)

    def close_terminal(self) -> None:
        self._stop.set()
        os.close(self.master)  # the kernel sends SIGHUP to the session
        self._master_open = False

    def wait_sims_gone(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not all(pid_gone(p) for p in self.sims):
            assert time.monotonic() < deadline, "the built-in simulator outlived the TUI"
            time.sleep(0.05)

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
