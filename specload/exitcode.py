"""The process exit status of every specload command, in one place.

Scripts and CI branch on these numbers, so they are part of the interface: the README lists them and
tests assert them. ``run``/``tui`` use the members up to ``DIVERGED`` and the signal members;
``scan-log`` has members of its own (``SCAN_*``), which share numbers with the run's (a shell sees
only the number), so they are aliases: ``ExitCode.SCAN_CRASH is ExitCode.ERROR``.
"""

from __future__ import annotations

import signal
from enum import IntEnum


class ExitCode(IntEnum):
    def __new__(cls, value: int, doc: str = "") -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    OK = 0, "The run completed (or the TUI was quit with no crash seen)."
    ERROR = 1, "The run could not start (target unreachable, server died while starting) or its record failed."
    USAGE = 2, "Bad options or input: a one-line error, nothing was started."
    CRASHED = 3, "A server crash was detected (headless --on-crash stop; the TUI after a crash)."
    SERVER_DOWN = 4, "The server was down for --down-timeout and the run stopped."
    ALL_FAILED = 5, "The run completed, but not one request succeeded."
    WORKER_LOST = 6, "A --workers process died and the run stopped (all of them, or --on-worker-death stop)."
    DIVERGED = 7, ("--check-outputs against a --baseline: an output diverged from the baseline's, not at a "
                   "near-tie (--on-divergence stop ends the run there; continue runs it to its end).")
    HUNG_UP = 128 + signal.SIGHUP, "SIGHUP (the terminal went away): in-flight requests cancelled, record closed."
    INTERRUPTED = 128 + signal.SIGINT, "Ctrl-C: in-flight requests recorded as cancelled, the record closed."
    TERMINATED = 128 + signal.SIGTERM, "SIGTERM: as Ctrl-C."

    # scan-log (aliases: same numbers, their own meaning)
    SCAN_CLEAN = 0, "scan-log: no crash signature in the file."
    SCAN_CRASH = 1, "scan-log: at least one crash signature."
    SCAN_ERROR = 2, "scan-log: the file could not be read or the options were bad."

    @classmethod
    def for_signal(cls, sig: int | None) -> int:
        """What a shell reports for a process ended by this signal: 128 + N (130 for Ctrl-C)."""
        return cls.INTERRUPTED if sig is None else 128 + sig
