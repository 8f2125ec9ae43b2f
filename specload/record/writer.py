"""The JSONL recorder: streams a run to disk as it happens.

Lines are serialised at once but written in batches (every ``flush_interval_s`` or ``max_batch``
lines, and at once for anything but request and server lines), each batch as whole lines in one
``write``: a process killed at any moment leaves a file readable up to its last complete line, and
a 100,000-request run neither holds its records in memory nor pays a syscall per request.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Callable
from pathlib import Path

import orjson

from specload import __version__
from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import CrashEvent, GpuSample, Noted, RequestRecord, RunEvent, ServerSample
from specload.record import schema
from specload.secrets import Scrubber, redact_config
from specload.stats.client_load import ClientLoad
from specload.stats.levels import LevelSummary


class RecordError(Exception):
    """The record file cannot be written; the message is one line for the user."""


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).isoformat(timespec="milliseconds")


def check_writable(path: str) -> None:
    """Fail before the run starts, not after an hour of load, when the record cannot be written."""
    p = Path(path)
    if p.is_dir():
        raise RecordError(f"record path {path} is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise RecordError(f"record directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise RecordError(f"record path {path} is not writable")
    # access() says yes to root everywhere; opening is the real test (/proc, a read-only mount)
    existed = p.exists()
    try:
        with open(p, "ab"):
            pass
    except OSError as e:
        raise RecordError(f"record path {path} is not writable: {e.strerror or e}") from None
    if not existed:
        p.unlink(missing_ok=True)


_TAIL_BYTES = 1 << 16


def end_abandoned(path: str, *, t0_ns: int, message: str, clock: Clock = SYSTEM_CLOCK) -> bool:
    """End a record its writer could not close (the TUI's engine process killed), as its writer would
    have: the torn last line, if any, cut off; an ``error`` event with ``message``; the end line,
    reason ``error``. Nothing for a record that is missing, empty or already ended. True if written."""
    try:
        with open(path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            keep = size
            while keep > 0:  # back to the last complete line
                start = max(0, keep - _TAIL_BYTES)
                f.seek(start)
                chunk = f.read(keep - start)
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    keep = start + nl + 1
                    break
                keep = start
            if keep == 0:
                return False  # not even the header is whole
            f.seek(max(0, keep - _TAIL_BYTES))
            last = f.read(keep - f.tell()).rstrip(b"\n").rsplit(b"\n", 1)[-1]
            if last.startswith(b'{"type":"end"'):
                return False
            f.truncate(keep)
            f.seek(keep)
            now = clock.now_ns()
            f.write(orjson.dumps(schema.event_line(Noted(now, "error", message), t0_ns)) + b"\n")
            f.write(orjson.dumps({"type": "end", "reason": "error", "elapsed_s": round((now - t0_ns) / 1e9, 6),
                                  "ended_at": _iso(clock.wall_time())}) + b"\n")
    except OSError:
        return False
    return True


class Recorder:
    """Writes one run's record. A write that fails (a full disk, a vanished file system) never
    raises into the run: the file is cut back to its last complete line, so it stays readable by
    ``report``; every line from then on is counted as lost (and not kept: memory stays bounded);
    ``error`` says what happened and ``on_error`` is called once, so the session can stop the run
    with a one-line error. ``close`` tries the end line once more (with ``lines_lost``), in case
    space came back."""

    def __init__(
        self,
        path: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        t0_ns: int | None = None,
        with_chunks: bool = False,
        max_batch: int = 512,
        scrubber: Scrubber | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self._gpus_named: set[int] = set()
        self.clock = clock
        self.t0_ns = clock.now_ns() if t0_ns is None else t0_ns
        self.with_chunks = with_chunks
        self.max_batch = max_batch
        self._buf: list[bytes] = []
        self._fd: int | None = None
        self._size = 0  # bytes of complete lines in the file
        self.lines_written = 0
        self.lines_lost = 0
        self.error: str | None = None
        self.on_error = on_error
        self.requests = 0
        self.ok = 0
        self.closed = False
        # the last line of defence: any known secret value is masked in every line written
        self._scrubber = scrubber or Scrubber()

    def open(self, header: dict) -> None:
        check_writable(self.path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise RecordError(f"cannot write record {self.path}: {e.strerror}") from None
        line = {
            "type": "run",
            "version": schema.SCHEMA_VERSION,
            "specload": __version__,
            "started_at": _iso(self.clock.wall_time()),
        }
        fields = redact_config(header)
        assert isinstance(fields, dict)  # a dict in, a dict out
        line.update(fields)
        self._put(line, flush=True)
        if self.error is not None:  # not even the header fits: nothing to run for
            raise RecordError(self.error)

    def _put(self, obj: dict, *, flush: bool) -> None:
        if self.closed:
            return
        if self.error is not None:
            self.lines_lost += 1
            return
        try:
            data = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        except TypeError as e:  # orjson.JSONEncodeError: a value no JSON can hold must not stop the run
            data = orjson.dumps({"type": obj.get("type"), "unwritable": f"line could not be written as JSON: {e}"})
        data = self._scrubber.scrub_bytes(data)
        self._buf.append(data)
        if flush or len(self._buf) >= self.max_batch:
            self.flush()

    def flush(self) -> None:
        if not self._buf or self._fd is None:
            return
        lines = self._buf
        self._buf = []
        data = b"\n".join(lines) + b"\n"
        done = 0
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                done += written
                view = view[written:]
        except OSError as e:
            self._write_failed(e, data, done, len(lines))
            return
        self._size += len(data)
        self.lines_written += len(lines)

    def _write_failed(self, e: OSError, data: bytes, done: int, count: int) -> None:
        """Keep the complete lines of the batch that reached the file, cut off the partial one."""
        assert self._fd is not None
        keep = data.rfind(b"\n", 0, done) + 1
        kept = data.count(b"\n", 0, keep)
        self._size += keep
        # the file is as the failed write left it; the reader drops a cut last line
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)
            os.lseek(self._fd, self._size, os.SEEK_SET)
        self.lines_written += kept
        self.lines_lost += count - kept
        if self.error is None:
            self.error = f"writing record {self.path} failed: {e.strerror or e}"
            if self.on_error is not None:
                self.on_error(self.error)

    def request(self, rec: RequestRecord) -> None:
        if not rec.warmup:
            self.requests += 1
            self.ok += rec.ok
        self._put(schema.request_line(rec, self.t0_ns, with_chunks=self.with_chunks), flush=False)

    def level(self, summary: LevelSummary) -> None:
        line = {"type": "level"}
        line.update(summary.as_record())
        self._put(line, flush=True)

    def event(self, ev: RunEvent) -> None:
        self._put(schema.event_line(ev, self.t0_ns), flush=True)

    def crash(self, ev: CrashEvent) -> None:
        self._put(schema.crash_line(ev, self.t0_ns), flush=True)

    def server(self, sample: ServerSample) -> None:
        self._put(schema.server_line(sample, self.t0_ns), flush=False)

    def gpu(self, sample: GpuSample) -> None:
        named = sample.gpu not in self._gpus_named
        self._gpus_named.add(sample.gpu)
        self._put(schema.gpu_line(sample, self.t0_ns, named=named), flush=False)

    def client(self, t_ns: int, load: ClientLoad, level: int) -> None:
        wait = load.lag_cpu_wait_ms
        self._put(
            {
                "type": "client",
                "t_s": round((t_ns - self.t0_ns) / 1e9, 6),
                "cpu_pct": round(load.cpu_pct, 1),
                "loop_lag_ms": round(load.loop_lag_ms, 2),
                "lag_cpu_wait_ms": None if wait is None else round(wait, 2),
                "saturated": load.saturated,
                "starved": load.starved,
                "level": level,
            },
            flush=load.saturated or load.starved,
        )

    def close(self, reason: str, extra: dict | None = None) -> None:
        if self.closed or self._fd is None:
            return
        now = self.clock.now_ns()
        line = {
            "type": "end",
            "reason": reason,
            "elapsed_s": round((now - self.t0_ns) / 1e9, 6),
            "requests": self.requests,
            "ok": self.ok,
            "ended_at": _iso(self.clock.wall_time()),
        }
        if extra:
            line.update(extra)
        if self.error is not None:
            # one more try for the end line, saying what is missing: space may have come back
            line.update({"record_error": self.error, "lines_lost": self.lines_lost})
            error, on_error = self.error, self.on_error
            self.error, self.on_error = None, None
            self._put(line, flush=True)  # if it fails again, it counts as lost like the others
            self.error, self.on_error = error, on_error
        else:
            self._put(line, flush=True)
        self.closed = True
        os.close(self._fd)
        self._fd = None
