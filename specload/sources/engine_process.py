"""A ``Session`` in a process of its own: ``specload tui``'s engine, which the UI cannot delay.

With its own interpreter, heap and collector, no modal, resize or collection of the UI (46-122 ms)
holds a stream. The engine is ``python -m specload.sources.engine_process FD``: it runs the
``Session`` built from the ``RunConfig`` it is sent, on its own loop (uvloop when installed), in its
own process group (the terminal's keys and signals reach the UI alone) but the caller's session, so
it keeps the caller's autogroup and nice value (``setsid`` once starved it). Its output goes to a
file whose tail explains an engine that died. All crosses one ``socketpair`` as pickles (no key in ``ps``):

* **Frames** (engine -> UI): one every ``frame_s``, one before each happening, one with each ack;
  ``frame()`` returns the newest, built on the engine's loop and never torn.
* **Commands** (UI -> engine): one message per ``RunControl`` method, acked (bounded by
  ``CONTROL_WAIT_S``) with the frame built right after it, so a key's effect shows at once.
* **Happenings**: each ``SessionListener`` call, queued onto the UI's loop in order.
* **The end**: the session's result once the record is closed. An engine that ends without one is
  an ``error`` run whose end line the UI writes, with its exit status and its output's cause; a UI
  that goes away closes the socket and the engine quits as 'q' does. ``ui/watchdog.py`` kills both
  process groups if a quit does not finish in time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import pickle
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specload.exitcode import ExitCode

# the engine's and the frames' modules are imported where they are used: importing this module is
# cheap, so ``specload tui`` starts the engine process before it imports the dashboard (Textual, the
# session's modules), and the two start-ups overlap
if TYPE_CHECKING:
    from specload.config import RunConfig
    from specload.session import Session, SessionResult
    from specload.session.listener import SessionListener
    from specload.sources.frame import Frame, RunControl, RunInfo

CONTROL_WAIT_S = 2.0  # the longest the UI waits for a command to have run (it runs anyway, later)
TEARDOWN_WAIT_S = 30.0  # an abandoned run's teardown (the app closed without a quit), at most
FRAME_S = 0.25  # how often the engine sends a frame (the dashboard samples at 4 Hz)
START_WAIT_S = 60.0  # the longest the UI waits for the engine process to have built its session
EXIT_WAIT_S = 5.0  # after its socket closed, how long the engine process gets to exit
# frames are skipped, never queued, while this much the UI has not read yet is waiting in the socket
# (a UI that does not read, e.g. blocked, must not make the engine buffer without bound)
BACKLOG_BYTES = 4 * 1024 * 1024
ENGINE_FAILED = "engine failed"  # the state the last frame shows once the engine process died
ENGINE_SILENT = "engine silent"  # ... while the engine process sends nothing (stopped, or its loop blocked)
SILENT_AFTER_S = 3.0  # no message for this long (frames come every FRAME_S) and the engine is silent
OUTPUT_TAIL_BYTES = 4096  # of the engine's own output, what an error shows the last line of

_HEADER = struct.Struct("!I")


class EngineStartError(Exception):
    """The engine process could not build the run; the message is one line for the user."""


def _pack(obj: object) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> Any:
    """One message, blocking; None at the end of the stream."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


# ---------------------------------------------------------------------------------- the UI's side


