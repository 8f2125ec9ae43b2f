"""The last resort that ends the TUI process when a quit does not finish in time.

Quitting (``q``, ctrl+c, SIGINT, SIGTERM, SIGHUP, the terminal gone) asks the session to end: it
records in-flight requests as cancelled, stops a launched server and closes the record. That runs
on the app's event loop, and nothing guarantees the loop still runs: a third-party thread can block
it (Textual's writer on a dead terminal did, for 40 minutes). ``QuitWatchdog`` is a plain thread,
armed by the quit request itself (a signal handler or the thread that saw the terminal go, not a
loop callback): if the process is still there at the deadline, it kills the process groups the
run's source names (the engine process's, a launched server's; the built-in simulator also leaves
by itself once specload is gone) and ends the process with the run's exit status. It never runs while the run ends normally: ``disarm`` is called
once the app has closed the record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable


class QuitWatchdog:
    def __init__(self, *, process_groups: Callable[[], list[int]], exit_code: Callable[[], int]) -> None:
        self._process_groups = process_groups
        self._exit_code = exit_code
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._disarmed = threading.Event()
        self._thread: threading.Thread | None = None
        self.why = ""

    @property
    def armed(self) -> bool:
        return self._deadline is not None and not self._disarmed.is_set()

    def arm(self, seconds: float, why: str) -> None:
        """End the process ``seconds`` from now unless ``disarm`` comes first; an earlier deadline
        wins. Safe from a signal handler and from any thread."""
        with self._lock:
            deadline = time.monotonic() + seconds
            if self._deadline is not None and self._deadline <= deadline:
                return
            self._deadline, self.why = deadline, why
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="specload-quit-watchdog", daemon=True)
                self._thread.start()

    def disarm(self) -> None:
        self._disarmed.set()

    def _watch(self) -> None:
        while not self._disarmed.is_set():
            with self._lock:
                left = (self._deadline or 0) - time.monotonic()
            if left <= 0:
                self._expire()
                return
            self._disarmed.wait(min(left, 0.5))

    def _expire(self) -> None:
        for pgid in self._process_groups():  # the engine process's, a launched server's: each its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            err = sys.__stderr__  # None when Python started without one
            if err is not None:
                err.write(f"specload: the quit did not finish in time ({self.why}); ended without it\n")
                err.flush()
        os._exit(self._exit_code())
