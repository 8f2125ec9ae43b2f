"""Following a server log file like ``tail -F``, and the line-splitting every log source shares.

This module owns the byte-to-line boundary (``LineSplitter``, lines capped in length), the bounded
``LineQueue`` between a pipe reader and the loop, the ``LogSource`` shape that the session consumes
(``lines()`` + ``stop()`` + notices), and ``FileTail``. Command and launched-server
sources live next door (``command.py``, ``launch.py``) and reuse the splitter, so all three decode
and cut lines the same way: UTF-8 with ``errors="replace"``, newline removed, partial last lines
held until their newline arrives.

``FileTail`` polls instead of using inotify: one ``read`` + ``fstat`` + ``stat`` per poll is a few
microseconds, works on every filesystem (NFS, bind mounts, container overlays where inotify is
unreliable) and needs no thread. Reads of a regular file never block the event loop for long, so
they are done inline, in bounded chunks.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

NoticeFn = Callable[[str], None]

# A line longer than this is cut and emitted in pieces: a runaway writer without newlines must
# not grow our buffer without bound.
MAX_LINE_BYTES = 1 << 20
CHUNK_BYTES = 1 << 16
# Chunks read per poll before yielding to the event loop; a 10 MB backlog then never starves
# the load engine sharing the loop.
CHUNKS_PER_POLL = 16
# Bytes of lines a LineQueue holds before it drops the oldest (a flood the loop cannot keep up with).
QUEUE_BYTES = 8 << 20
# Lines a source hands over before it lets the event loop run other tasks (the load engine).
LINES_PER_TURN = 512


def _drain(fd: int, split: LineSplitter, chunks: int = CHUNKS_PER_POLL) -> tuple[list[str], int, bool]:
    """Read what is waiting on ``fd``, at most ``chunks`` chunks: (complete lines, bytes read, whether
    more may be waiting). The one read loop of FileTail, for the poll and for the rest of a rotated file."""
    lines: list[str] = []
    n_bytes = 0
    for _ in range(chunks):
        try:
            data = os.read(fd, CHUNK_BYTES)
        except BlockingIOError:
            data = b""
        if not data:
            return lines, n_bytes, False
        n_bytes += len(data)
        lines.extend(split.feed(data))
    return lines, n_bytes, True


async def read_stream(stream: asyncio.StreamReader, split: LineSplitter, put: Callable[[list[str]], None]
                      ) -> None:
    """A child's output to its end, chunk by chunk, into ``put`` as lines (the unended last one too).
    The one read loop of the command sources and the launched server."""
    while data := await stream.read(CHUNK_BYTES):
        put(split.feed(data))
    rest = split.flush()
    if rest is not None:
        put([rest])


class LogSource(Protocol):
    """What the session reads server log lines from."""

    def lines(self) -> AsyncIterator[str]: ...

    async def stop(self) -> object: ...  # what it returns (a launched server's exit) is not used here


def _decode(raw: bytes | bytearray) -> str:
    if raw.endswith(b"\r"):  # CRLF logs (Windows-built servers, some docker log drivers)
        raw = raw[:-1]
    return raw.decode("utf-8", errors="replace")


class LineSplitter:
    """Turns a stream of byte chunks into complete decoded lines.

    Lines are decoded only when complete, so a multi-byte UTF-8 character split across two
    chunks is never mangled. A partial line held longer than ``max_line_bytes`` is cut into pieces of
    that size (counted in ``cut_lines``): a writer without newlines (a binary dumped into the log,
    /dev/zero) cannot grow the buffer without bound. A line that arrives whole in one read is not cut:
    the read size bounds it.
    """

    __slots__ = ("_buf", "_max", "cut_lines")

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_line_bytes
        self.cut_lines = 0  # pieces emitted because a line ran over the cap

    def feed(self, data: bytes) -> list[str]:
        end = data.rfind(b"\n")
        if end < 0:
            self._buf += data
            if len(self._buf) > self._max:
                return self._cut()
            return []
        if self._buf:
            self._buf += data[:end]
            block = bytes(self._buf)
            self._buf.clear()
        else:
            block = data[:end]
        self._buf += data[end + 1 :]
        # One decode for all complete lines: a newline is never part of a multi-byte UTF-8 sequence, so
        # decoding the block and splitting it gives the same lines as decoding each (and costs far less).
        text = block.decode("utf-8", errors="replace")
        out = text.split("\n")
        if "\r" in text:  # CRLF logs (Windows-built servers, some docker log drivers)
            out = [ln[:-1] if ln.endswith("\r") else ln for ln in out]
        if len(self._buf) > self._max:
            out.extend(self._cut())
        return out

    def flush(self) -> str | None:
        """The held partial line, if any (at end of stream, truncation or rotation)."""
        if not self._buf:
            return None
        return self._take()

    @property
    def pending(self) -> int:
        return len(self._buf)

    def _take(self) -> str:
        line = _decode(self._buf)
        self._buf.clear()
        return line

    def _cut(self) -> list[str]:
        """A line over the cap: emitted in pieces of the cap's size, counted in ``cut_lines``."""
        out = []
        while len(self._buf) > self._max:
            piece = bytes(self._buf[: self._max])
            del self._buf[: self._max]
            out.append(piece.decode("utf-8", errors="replace"))
            self.cut_lines += 1
        return out


