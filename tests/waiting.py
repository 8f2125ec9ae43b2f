"""Bounded waits for tests: wait on a condition with a deadline, never sleep and hope.

``until`` (in a coroutine, the loop runs while it waits) and ``wait_until`` (in plain code) poll a
condition and fail with what they waited for once the deadline passes. The deadline is generous
(``DEADLINE``): on a busy machine a step takes many times what it takes alone, and a wait that ends
early costs nothing. The dashboard's Pilot tests wait with ``tests.ui.conftest.wait_for``, which lets
the app run between looks.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

DEADLINE = 30.0


async def until(cond: Callable[[], object | Awaitable[object]], timeout: float = DEADLINE,
                what: str = "the condition", interval: float = 0.005) -> object:
    """Return ``cond()``'s value once it is true (``cond`` may be a coroutine function);
    ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


def wait_until(cond: Callable[[], object], timeout: float = DEADLINE, what: str = "the condition",
               interval: float = 0.01) -> object:
    """``until`` for code outside an event loop: polls ``cond()`` with ``time.sleep`` between looks."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def holds(path: Path, needle: bytes) -> bool:
    """``needle`` is in the file at ``path``; False while it does not exist. specload opens a record
    path once and removes it again before the run (the writability check), so a file seen to exist
    can be gone a moment later."""
    try:
        return needle in path.read_bytes()
    except FileNotFoundError:
        return False


def pid_gone(pid: int) -> bool:
    """The process has exited (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def running(proc: subprocess.Popen) -> bool:
    """True while ``proc`` runs; fails the wait at once (with its exit status) when it has ended,
    rather than waiting out the deadline for what it can no longer do."""
    assert proc.poll() is None, f"{proc.args!r} ended with {proc.returncode} while the test waited on it"
    return True
