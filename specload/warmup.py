"""Getting a process ready for a load: its event loop, first-call costs paid, the collector kept off
the streams.

``install_loop`` makes uvloop the event loop where it is installed (headless, the TUI's engine
process and its UI, a replay).

Found with the slow-callback probe (``specload.stats.slow_callbacks``, ``benchmarks/loop_stalls.py``):
during a load, the callbacks that held specload's event loop for more than a few milliseconds were
not the per-chunk path but things done for the first time (a lazy ``numpy.ma`` import inside the
first percentile, 7 ms; first calls of the summary and record code) and the cyclic garbage
collector's full collections, which walk every object of the process (numpy, aiohttp, the whole
program: 15-22 ms each). Both delay whichever stream is read next, so a request that started then
shows a TTFT the server never had.

``settle_before_load`` runs each per-request and per-level path once on a made-up request (nothing is
recorded or shown), collects, and freezes what exists (``gc.freeze``): later collections only walk
objects created during the load. During the load it freezes again every second, so they walk only
the last second's: 10,000 open streams are ~260k objects, and full passes over them held the loop
for 100-600 ms every 1-2 s (they found nothing to free: a request's objects go by reference count
when it ends, tests/integration/test_client_sim.py). ``after_load`` unfreezes, so a process that
runs several sessions (the test suite, the TUI's next run) frees them normally.
"""

from __future__ import annotations

import asyncio
import gc

from specload.datatypes import RequestRecord

_frozen = False
REFREEZE_S = 1.0
_refreeze: asyncio.TimerHandle | None = None


def install_loop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _exercise() -> None:
    from specload.clock import FakeClock
    from specload.record import schema
    from specload.stats.levels import LevelColumns
    from specload.stats.live import LiveStats

    rec = RequestRecord(
        request_id=0, level=1, level_index=0, warmup=False, start_ns=1_000_000_000, end_ns=1_200_000_000,
        ttft_ns=20_000_000, e2e_ns=200_000_000, output_tokens=10, tokens_estimated=False, prompt_tokens=5,
        chunks=4, chunk_offsets_ns=(20_000_000, 80_000_000, 140_000_000, 200_000_000), chunk_tokens=(1, 3, 3, 3),
    )
    cols = LevelColumns(0, 1)
    cols.add(rec)
    cols.summary().as_record()
    schema.request_line(rec, 0, with_chunks=True)
    clock = FakeClock(start_ns=0)
    live = LiveStats(clock)
    live.on_tokens(500_000_000, 3)
    live.on_record(rec)
    clock.set_ns(3_000_000_000)
    live.snapshot()


def settle_before_load() -> None:
    """Called once the client, the watchers and the record are set up, right before the first request."""
    global _frozen
    _exercise()
    gc.collect()
    gc.freeze()
    _frozen = True
    try:
        _refreeze_later(asyncio.get_running_loop())
    except RuntimeError:
        pass  # no loop runs here: frozen once


def _refreeze_later(loop: asyncio.AbstractEventLoop) -> None:
    global _refreeze
    _refreeze = loop.call_later(REFREEZE_S, _refreeze_now, loop)


def _refreeze_now(loop: asyncio.AbstractEventLoop) -> None:
    gc.freeze()
    _refreeze_later(loop)


def after_load() -> None:
    global _frozen, _refreeze
    if _refreeze is not None:
        _refreeze.cancel()
        _refreeze = None
    if _frozen:
        gc.unfreeze()
        _frozen = False
