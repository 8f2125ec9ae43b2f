"""The collector during a load (``specload/engine/collector.py``): what has lived a second is frozen, so a
full pass walks only the last second's objects, and the end of the load unfreezes everything."""

from __future__ import annotations

import gc

from specload import warmup
from specload.engine import collector
from tests.waiting import until


async def test_the_load_freezes_what_lived_a_second_and_its_end_unfreezes(monkeypatch) -> None:
    monkeypatch.setattr(collector, "REFREEZE_S", 0.05)
    warmup.settle_before_load()
    try:
        held = [[i] for i in range(1000)]  # objects of the load, alive across a re-freeze
        before = gc.get_freeze_count()
        await until(lambda: gc.get_freeze_count() >= before + len(held), what="a re-freeze")
    finally:
        warmup.after_load()
    assert gc.get_freeze_count() == 0
    assert held


async def test_a_worker_in_the_sessions_process_does_not_end_the_sessions_freezing(monkeypatch) -> None:
    monkeypatch.setattr(collector, "REFREEZE_S", 0.05)
    warmup.settle_before_load()
    try:
        collector.freeze_while_loading()  # a load worker started in the same process (as in tests)
        collector.thaw()  # ... and stopped: the session's load goes on, and so does its freezing
        held = [[i] for i in range(1000)]
        before = gc.get_freeze_count()
        await until(lambda: gc.get_freeze_count() >= before + len(held), what="a re-freeze")
    finally:
        warmup.after_load()
    assert gc.get_freeze_count() == 0