class ProcessSessionSource:
    """``specload tui``'s source: the session runs in an engine process (see the module docstring);
    the same options and defaults as ``SessionSource``. Building it starts the process and, unless
    ``wait`` is False, waits until the session is built (``EngineStartError`` if it cannot be);
    with ``wait=False`` the caller does its own start-up meanwhile and calls ``wait_started``."""

    def __init__(self, cfg: RunConfig, *, on_started: Callable[[], object] | None = None, frame_s: float = FRAME_S,
                 start_wait_s: float = START_WAIT_S, wait: bool = True, **session_options: object) -> None:
        self.cfg = cfg
        self.stop_grace_s = cfg.watch.stop_grace_s
        self._lock = threading.Lock()  # the acks, the listener (UI thread and reader thread)
        self._send_lock = threading.Lock()  # one writer at a time on the socket (never held with _lock)
        self._seq = 0
        self._acks: dict[int, threading.Event] = {}
        self._listener: SessionListener | None = None
        self._early: list[tuple[str, tuple]] = []  # happenings heard before run() attached a listener
        self._server_pid: int | None = None
        self.silent_after_s = SILENT_AFTER_S
        self._heard = time.monotonic()  # when the engine last sent anything
        self._stalled = False  # a command's ack did not come in time: later ones do not wait (until one does)
        self._result: SessionResult | None = None
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self.done.set_running_or_notify_cancel()  # a cancelled await must not cancel the result
        # the engine's stdout and stderr; open as long as the source (its tail explains an engine that died)
        self._output = tempfile.TemporaryFile()  # noqa: SIM115
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "specload.sources.engine_process", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self._output,
                stderr=subprocess.STDOUT, process_group=0)
        except OSError as e:  # no process to be had (out of memory, out of processes)
            ours.close()
            raise EngineStartError(f"the engine process could not be started: {e}") from None
        finally:
            theirs.close()
        self._sock = ours
        self._on_started, self._start_wait_s = on_started, start_wait_s
        self._send(("init", cfg, session_options, frame_s))
        from specload.sources.frame import forwarding_control  # while the engine starts

        self.control: RunControl | None = forwarding_control(lambda name, args: self.command(name, *args))
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Until the engine process has built its session (``EngineStartError`` if it could not)."""
        ours, start_wait_s = self._sock, self._start_wait_s
        try:
            ours.settimeout(start_wait_s)
            msg = _recv(ours)
        except TimeoutError:
            msg = ("error", f"the engine process did not start within {start_wait_s:g} s")
        except (OSError, pickle.PickleError) as e:
            msg = ("error", f"{type(e).__name__}: {e}")
        ours.settimeout(None)
        if msg is None or msg[0] != "ready":
            why = msg[1] if msg is not None and msg[0] == "error" else self._gone_why()
            self.close()
            raise EngineStartError(why)
        _, self.info, self._last = msg
        if self._on_started is not None:
            # once the engine process runs (it keeps its own priority), in the thread that waits for
            # it (the one that runs the app), before the reader below starts: what the UI's process sets for its threads
            # (``ui/process.py``) reaches every thread it starts from now on
            self._on_started()
        self._reader = threading.Thread(target=self._read, name="specload-engine-reader", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ RunSource

    def frame(self) -> Frame:
        """The newest frame the engine sent; marked ``engine silent`` while it sends nothing (the
        UI must not show a stopped engine's last frame as if it were live)."""
        last = self._last
        if not self.done.done() and time.monotonic() - self._heard > self.silent_after_s:
            return dataclasses.replace(last, state=ENGINE_SILENT)
        return last

    async def run(self, listener: SessionListener) -> SessionResult | None:
        with self._lock:
            self._listener = on_loop(listener, asyncio.get_running_loop())
            early, self._early = self._early, []
        for name, args in early:
            getattr(self._listener, name)(*args)
        self._send(("run",))
        try:
            return await asyncio.wrap_future(self.done)
        except asyncio.CancelledError:
            # the app is closing without a quit (a test's end, the app's own error): end the run as
            # 'q' does and let the engine's teardown finish (the record closed, a launched server stopped)
            self.command("quit", None)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self.done)), TEARDOWN_WAIT_S)
            self.close()
            raise

    # ------------------------------------------------------------------ what the app asks besides

    def process_groups(self) -> list[int]:
        """The process groups the quit watchdog kills when a quit does not finish in time: the
        engine's and a launched server's (each a group of its own)."""
        return [pid for pid in (self.proc.pid, self._server_pid) if pid is not None]

    def command(self, name: str, *args: object) -> None:
        """A ``RunControl`` method run in the engine; waits up to ``CONTROL_WAIT_S`` for its ack (a
        command not acked by then still runs, later, in order). Once an ack did not come in time, the
        next commands do not wait until the engine acks again: a stopped engine must not cost every
        key the whole wait. Nothing happens once the engine is gone."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            acked = self._acks[seq] = threading.Event()
        if self._send(("control", seq, name, args)) and not self._stalled:
            self._stalled = not acked.wait(CONTROL_WAIT_S)
        with self._lock:
            self._acks.pop(seq, None)

    # ------------------------------------------------------------------ the socket

    def _send(self, msg: object) -> bool:
        data = _pack(msg)
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError:  # the engine is gone: its end is being handled by the reader
                return False
        return True

    def _read(self) -> None:
        """The reader thread: every message from the engine, until its socket closes."""
        try:
            while (msg := _recv(self._sock)) is not None:
                self._handle(msg)
        except (OSError, pickle.PickleError, EOFError, AttributeError, ValueError) as e:
            self._result = self._result or self._error(f"the engine's message could not be read ({e})")
        self.close()
        with self._lock:
            for ev in self._acks.values():
                ev.set()  # nobody waits for an ack that will never come
            listener = self._listener
        result = self._result
        if result is None:  # the engine died without ending the run: the UI hears it ended in error
            result = self._error(self._gone_why())
            self._last = dataclasses.replace(self._last, state=ENGINE_FAILED)
            if self.cfg.record.path and result.message:  # and its record says so: the engine cannot
                from specload.record.writer import end_abandoned
                from specload.secrets import Scrubber

                end_abandoned(self.cfg.record.path, t0_ns=self.info.t0_ns,
                              message=Scrubber(self.cfg.secret_values())(result.message))
            if listener is not None:
                listener.ended(result)
        self.done.set_result(result)

    def _handle(self, msg: tuple) -> None:
        self._heard = time.monotonic()
        kind = msg[0]
        if kind == "frame":
            self._last = msg[1]
        elif kind == "call":
            with self._lock:
                target = self._listener
                if target is None:
                    self._early.append((msg[1], msg[2]))
            if target is not None:
                getattr(target, msg[1])(*msg[2])
        elif kind == "ack":
            self._last = msg[2]
            self._stalled = False
            with self._lock:
                ev = self._acks.get(msg[1])
            if ev is not None:
                ev.set()
        elif kind == "server_pid":
            self._server_pid = msg[1]
        elif kind == "result":
            self._result = msg[1]

    def _error(self, why: str) -> SessionResult:
        from specload.session import SessionResult

        return SessionResult("error", ExitCode.ERROR, (), f"internal error: {why}")

    def _gone_why(self) -> str:
        """Why the engine process ended without a result: its exit and the last line it printed."""
        from specload.engine.workers import exit_description

        code = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = self.proc.wait(EXIT_WAIT_S)
        tail = ""
        with contextlib.suppress(OSError, ValueError):
            self._output.seek(0, os.SEEK_END)
            size = self._output.tell()
            self._output.seek(max(0, size - OUTPUT_TAIL_BYTES))
            cause = last_error(self._output.read().decode(errors="replace"))
            tail = f": {cause}" if cause else ""
        return f"the engine process {exit_description(code)}{tail}"

    def close(self) -> None:
        """The engine process gone for sure (it exits by itself once its socket closed)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(EXIT_WAIT_S)


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)(: .*)?")


