"""A ``Session`` on an event loop of its own, in a thread of its own: the UI cannot delay the load.

Issue 11: with the load client on Textual's event loop, every millisecond the UI spent (a modal
opened, the terminal resized, a tab switched: 46-122 ms) was a millisecond every stream waited, and
every timestamp taken then was late. ``ThreadedSessionSource`` was the first answer: the session, its
streaming client, its watchers and its loop-lag monitor run on the engine thread's loop; the UI's
loop only reads frames and sends commands. ``specload tui`` now runs the engine in a process of its
own (``engine_process.py``: a thread still shared the GIL and the collector with the UI, see below);
this source stays for the Pilot tests that look into the session, and as that process's reference. What crosses between the two, and how:

* **Frames** (UI -> engine -> UI): ``frame()`` asks the engine's loop to build the frame and waits
  for it (a few hundred microseconds of the engine's time, 4 times a second). The frame is built
  where the state changes, so it is never torn (a deque or a dict read while the other thread
  appends to it raises); the UI thread waits on a future, which lets go of the GIL. If the engine
  does not answer within ``FRAME_WAIT_S`` (its loop blocked by something), the UI shows the last
  frame it had: the UI never waits on the engine for long.
* **Controls** (UI -> engine): each ``RunControl`` method runs on the engine's loop
  (``call_soon_threadsafe``); the UI waits (bounded) until it has run, so the frame it samples
  right after a key shows the key's effect. The engine never waits on the UI: no deadlock.
* **Happenings** (engine -> UI): every ``SessionListener`` call is queued onto the UI's loop
  (``call_soon_threadsafe``) in the order the session made them; the listener runs there, never on
  the engine's thread (the app's handlers touch widgets). A blocked UI delays what it hears, not
  the load.
* **The end**: ``run`` resolves with the session's result when the engine's loop has finished the
  run (the record closed, a launched server stopped). Signals stay with the UI (only the main thread
  gets them): the app turns them into a quit, which crosses as a control. If the UI stops awaiting
  the run (the app closed without a quit), the run is quit and its teardown awaited for a bounded
  time; the thread is a daemon, so a teardown that hangs cannot keep the process alive (the app's
  quit watchdog ends it).

A thread shares the GIL with the UI: Python work in the UI still takes turns with the engine (at most
the interpreter's switch interval at a time, ``sys.setswitchinterval``), where the event loop made
the engine wait for a whole UI callback. And both threads share the machine's CPUs: measured on a
busy 2-core machine, most of the engine's remaining late wake-ups were time spent waiting for a CPU
(the record's ``lag_cpu_wait_ms``), the UI's rendering among its competitors. So ``specload tui``
lowers the UI thread's CPU priority (``ui_nice``, Linux, where a thread has a nice value of its own;
set after the engine thread started, which keeps the default): when the CPUs are short, the streams
get them before the screen does. A process can only lower its priority, never raise it back, so
this is for the CLI's process, not for a test suite's. For the same reason the CLI's process alone
gets ``TUI_PROCESS``'s settings (``run_app`` applies them): a shorter GIL switch interval, so the UI
thread hands the GIL back to the engine sooner, and rarer full garbage collections, which with the
UI's heap paused both threads for 15-30 ms each. ``benchmarks/tui_vs_headless.py --variants``
measures each setting and what remains. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from specload.session.source import ForwardingControl, Frame, RunControl, SessionControl, SessionSource

if TYPE_CHECKING:
    from specload.config import RunConfig
    from specload.session import SessionResult
    from specload.session.listener import SessionListener

T = TypeVar("T")

FRAME_WAIT_S = 0.5  # the longest the UI waits for a frame before showing the last one
CONTROL_WAIT_S = 2.0  # the longest the UI waits for a command to have run (it runs anyway, later)
TEARDOWN_WAIT_S = 30.0  # an abandoned run's teardown (the app closed without a quit), at most
UI_NICE = 10  # what ``specload tui`` adds to the UI thread's nice value (CFS: about a tenth of the weight)


class EngineBusy(Exception):
    """The engine's loop did not answer in time."""


