"""The cyclic garbage collector during a load: what has lived a second is frozen (``gc.freeze``).

10,000 open streams are ~260k objects, and the collector's full passes over them held the event loop
for 100-600 ms every 1-2 s while finding nothing to free: a request's objects go by reference count
when it ends (no cycle holds them; tests/integration/test_client_sim.py). Frozen, they are left out
of the passes, which then walk only the last second's objects. Used by the session's process and by
each load worker; ``thaw`` at the load's end unfreezes, so a process running several loads frees
them normally.
"""

from __future__ import annotations

import asyncio
import gc

REFREEZE_S = 1.0
_timer: asyncio.TimerHandle | None = None
_loop: asyncio.AbstractEventLoop | None = None  # the loop the timer runs on
_loads = 0  # its loads that asked (a session and a worker may share a process, as in tests)


def freeze_while_loading() -> None:
    """Collect, freeze, and freeze again every REFREEZE_S on the running loop (once, without one)."""
    global _loads, _loop
    gc.collect()
    gc.freeze()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop runs here: frozen once
    if loop is not _loop:  # the first load on this loop (one on a loop that has ended is gone)
        if _timer is not None:
            _timer.cancel()
        _loads, _loop = 0, loop
        _refreeze(loop, now=False)
    _loads += 1


def _refreeze(loop: asyncio.AbstractEventLoop, now: bool = True) -> None:
    """Freeze (unless just frozen), and again in REFREEZE_S."""
    global _timer
    if now:
        gc.freeze()
    _timer = loop.call_later(REFREEZE_S, _refreeze, loop)


def thaw() -> None:
    """A load has ended: when it was the last, no more freezing, and everything unfrozen. A load on a
    loop that another loop's load has since taken over (two sessions in one process, on two threads)
    ends without a word: the other's freezing goes on."""
    global _timer, _loads, _loop
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if _loop is not None and loop is not _loop:
        return
    _loads = max(0, _loads - 1)
    if _loads:
        return
    if _timer is not None:
        _timer.cancel()
    _timer = _loop = None
    gc.unfreeze()