class LineQueue:
    """Lines between a reader (a pipe drained as fast as it fills) and the loop that examines them,
    bounded in bytes: when the examiner falls behind (a log flood), the oldest lines are dropped and
    counted rather than held. Keeping the newest is deliberate: a crash is what a dying server prints last.
    """

    __slots__ = ("_lines", "_bytes", "max_bytes", "dropped_lines", "_ready")

    def __init__(self, max_bytes: int = QUEUE_BYTES) -> None:
        self._lines: collections.deque[str] = collections.deque()
        self._bytes = 0
        self.max_bytes = max_bytes
        self.dropped_lines = 0
        self._ready = asyncio.Event()

    @property
    def held_bytes(self) -> int:
        """The bytes of the lines waiting (at most ``max_bytes``, or one line over it)."""
        return self._bytes

    def put(self, lines: list[str]) -> None:
        for line in lines:
            self._lines.append(line)
            self._bytes += len(line) + 1
        while self._bytes > self.max_bytes and len(self._lines) > 1:
            self._bytes -= len(self._lines.popleft()) + 1
            self.dropped_lines += 1
        if self._lines:
            self._ready.set()

    def take(self, n: int) -> list[str]:
        """Up to ``n`` lines, oldest first."""
        out: list[str] = []
        while self._lines and len(out) < n:
            line = self._lines.popleft()
            self._bytes -= len(line) + 1
            out.append(line)
        if not self._lines:
            self._ready.clear()
        return out

    async def wait(self) -> None:
        await self._ready.wait()

    def wake(self) -> None:
        """Wake a waiting consumer (the reader ended)."""
        self._ready.set()

    def __len__(self) -> int:
        return len(self._lines)


class NoticeLog:
    """Status notices of a source: forwarded to a callback and kept (bounded) for inspection."""

    __slots__ = ("_fn", "recent")

    def __init__(self, fn: NoticeFn | None, keep: int = 100) -> None:
        self._fn = fn
        self.recent: collections.deque[str] = collections.deque(maxlen=keep)

    def __call__(self, text: str) -> None:
        self.recent.append(text)
        if self._fn is not None:
            self._fn(text)


