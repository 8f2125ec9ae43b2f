"""The terminal under the dashboard: its loss is noticed, and it can never stop the app's loop.

Textual's Linux driver has three threads of control around the terminal, and each could lock up a
TUI whose terminal went away (tmux killed, ssh dropped), as two orphaned TUIs at 35 % CPU showed:

* its writer thread dies on the first ``EIO``; its queue then fills and the main thread, which runs
  the event loop, blocks forever in ``Queue.put``: no teardown, no record end line;
* the driver's SIGCONT handler (the kernel follows SIGHUP with SIGCONT) restarts "application mode"
  on the dead tty;
* the input thread reads end-of-file from the dead tty and spins on it, forever.

``GuardedDriver`` keeps Textual's driver and changes only that: writes go through a file that never
raises, and ``write`` never blocks for long (a terminal that takes nothing for ``WRITE_STALL_S`` has
frames dropped and the screen repainted once it reads again); SIGCONT after a loss restarts nothing;
end-of-file or an error on input ends the input thread. A loss is reported once, from whatever
thread saw it, to ``on_terminal_lost`` of the app (which must be callable from any thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import selectors
import threading
from codecs import getincrementaldecoder
from queue import Full
from typing import IO, Any

from textual._loop import loop_last
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

WRITE_STALL_S = 0.5  # a terminal taking nothing this long has the frame dropped (the loop goes on)


class _TerminalFile:
    """The terminal's output for Textual's writer thread: a write that fails means the terminal is
    gone; it is reported and later writes are dropped, so the writer thread lives and keeps taking
    from its queue."""

    def __init__(self, file: IO[str], on_lost: Any) -> None:
        self._file = file
        self._on_lost = on_lost
        self.lost = False
        self.after_drop: Any = None  # called once the terminal took a write again after dropped frames

    def write(self, text: str) -> None:
        if self.lost:
            return
        try:
            self._file.write(text)
        except (OSError, ValueError) as e:  # EIO from a hung-up tty, EPIPE, a closed file
            self._lost(e)

    def flush(self) -> None:
        if self.lost:
            return
        try:
            self._file.flush()
        except (OSError, ValueError) as e:
            self._lost(e)
            return
        after, self.after_drop = self.after_drop, None
        if after is not None:
            after()

    def _lost(self, e: BaseException) -> None:
        self.lost = True
        self._on_lost(f"the terminal's output failed ({e})")

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        try:
            return self._file.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class GuardedDriver(LinuxDriver):
    """Textual's Linux driver that survives the loss of its terminal (see the module docstring)."""

    def __init__(self, app: Any, **kw: Any) -> None:
        super().__init__(app, **kw)
        self._lost_lock = threading.Lock()
        self.lost: str | None = None  # why the terminal is gone, once it is
        assert self._file is not None, "LinuxDriver writes to sys.__stderr__"
        self._guarded = _TerminalFile(self._file, self._terminal_lost)
        self._file = self._guarded  # type: ignore[assignment]  # Driver declares a TextIOWrapper; ours wraps one
        # the loop the screen is repainted on (the base class's _loop is left to the base class)
        self._repaint_loop: asyncio.AbstractEventLoop | None = None

    def _terminal_lost(self, why: str) -> None:
        with self._lost_lock:
            if self.lost is not None:
                return
            self.lost = why
        self._guarded.lost = True
        report = getattr(self._app, "on_terminal_lost", None)
        if report is not None:
            report(why)

    def start_application_mode(self) -> None:
        if self.lost is not None:
            return
        self._repaint_loop = asyncio.get_running_loop()
        super().start_application_mode()

    def _sigcont_application(self, *_: Any) -> None:
        # the kernel sends SIGCONT with the hangup: restarting would start threads on a dead tty
        if self.lost is None and os.isatty(self.fileno):
            super()._sigcont_application()

    def write(self, data: str) -> None:
        if self.lost is not None or self._writer_thread is None:
            return
        try:
            # never block the loop for long on a terminal that reads nothing (a stalled ssh link, a
            # tty whose reader stopped): the frame is dropped and the screen painted again later
            self._writer_thread._queue.put(data, timeout=WRITE_STALL_S)
        except Full:
            self._guarded.after_drop = self._repaint

    def _repaint(self) -> None:  # in the writer thread, once the terminal reads again
        loop = self._repaint_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._repaint_now)

    def _repaint_now(self) -> None:
        try:
            self._app.screen.refresh()
        except Exception:  # noqa: BLE001 - no screen while the app is closing
            pass

    def run_input_thread(self) -> None:
        """Textual's input loop, except that end-of-file or an error on the terminal means it is
        gone (reported, and the thread ends) where Textual's loop spun on it forever."""
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        fileno = self.fileno
        parser = XTermParser(self._debug)
        feed, tick = parser.feed, parser.tick
        decode = getincrementaldecoder("utf-8")().decode

        def process(events: list, final: bool = False) -> bool:
            for last, (_key, mask) in loop_last(events):
                if mask & selectors.EVENT_READ:
                    try:
                        data = os.read(fileno, 1024 * 4)
                    except OSError as e:
                        if e.errno in (errno.EINTR, errno.EAGAIN):
                            continue
                        self._terminal_lost(f"the terminal's input failed ({e})")
                        return False
                    if not data:
                        self._terminal_lost("the terminal's input closed")
                        return False
                    for event in feed(decode(data, final=final and last)):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)
            return True

        try:
            while not self.exit_event.is_set():
                try:
                    ready = selector.select(0.1)
                except OSError as e:
                    self._terminal_lost(f"the terminal's input failed ({e})")
                    return
                if not process(ready):
                    return
            selector.unregister(self.fileno)
            process(selector.select(0.1), final=True)
        finally:
            selector.close()
            with contextlib.suppress(EOFError, ParseError):
                for _ in feed(""):
                    pass
