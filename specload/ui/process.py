"""The settings of the dashboard's own process (``specload tui``): its threads' CPU priority, its
garbage collector and its GIL switch interval.

The engine runs in a process of its own (``sources/engine_process.py``), which keeps the caller's
scheduling priority; these are the UI's. Lowering the UI's threads' priority (``ui_nice``, Linux,
where a thread has a nice value of its own; applied once the engine process runs, so the engine
keeps the caller's) means that when the CPUs are short the streams get them before the screen does.
A process can only lower its priority, never raise it back, and the collector's and the GIL's
settings are process-global, so they are for the CLI's process alone (``run_app`` applies
``TUI_PROCESS``), never for a test suite's. ``benchmarks/tui_vs_headless.py --variants`` measures
each setting and what remains. Nothing here imports Textual.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from dataclasses import dataclass

UI_NICE = 10  # what ``specload tui`` adds to the UI thread's nice value (CFS: about a tenth of the weight)


def pin_thread_to_last_cpu() -> bool:
    """Keep the calling thread (and the threads it starts later) on the last CPU this process may
    use, when it may use two or more: the dashboard then takes turns with the engine on that CPU
    only. False where that is not possible (one CPU, or no ``sched_setaffinity``)."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return False
        os.sched_setaffinity(threading.get_native_id(), {cpus[-1]})
    except OSError:
        return False
    return True


def lower_thread_priority(by: int, *, idle: bool = False) -> bool:
    """Add ``by`` to the calling thread's nice value (Linux: a thread's own; threads it starts later
    inherit it); with ``idle``, also put it in the ``SCHED_IDLE`` class, which a waking thread of the
    normal class should take the CPU from at once. Measured, not shipped (``TUI_PROCESS.ui_idle``
    is off): against the engine process's 2.5-4 ms waits for a CPU at C=4 it made no difference
    (``benchmarks/tui_vs_headless.py --variants ui-idle,ui-nice``), and a plain bursty SCHED_IDLE
    process (30 ms busy, 10 ms asleep) delays a normal one as much on this machine, where a busy one
    does not; it would only starve the dashboard on a machine whose CPUs are all taken. False where
    that is not possible: elsewhere ``setpriority`` would renice the whole process or another one."""
    if sys.platform != "linux":
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
        if idle:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class TuiProcess:
    """The process-global settings ``specload tui`` applies to the dashboard's process (never
    headless, never in a test suite's process: they cannot be scoped to one app). ``None``: left as
    the interpreter has it. ``apply`` before the app starts, ``engine_started`` once the engine
    process runs (the source calls it), ``after_start`` after the app's first refresh."""

    ui_nice: int = UI_NICE
    ui_idle: bool = False  # the UI's threads in SCHED_IDLE too
    ui_pin: bool = False  # the UI's threads on one CPU
    gc_threshold: tuple[int, int, int] | None = None
    switch_interval_s: float | None = None
    freeze_ui_heap: bool = False  # after the dashboard's first refresh: see ``after_start``

    def apply(self) -> None:
        if self.gc_threshold is not None:
            gc.set_threshold(*self.gc_threshold)
        if self.switch_interval_s is not None:
            sys.setswitchinterval(self.switch_interval_s)

    def engine_started(self) -> None:
        """In the thread that builds the source (the app's: run_app calls create_app before app.run),
        so that the threads it starts from now on inherit it: the source's reader, Textual's driver
        and writer."""
        if self.ui_nice or self.ui_idle:
            lower_thread_priority(self.ui_nice, idle=self.ui_idle)
        if self.ui_pin:
            pin_thread_to_last_cpu()

    def after_start(self) -> None:
        """Once the dashboard is built (the app calls it after its first refresh): collect, then
        move what is left (Textual's and Rich's heap, 140-175k objects) out of the collector's reach
        (``gc.freeze``), so a later full collection walks what the run added, not the whole UI. With
        the engine in a process of its own nothing else froze this process's heap (the session
        freezes the engine's, ``warmup.py``): a full collection of the UI's process took 80-240 ms."""
        if self.freeze_ui_heap:
            gc.collect()
            gc.freeze()


# What run_app applies; measured with ``benchmarks/tui_vs_headless.py --variants`` (the UI worked during
# the load, 3 interleaved rounds on the shared 2-core machine, 2026-12-01). They were chosen for an
# engine thread, which shared this process (since removed): the UI's heap (Textual, Rich: 140-175k
# objects) made each full collection a 15-30 ms pause of every thread, 3 a run; the default threshold2 of 10 runs one
# every 10 gen1 collections, 100 made none in a run; a 1 ms switch interval (5 by default) gave the
# GIL back to the engine thread sooner. With the engine in a process of its own they are the UI's
# alone; kept because the engine still did a little better with them (C=64: loop lag mean 4.22 vs
# 4.82 ms, "process-plain"; headless 3.97), the UI process doing less collecting beside it. The heap
# freeze moves the one full collection of a run (200-260 ms of the UI's own time at its size) from
# the middle of the load, where a key waited for it, to the start. Headless keeps the interpreter's
# defaults (its own heap is small: no full collection during a load, its worst collection 2.4 ms).
TUI_PROCESS = TuiProcess(gc_threshold=(700, 10, 100), switch_interval_s=0.001, freeze_ui_heap=True)
