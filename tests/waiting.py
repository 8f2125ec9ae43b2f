"""Bounded waits for tests: wait on a condition with a deadline, never sleep and hope."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

DEADLINE = 10.0


async def until(cond: Callable[[], object], timeout: float = DEADLINE) -> None:
    """Return once ``cond()`` is true; ``TimeoutError`` after ``timeout`` seconds."""

    async def spin() -> None:
        while not cond():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(spin(), timeout)


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
