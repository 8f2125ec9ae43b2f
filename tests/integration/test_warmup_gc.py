"""The collector during a load (``specload/warmup.py``): what has lived a second is frozen, so a
full pass walks only the last second's objects, and the end of the load unfreezes everything."""

from __future__ import annotations

import gc

from specload import warmup
from tests.waiting import until


async def test_the_load_freezes_what_lived_a_second_and_its_end_unfreezes(monkeypatch) -> None:
    monkeypatch.setattr(warmup, "REFREEZE_S", 0.05)
    warmup.settle_before_load()
    try:
        held = [[i] for i in range(1000)]  # objects of the load, alive across a re-freeze
        before = gc.get_freeze_count()
        await until(lambda: gc.get_freeze_count() >= before + len(held), what="a re-freeze")
    finally:
        warmup.after_load()
    assert gc.get_freeze_count() == 0
    assert held
