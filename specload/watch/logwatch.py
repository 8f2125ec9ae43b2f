"""The server's log during a run: its sources read, each line scrubbed, checked for crashes and stats.

``LogWatch`` owns the log sources (``--server-log`` file, ``--server-log-cmd`` command, the launched
server's output), one reader task per source and the crash detector's 0.2 s poll (a traceback's end
is known only when the next line or a pause comes). Every line is masked for secrets (a server may
log its own arguments, API key included: vLLM does), kept in a bounded tail for the screen
(``lines``, numbered so a reader can ask for what is new; bounded in lines and in characters:
2,000 lines of up to 1 MiB each would be 2 GB), fed to ``--expect-log``, to the line
observers (the supervisor looks for the simulator's URL), to the crash detector and to the
server-stats parser, whose samples of the server's periodic stats lines are taken at most once per
``--metrics-interval`` for each kind of stats line (a log flood of stats lines does not write a record
line per line; per-request lines are all kept). Crashes and stats samples leave through the callbacks
given.

At the end of a run, ``drain`` reads on until the log is quiet (the final requests' log lines, a
crash printed at the very end) before ``stop`` cancels the readers, and ``finish`` flushes the detector.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Iterator

from specload.clock import Clock
from specload.config import WatchConfig
from specload.datatypes import CrashEvent, ServerSample
from specload.secrets import Scrubber
from specload.watch.tail import LogSource

TAIL_LINES = 2000  # lines kept for the screen's log panel
TAIL_CHARS = 8 << 20  # and at most this much text: a server printing 1 MiB lines keeps 8 of them
FRAME_LINE_CHARS = 4096  # a line as a frame carries it (the panel shows a screen's width of it)
POLL_S = 0.2  # the crash detector's clock: a report is complete when no line followed for a while
DRAIN_S, QUIET_S = 1.0, 0.2  # at the end: read until quiet for QUIET_S, at most DRAIN_S


class LogTail:
    """The newest lines of a log, numbered ``(seq, line)``, bounded by count and by characters (the
    newest line is always kept, however long)."""

    def __init__(self, max_lines: int = TAIL_LINES, max_chars: int = TAIL_CHARS) -> None:
        self._lines: deque[tuple[int, str]] = deque()
        self.max_lines, self.max_chars = max_lines, max_chars
        self.chars = 0

    def append(self, item: tuple[int, str]) -> None:
        lines = self._lines
        lines.append(item)
        self.chars += len(item[1])
        while len(lines) > self.max_lines or (self.chars > self.max_chars and len(lines) > 1):
            self.chars -= len(lines.popleft()[1])

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return iter(self._lines)

    def tail(self, n: int) -> tuple[tuple[int, str], ...]:
        """The newest ``n`` lines as a frame carries them: each cut to ``FRAME_LINE_CHARS``."""
        cut = FRAME_LINE_CHARS
        newest = itertools.islice(reversed(self._lines), n)
        return tuple(reversed([(seq, line if len(line) <= cut else line[:cut] + "…") for seq, line in newest]))


class LogWatch:
    def __init__(
        self,
        cfg: WatchConfig,
        *,
        clock: Clock,
        scrub: Scrubber,
        on_crash: Callable[[CrashEvent], None],
        on_server: Callable[[ServerSample], None],
        on_notice: Callable[[str], None],
    ) -> None:
        from specload.watch.crashbook import SignatureBook
        from specload.watch.detector import CrashDetector
        from specload.watch.expect import ExpectLog

        self.cfg = cfg
        self.clock = clock
        self.scrub = scrub
        self.lines = LogTail()
        self.seq = 0
        self.observers: list[Callable[[str], None]] = []
        self.expect = ExpectLog(cfg.expect_log, clock=clock) if cfg.expect_log else None
        self._detector = CrashDetector()
        self._book = SignatureBook()
        self._on_crash, self._on_server, self._notice = on_crash, on_server, on_notice
        self._sources: list[LogSource] = []
        self._launched: LogSource | None = None
        self._tasks: list[asyncio.Task] = []
        self._next_stats_ns: dict[tuple, int] = {}  # per kind of stats line: next one taken (see _read)

    def start(self, tg: asyncio.TaskGroup, launched: LogSource | None = None) -> None:
        """Open the configured sources (and the launched server's output) and read them in ``tg``."""
        w = self.cfg
        if w.server_log:
            from specload.watch.tail import FileTail

            self._sources.append(FileTail(w.server_log, from_start=w.server_log_from_start, on_notice=self._notice))
        if w.server_log_cmd:
            from specload.watch.command import CommandSource

            self._sources.append(CommandSource(w.server_log_cmd, on_notice=self._notice))
        if launched is not None:
            self._launched = launched
            self._sources.append(launched)
        self._tasks = [tg.create_task(self._read(src)) for src in self._sources]
        if self._sources:
            self._tasks.append(tg.create_task(self._poll()))

    async def _read(self, source: LogSource) -> None:
        from specload.watch.server_stats import parse_stats_line

        detector, book, clock, scrub = self._detector, self._book, self.clock, self.scrub
        stats_every_ns = int(self.cfg.metrics_interval_s * 1e9)
        async for line in source.lines():
            t = clock.now_ns()
            line = scrub(line)  # server text is masked here, once, before anything reads it
            self.seq += 1
            self.lines.append((self.seq, line))
            for observe in self.observers:
                observe(line)
            if self.expect is not None:
                self.expect.feed(line)
            for entry in detector.feed(line, t):
                self._crash(book.add(entry, t))
            sample = parse_stats_line(line, t)
            if sample is not None:
                # Sampled at the scrape interval, per kind of stats line (vLLM prints its throughput and
                # its SpecDecoding line together): a server logging stats in a tight loop (a flood) must
                # not write a record line for every line. Per-request lines (llama.cpp's eval and draft
                # acceptance of one slot) are all kept: one per request, so bounded by the load, and
                # their sums are the server's own counts (a sampled subset would undercount acceptance)
                kind = (sample.source, sample.gen_tok_s is None, sample.accept_len is None,
                        sample.accept_rate is None, sample.running is None)
                if sample.extra.get("scope") == "request":
                    self._on_server(sample)
                elif t >= self._next_stats_ns.get(kind, 0):
                    self._next_stats_ns[kind] = t + stats_every_ns
                    self._on_server(sample)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            t = self.clock.now_ns()
            for entry in self._detector.poll(t):
                self._crash(self._book.add(entry, t))

    async def expected(self) -> list[tuple[str, str | None]]:
        """``--expect-log``: wait (up to its timeout) for every pattern; each with the line that
        matched it, or None."""
        if self.expect is None:
            return []
        await self.expect.wait(self.cfg.expect_timeout_s)
        return [(p, m.line if (m := self.expect.seen.get(p)) else None) for p in self.cfg.expect_log]

    async def drain(self) -> None:
        """Read the server's last lines before the readers are cancelled: every source until the
        log is quiet for QUIET_S (at most DRAIN_S), then a file or a command its last read. A server
        prints a request's lines after its last byte (later when it waits for a CPU): one read of a
        file as the load ends misses them."""
        if not self._sources:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        seq, quiet_since = self.seq, loop.time()
        while loop.time() < deadline:
            await asyncio.sleep(0.05)
            if self.seq != seq:
                seq, quiet_since = self.seq, loop.time()
            elif loop.time() - quiet_since >= QUIET_S:
                break
        readers = []
        for src, reader in zip(self._sources, self._tasks, strict=False):
            if src is not self._launched:  # the launched server's output ends when it is stopped
                try:
                    await src.stop()
                except Exception:  # noqa: BLE001 - teardown goes on whatever a source does
                    pass
                readers.append(reader)
        if readers:  # a stopped file reads what was written before the stop, then ends
            await asyncio.wait(readers, timeout=QUIET_S)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def finish(self) -> None:
        """Report what the detector still holds (a traceback the log ended in)."""
        t = self.clock.now_ns()
        for entry in self._detector.finish():
            self._crash(self._book.add(entry, t))

    def _crash(self, ev: CrashEvent | None) -> None:
        # None: the entry changed nothing a reader sees (a re-print, one more copy of a known consequence)
        if ev is not None:
            self._on_crash(ev)
