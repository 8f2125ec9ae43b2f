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
recorded or shown), then collects and freezes what exists, and again each second of the load
(``engine/collector.py``): the collector's passes walk only the load's newest objects.
``after_load`` unfreezes, so a process that runs several sessions (the test suite, the TUI's next
run) frees them normally.
"""

from __future__ import annotations

import asyncio

from specload.datatypes import RequestRecord
from specload.engine import collector
from specload.stats import client_load

_frozen = False


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
    try:
        clock = asyncio.get_running_loop().time
    except RuntimeError:
        clock = None
    begin = clock() if clock is not None else 0.0
    _exercise()
    collector.freeze_while_loading()
    _frozen = True
    if clock is not None:
        client_load.excuse(begin, clock())  # the monitor's lag is the load's, not this pause's


def after_load() -> None:
    global _frozen
    if _frozen:
        collector.thaw()
        _frozen = False