class FileTail:
    """Follow a log file by name, surviving truncation, rotation and late creation.

    - ``from_start=False`` (default) starts at the current end, like ``tail -F``; a file that does
      not exist yet, or a new file after rotation, is always read from its start.
    - Truncation (size below our position, e.g. ``copytruncate``): restart at offset 0.
    - Rotation (the path now names a different inode): the rest of the old file is read first,
      then the new file is followed from its start. While the path is missing the old file is
      kept open, because its writer may still be appending to it.
    - Known limit, shared with ``tail``: a truncation followed by a rewrite past our old position
      within one poll interval goes unnoticed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        from_start: bool = False,
        poll_interval: float = 0.1,
        *,
        on_notice: NoticeFn | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.from_start = from_start
        self.poll_interval = poll_interval
        self.notices = NoticeLog(on_notice)
        self._max_line = max_line_bytes
        self._stop = asyncio.Event()
        self._split = LineSplitter(max_line_bytes)
        self.opens = 0  # files opened so far (1 + rotations + re-creations)

    @property
    def pending_bytes(self) -> int:
        """Bytes of a partial last line held back until its newline arrives."""
        return self._split.pending

    async def stop(self) -> None:
        self._stop.set()

    async def _sleep(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.poll_interval)

    def _open(self) -> tuple[int, os.stat_result]:
        # O_NONBLOCK so a FIFO passed as the "log file" cannot hang the loop on open or read.
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        return fd, os.fstat(fd)

    async def lines(self) -> AsyncIterator[str]:
        notice = self.notices
        split = self._split = LineSplitter(self._max_line)
        fd: int | None = None
        ident: tuple[int, int] | None = None
        regular = True
        pos = 0
        first_open = True
        waiting_noticed = False
        gone_noticed = False
        try:
            while True:
                if fd is None and self._stop.is_set():
                    return
                if fd is None:
                    try:
                        fd, st = self._open()
                    except FileNotFoundError:
                        if not waiting_noticed:
                            notice(f"waiting for {self.path} to appear")
                            waiting_noticed = True
                        first_open = False  # a file created after we started is read whole
                        await self._sleep()
                        continue
                    except OSError as exc:
                        if not waiting_noticed:
                            notice(f"cannot open {self.path}: {exc.strerror or exc}; retrying")
                            waiting_noticed = True
                        await self._sleep()
                        continue
                    ident = (st.st_dev, st.st_ino)
                    self.opens += 1
                    regular = stat.S_ISREG(st.st_mode)
                    if first_open and not self.from_start and regular:
                        pos = os.lseek(fd, 0, os.SEEK_END)
                    else:
                        pos = 0
                    if waiting_noticed:
                        notice(f"{self.path} appeared, following it")
                    first_open = waiting_noticed = gone_noticed = False

                # Drain what is there, in bounded chunks.
                lines, n_bytes, more = _drain(fd, split)
                pos += n_bytes
                for line in lines:
                    yield line
                if more:
                    await asyncio.sleep(0)  # more is waiting: let others run, then read on
                    continue
                if self._stop.is_set():
                    # stopped: everything written before the stop has now been read
                    return

                # At the end of what was written: check for truncation and rotation.
                if regular and os.fstat(fd).st_size < pos:
                    notice("log truncated, reading from start")
                    rest = split.flush()
                    if rest is not None:
                        yield rest
                    os.lseek(fd, 0, os.SEEK_SET)
                    pos = 0
                    continue
                try:
                    pst = os.stat(self.path)
                except FileNotFoundError:
                    pst = None
                except OSError:
                    pst = None
                if pst is not None and (pst.st_dev, pst.st_ino) != ident:
                    # Rotated: take what the writer added to the old file since our last read,
                    # then switch. The old file's partial last line is complete by now.
                    more = True
                    while more:
                        lines, _, more = _drain(fd, split)
                        for line in lines:
                            yield line
                    rest = split.flush()
                    if rest is not None:
                        yield rest
                    os.close(fd)
                    fd = None
                    notice("log rotated, following the new file")
                    continue
                if pst is None and not gone_noticed:
                    notice(f"{self.path} was moved or deleted; waiting for a new file")
                    gone_noticed = True
                await self._sleep()
        finally:
            if fd is not None:
                os.close(fd)
