"""The record as a run feeds it: lines kept until it can be opened, flushed twice a second, closed once.

The record's header needs what is known only once the server answers (its URL, model and API), but
the server may print a crash, an ``--expect-log`` result or stats lines before that: ``RecordSink``
stashes those lines and writes them right after the header. Request and server lines are written in
batches (``flush_loop``, a task of the session's TaskGroup), GPU lines too, everything else at once (the
``Recorder``). Without ``--record`` every call is a no-op, so the session never asks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from specload.clock import Clock
from specload.config import RecordConfig
from specload.datatypes import CrashEvent, GpuSample, Noted, RequestRecord, RunEvent, ServerSample
from specload.record.writer import Recorder, RecordError
from specload.secrets import Scrubber
from specload.stats.client_load import ClientLoad
from specload.stats.levels import LevelSummary

FLUSH_S = 0.5
MAX_STASH = 10_000  # record lines held while the server starts, before the record is open

__all__ = ["FLUSH_S", "MAX_STASH", "RecordError", "RecordSink"]


class RecordSink:
    def __init__(
        self, cfg: RecordConfig, *, clock: Clock, t0_ns: int, scrub: Scrubber, on_error: Callable[[str], None],
        on_notice: Callable[[str], None],
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.t0_ns = t0_ns
        self.scrub = scrub
        self.on_error = on_error
        self._notice = on_notice
        self.recorder: Recorder | None = None
        self.stash: list[tuple[str, Any]] = []
        self.stash_dropped = 0

    @property
    def wanted(self) -> bool:
        return bool(self.cfg.path)

    def open(self, header: dict) -> None:
        """Open the record (RecordError when it cannot be) and write what was stashed."""
        if not self.cfg.path or self.recorder is not None:
            return
        self.recorder = Recorder(self.cfg.path, clock=self.clock, t0_ns=self.t0_ns, with_chunks=self.cfg.with_chunks,
                                 scrubber=self.scrub, on_error=self.on_error)
        self.recorder.open(header)
        stash, self.stash = self.stash, []
        for method, payload in stash:
            getattr(self.recorder, method)(payload)
        if self.stash_dropped:
            self._notice(f"{self.stash_dropped} record lines from while the server started were not kept "
                         f"(more than {MAX_STASH})")

    def _early(self, method: str, payload: Any) -> None:
        if self.recorder is not None:
            getattr(self.recorder, method)(payload)
        elif self.cfg.path:
            # bounded: a server may log for many minutes while it loads, and a flood of stats or crash
            # lines must not grow memory before the record exists
            if len(self.stash) < MAX_STASH:
                self.stash.append((method, payload))
            else:
                self.stash_dropped += 1

    def event(self, ev: RunEvent) -> None:
        self._early("event", ev)

    def crash(self, ev: CrashEvent) -> None:
        self._early("crash", ev)

    def server(self, sample: ServerSample) -> None:
        self._early("server", sample)

    def gpu(self, sample: GpuSample) -> None:
        self._early("gpu", sample)

    def request(self, rec: RequestRecord) -> None:
        if self.recorder is not None:
            self.recorder.request(rec)

    def level(self, summary: LevelSummary) -> None:
        if self.recorder is not None:
            self.recorder.level(summary)

    def client(self, load: ClientLoad, level: int) -> None:
        if self.recorder is not None:
            self.recorder.client(self.clock.now_ns(), load, level)

    def flush(self) -> None:
        """The batched lines written out now (the ramp's end: someone reads the file next)."""
        if self.recorder is not None and self.recorder.error is None:
            self.recorder.flush()

    async def flush_loop(self) -> None:
        while self.recorder is not None and self.recorder.error is None:
            await asyncio.sleep(FLUSH_S)
            self.recorder.flush()

    def close(self, reason: str, *, header: dict, message: str | None = None, extra: dict | None = None) -> str | None:
        """Write the end line. A run that ended before the record was opened (it failed, a crash
        stopped it, a quit or a signal while the server started or the prompts were calibrated)
        still leaves a record of what was seen (the crash the server printed, the error) and how it
        ended. Returns the record's own error, if writing failed."""
        if self.recorder is None and self.cfg.path:
            with contextlib.suppress(RecordError):
                self.open(header)
                if message and self.recorder is not None:
                    self.recorder.event(Noted(self.clock.now_ns(), "error", message))
        r = self.recorder
        if r is None:
            return None
        if not r.closed:
            r.close(reason, extra)
        if r.error is None:
            return None
        lost = f"{r.lines_lost} record line{'s' if r.lines_lost != 1 else ''} lost"
        return f"{r.error}; {lost}, the record ends at its last complete line ({r.lines_written} lines)"