def last_error(output: str) -> str:
    """What a process's output says went wrong: the exception line of its last traceback (the
    innermost one of an exception group), not whatever it printed after it (aiohttp warns of
    unclosed sessions as the interpreter exits); else its last line."""
    lines = [ln.lstrip(" |+").rstrip() for ln in output.splitlines()]
    lines = [ln for ln in lines if ln]
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")), default=None)
    if start is not None:
        found = [ln for ln in lines[start:] if _EXCEPTION_LINE.fullmatch(ln) and "ExceptionGroup" not in ln]
        if found:
            return found[-1]
    return lines[-1] if lines else ""


def on_loop(target: SessionListener, loop: asyncio.AbstractEventLoop) -> SessionListener:
    """A ``SessionListener`` whose every call is queued onto ``loop`` (the UI's), in order; the reader
    thread never waits for the listener. Calls after that loop closed are dropped (nobody listens)."""
    from specload.session.listener import forwarding_listener

    def queue(name: str, args: tuple) -> None:
        with contextlib.suppress(RuntimeError):  # the UI's loop is closed: the app is gone
            loop.call_soon_threadsafe(getattr(target, name), *args)

    return forwarding_listener(queue)


# ---------------------------------------------------------------------------------- the engine's side


class _Wire:
    """The engine's end of the socket; ``listener`` is the session's ``SessionListener``: each call a
    message to the UI, after a frame of the state it happened in (the UI's alert shows with its
    data). Never blocks: it writes into the socket's buffer, which the event loop drains."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        from specload.session.listener import forwarding_listener

        self.writer = writer
        self.frame: Callable[[], Frame] | None = None
        self.frame_failed = False  # said once
        self.listener = forwarding_listener(self.call)

    def send(self, msg: object) -> None:
        if not self.writer.is_closing():
            self.writer.write(_pack(msg))

    def backlogged(self) -> bool:
        return self.writer.transport.get_write_buffer_size() > BACKLOG_BYTES

    def push_frame(self) -> None:
        if self.frame is None or self.backlogged():
            return
        try:
            frame = self.frame()
        except Exception as e:  # noqa: BLE001 - a figure the screen cannot show must not end the load
            if not self.frame_failed:
                self.frame_failed = True
                self.send(("call", "notice", (f"internal error: the screen's frame failed: {type(e).__name__}: {e}",)))
            return
        self.send(("frame", frame))

    def call(self, name: str, args: tuple) -> None:
        """One ``SessionListener`` call, after a frame of the state it happened in."""
        if name != "client_load":  # every second: the periodic frame is recent enough
            self.push_frame()
        self.send(("call", name, args))


async def _read_msg(reader: asyncio.StreamReader) -> Any:
    try:
        head = await reader.readexactly(_HEADER.size)
        return pickle.loads(await reader.readexactly(_HEADER.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class _Engine:
    def __init__(self, session: Session, info: RunInfo, wire: _Wire, frame_s: float) -> None:
        from specload.sources.local import SessionControl, session_frame

        self._session_frame = session_frame
        self.session, self.info, self.wire, self.frame_s = session, info, wire, frame_s
        self.control = SessionControl(session)
        self.ui_gone = False
        wire.frame = self.frame

    def frame(self) -> Frame:
        return self._session_frame(self.session, self.info)

    def command(self, seq: int, name: str, args: tuple) -> None:
        getattr(self.control, name)(*args)
        self.wire.send(("ack", seq, self.frame()))

    async def frames(self) -> None:
        sent_pid = None
        while True:
            await asyncio.sleep(self.frame_s)
            launched = self.session.supervisor.launched
            pid = launched.pid if launched is not None else None
            if pid != sent_pid:
                self.wire.send(("server_pid", pid))
                sent_pid = pid
            self.wire.push_frame()

    async def commands(self, reader: asyncio.StreamReader, run_now: asyncio.Event) -> None:
        while (msg := await _read_msg(reader)) is not None:
            if msg[0] == "run":
                run_now.set()
            elif msg[0] == "control":
                try:
                    self.command(*msg[1:])
                except Exception as e:  # noqa: BLE001 - a command's failure must not end the run
                    self.wire.send(("call", "notice", (f"the command {msg[2]} failed: {e}",)))
                    self.wire.send(("ack", msg[1], self.frame()))
        # the UI is gone (its process ended, or it closed the socket): quit as 'q' does; a run it
        # never started is not started now
        self.ui_gone = True
        self.control.quit()
        run_now.set()


async def _engine_main(sock: socket.socket) -> int:
    from specload.session import Session
    from specload.sources.local import run_info

    reader, writer = await asyncio.open_unix_connection(sock=sock)
    wire = _Wire(writer)
    init = await _read_msg(reader)
    if init is None:
        return 0
    _, cfg, options, frame_s = init
    try:
        options = {"stay_open": True, "on_crash": cfg.watch.on_crash, **options}
        session = Session(cfg, listener=wire.listener, **options)
    except Exception as e:  # noqa: BLE001 - one line for the user, in the UI's process
        wire.send(("error", f"{type(e).__name__}: {e}"))
        await writer.drain()
        return 1
    info = run_info(cfg, session.t0_ns, session.on_crash)
    engine = _Engine(session, info, wire, frame_s)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, session.signalled, signal.SIGTERM)
    wire.send(("ready", info, engine.frame()))
    run_now = asyncio.Event()
    commands = asyncio.create_task(engine.commands(reader, run_now))
    frames = asyncio.create_task(engine.frames())
    try:
        await run_now.wait()
        if engine.ui_gone:
            return 0
        try:
            result = await session.run()
        except Exception as e:  # noqa: BLE001 - the cause, for the user, rather than a dead process's last line
            from specload.session import SessionResult

            result = SessionResult("error", ExitCode.ERROR, (), f"internal error: {type(e).__name__}: {e}")
        wire.push_frame()
        wire.send(("result", result))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
    finally:
        frames.cancel()
        commands.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(frames, commands, return_exceptions=True)
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    return 0


def main() -> None:
    # the terminal belongs to the UI (this process is in a group of its own, never the foreground
    # one); a SIGTERM sent here alone quits the run as 'q' does (the UI then ends with it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sock = socket.socket(fileno=int(sys.argv[1]))
    from specload.warmup import install_loop

    install_loop()

    sys.exit(asyncio.run(_engine_main(sock)))


if __name__ == "__main__":
    main()
