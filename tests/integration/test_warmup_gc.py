"""The collector during a load (``specload/engine/collector.py``): what has lived a second is frozen, so a
full pass walks only the last second's objects, and the end of the load unfreezes everything."""

from __future__ import annotations

import asyncio
import gc
import threading

from specload import warmup
from specload.engine import collector
from tests.waiting import until


def frozen(objs: list) -> int:
    """How many of ``objs`` are in the permanent generation: ``gc.get_objects()`` lists the other
    three. (Not ``gc.get_freeze_count()``: it falls as frozen objects of earlier tests are freed.)"""
    walked = {id(o) for o in gc.get_objects()}
    return sum(id(o) not in walked for o in objs)


async def _frozen_while_loading_and_thawed_after(monkeypatch, meanwhile=lambda: None) -> None:
    """A load begins, ``meanwhile`` runs, and objects that then live across a re-freeze are frozen;
    the load's end unfreezes them."""
    monkeypatch.setattr(collector, "REFREEZE_S", 0.05)
    warmup.settle_before_load()
    try:
        meanwhile()
        held = [[i] for i in range(1000)]  # objects of the load, alive across a re-freeze
        await until(lambda: frozen(held) == len(held), interval=0.05, what="a re-freeze")
    finally:
        warmup.after_load()
    assert frozen(held) == 0


async def test_the_load_freezes_what_lived_a_second_and_its_end_unfreezes(monkeypatch) -> None:
    await _frozen_while_loading_and_thawed_after(monkeypatch)


async def test_a_worker_in_the_sessions_process_does_not_end_the_sessions_freezing(monkeypatch) -> None:
    def a_worker_started_and_stopped() -> None:  # in the same process (as in tests): the session's load
        collector.freeze_while_loading()  # goes on, and so does its freezing
        collector.thaw()

    await _frozen_while_loading_and_thawed_after(monkeypatch, a_worker_started_and_stopped)


async def test_a_load_ending_on_another_loop_does_not_end_this_loops_freezing(monkeypatch) -> None:
    # two sessions in one process on two threads (a test's session thread outliving it): the first
    # one's end stopped the second's re-freezing and unfroze everything
    monkeypatch.setattr(collector, "REFREEZE_S", 0.05)
    started, end = threading.Event(), threading.Event()

    async def other_load() -> None:
        collector.freeze_while_loading()
        started.set()
        while not end.is_set():
            await asyncio.sleep(0.01)
        collector.thaw()

    thread = threading.Thread(target=asyncio.run, args=(other_load(),), daemon=True)
    thread.start()
    assert await asyncio.to_thread(started.wait, 30)
    warmup.settle_before_load()  # this loop's load takes over the freezing
    try:
        end.set()
        await asyncio.to_thread(thread.join, 30)
        assert not thread.is_alive()
        held = [[i] for i in range(1000)]
        await until(lambda: frozen(held) == len(held), timeout=10, interval=0.05, what="a re-freeze")
    finally:
        warmup.after_load()
        end.set()
    assert frozen(held) == 0