class EngineThread:
    """An event loop in a daemon thread, and calls into it from other threads."""

    def __init__(self, name: str = "specload-engine") -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._open = False  # the loop takes calls (set once it runs, cleared before it closes)

    def start(self, main: Callable[[], Any], done: concurrent.futures.Future) -> None:
        """Run the coroutine ``main()`` on a new loop in a new thread; its outcome goes to ``done``."""
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(main, done, started), name=self.name, daemon=True)
        self._thread.start()
        started.wait()  # calls made after start() returns reach the loop

    def _run(self, main: Callable[[], Any], done: concurrent.futures.Future, started: threading.Event) -> None:
        # the running policy's loop: uvloop when installed (run_app installs it), as in headless mode
        loop = self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        with self._lock:
            self._open = True
        started.set()
        try:
            result = loop.run_until_complete(main())
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting side, whatever it is
            done.set_exception(e)
        else:
            done.set_result(result)
        finally:
            with self._lock:
                self._open = False
            # calls queued before the loop stopped taking them still run (their callers may wait)
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_default_executor())
            asyncio.set_event_loop(None)
            loop.close()

    @property
    def in_engine(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def call(self, fn: Callable[..., T], *args: object, timeout: float, cancel_late: bool = False) -> T:
        """``fn(*args)`` on the engine's loop, waiting up to ``timeout`` s for its result. Runs
        ``fn`` here when the loop is not running (not started yet, or finished: nothing else runs
        the session then). On timeout, raises ``EngineBusy``; the call still runs later unless
        ``cancel_late``."""
        if self.in_engine:
            return fn(*args)
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - the caller's to see
                fut.set_exception(e)

        with self._lock:
            queued = self._open and self.loop is not None
            if queued:
                self.loop.call_soon_threadsafe(run)  # type: ignore[union-attr]
        if not queued:
            return fn(*args)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            if cancel_late:
                fut.cancel()
            raise EngineBusy from None

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


class OnLoop:
    """A ``SessionListener`` whose every call is queued onto ``loop`` (the UI's), in order; the engine
    never waits for the listener. Calls after that loop closed are dropped (nobody is listening)."""

    def __init__(self, target: SessionListener, loop: asyncio.AbstractEventLoop) -> None:
        self._target, self._loop = target, loop

    def __getattr__(self, name: str) -> Callable[..., None]:
        method = getattr(self._target, name)

        def queued(*args: object) -> None:
            with contextlib.suppress(RuntimeError):  # the UI's loop is closed: the app is gone
                self._loop.call_soon_threadsafe(method, *args)

        return queued


class ThreadedSessionSource(SessionSource):
    """``specload tui``'s source: the session runs on the engine thread's loop (see the module
    docstring); the same options and defaults as ``SessionSource``."""

    def __init__(self, cfg: RunConfig, *, ui_nice: int = 0, **session_options: object) -> None:
        super().__init__(cfg, **session_options)
        self.ui_nice = ui_nice  # added to the nice value of the thread that runs the UI (0: left alone)
        self.engine = EngineThread()
        inner = SessionControl(self.session)
        self.control: RunControl | None = ForwardingControl(
            lambda name, args: self._command(getattr(inner, name), *args))
        self._last: Frame | None = None

    def _command(self, fn: Callable[..., object], *args: object) -> None:
        """A control command on the engine's loop, waited for (bounded) so the next frame shows it."""
        with contextlib.suppress(EngineBusy):  # queued: it runs when the engine's loop gets to it
            self.engine.call(fn, *args, timeout=CONTROL_WAIT_S)

    def frame(self) -> Frame:
        try:
            self._last = self.engine.call(super().frame, timeout=FRAME_WAIT_S, cancel_late=True)
        except EngineBusy:
            if self._last is None:
                raise
        return self._last

    async def run(self, listener: SessionListener) -> SessionResult | None:
        self._relay.target = OnLoop(listener, asyncio.get_running_loop())
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_running_or_notify_cancel()  # a cancelled await below must not cancel the result
        self.engine.start(self.session.run, done)
        if self.ui_nice:
            lower_thread_priority(self.ui_nice)
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            # the app is closing without a quit (a test's end, the app's own error): end the run as
            # 'q' does and let its teardown finish (the record closed, a launched server stopped)
            assert self.control is not None
            self.control.quit()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(done)), TEARDOWN_WAIT_S)
            raise


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
    the interpreter has it. ``ui_nice`` (and ``ui_idle``) are applied by the source once the engine
    runs (``ProcessSessionSource``: once its process started; ``ThreadedSessionSource``: once its
    thread did), ``apply`` before the app starts, ``after_start`` after its first refresh."""

    ui_nice: int = UI_NICE
    ui_idle: bool = False  # the UI's threads in SCHED_IDLE too (the engine process's source only)
    ui_pin: bool = False  # the UI's threads on one CPU (the engine process's source only)
    gc_threshold: tuple[int, int, int] | None = None
    switch_interval_s: float | None = None
    freeze_ui_heap: bool = False  # after the dashboard's first refresh: see ``after_start``

    def apply(self) -> None:
        if self.gc_threshold is not None:
            gc.set_threshold(*self.gc_threshold)
        if self.switch_interval_s is not None:
            sys.setswitchinterval(self.switch_interval_s)

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
# the load, 3 interleaved rounds on the shared 2-core machine, 2026-12-01). They were chosen for the
# engine thread, which shared this process: the UI's heap (Textual, Rich: 140-175k objects) made each
# full collection a 15-30 ms pause of every thread, 3 a run; the default threshold2 of 10 runs one
# every 10 gen1 collections, 100 made none in a run; a 1 ms switch interval (5 by default) gave the
# GIL back to the engine thread sooner. With the engine in a process of its own they are the UI's
# alone; kept because the engine still did a little better with them (C=64: loop lag mean 4.22 vs
# 4.82 ms, "process-plain"; headless 3.97), the UI process doing less collecting beside it. The heap
# freeze moves the one full collection of a run (200-260 ms of the UI's own time at its size) from
# the middle of the load, where a key waited for it, to the start. Headless keeps the interpreter's
# defaults (its own heap is small: no full collection during a load, its worst collection 2.4 ms).
TUI_PROCESS = TuiProcess(gc_threshold=(700, 10, 100), switch_interval_s=0.001, freeze_ui_heap=True)
