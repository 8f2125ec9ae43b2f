"""The terminal goes away under a running TUI (ssh dropped, tmux killed): a real pty is closed.

The TUI must quit as 'q' does: the record gets its end line and the built-in simulator, which runs in a
session of its own out of the hangup's reach, is stopped. Before SIGHUP was handled the process died on
the spot, the simulator kept running and the record had no end line; Textual alone, with the signal
caught, spun on the dead tty and never exited.
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

from specload.record.reader import read_record
from tests.waiting import pid_gone


def _controlling_tty() -> None:  # in the child: a session of its own with the pty as its terminal
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_closing_the_terminal_stops_the_simulator_and_closes_the_record(tmp_path: Path) -> None:
    rec = tmp_path / "hup.jsonl"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload.cli", "tui", "-c", "2", "-d", "60", "--max-tokens", "200",
         "--ignore-eos", "--record", str(rec), "--sim-args", "--ttft-ms 5 --itl-ms 20 --spec-tokens 0 --quiet"],
        stdin=slave, stdout=slave, stderr=slave, preexec_fn=_controlling_tty, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    stop = threading.Event()

    def drain() -> None:  # a terminal reads what the app draws; a full pty buffer would block it
        while not stop.is_set():
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    sims: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not (rec.exists() and b'"kind":"level"' in rec.read_bytes()):
            assert proc.poll() is None, f"the TUI exited early with {proc.returncode}"
            assert time.monotonic() < deadline, "the load never started"
            time.sleep(0.05)
        sims += [c.pid for c in psutil.Process(proc.pid).children(recursive=True) if "specload.sim" in " ".join(c.cmdline())]
        assert sims, "no built-in simulator among the TUI's children"
        stop.set()
        os.close(master)  # the terminal is gone: the kernel sends SIGHUP
        proc.wait(timeout=40)
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "interrupted"
        assert any((r["error"] or {}).get("kind") == "cancelled" for r in data.requests)
        deadline = time.monotonic() + 10
        while not all(pid_gone(p) for p in sims):
            assert time.monotonic() < deadline, "the built-in simulator outlived the TUI"
            time.sleep(0.05)
    finally:  # a failed run must not leave processes behind
        if proc.poll() is None:
            proc.kill()
        for pid in sims:
            if not pid_gone(pid):
                os.kill(pid, 9)
