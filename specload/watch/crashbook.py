"""The crash book: which crash entries are one crash (their signature) and which are one failure.

The detector (``detector.py``) turns log lines into :class:`CrashEntry` objects and asks a
:class:`SignatureIndex` for each one's signature; a :class:`SignatureBook` groups the entries, in the
order they come, into failures (a root cause and its consequences), one
:class:`~specload.datatypes.CrashEvent` per root signature, for the live run and ``scan-log`` alike. The
two rules are in those classes' docstrings. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from specload.datatypes import CrashConsequence, CrashEvent

__all__ = ["CrashEntry", "SignatureBook", "SignatureIndex", "mask_message"]


@dataclass(frozen=True, slots=True)
class CrashEntry:
    """One crash as found in the log."""

    exception_type: str
    message: str
    innermost_frame: str | None
    process: str | None
    signature: str  # group id, equal for entries that group together
    causes: tuple[str, ...]  # chained earlier exceptions "Type: msg", oldest first
    excerpt: str  # the lines of this crash as printed (cleaned of colour codes)
    line_no: int  # 1-based line where the crash entry starts
    consequence: bool = False  # a line that reports a death caused elsewhere (see SignatureBook)
    log_ns: int | None = None  # the time the log's own prefix gives that line (logline.line_time_ns)
    pid: str | None = None  # the pid in that line's process tag
    reach_ns: int = 0  # how long before it the cause may lie (a watchdog that waited that long)


# ------------------------------------------------------------------------------------------- masking

_HEX_RE = re.compile(r"0x[0-9a-fA-F]+")
_PATH_RE = re.compile(r"[^\s'\"()\[\]<>,]*[\\/][^\s'\"()\[\]<>,]*")
# ids: uuids, request ids, hashes (hex runs of 8+ that contain a digit)
_ID_RE = re.compile(r"\b(?=[0-9a-fA-F\-]*\d)[0-9a-fA-F][0-9a-fA-F\-]{7,}\b")
_NUM_RE = re.compile(r"\d+(?:\.\d+)?")
_WS_RE = re.compile(r"\s+")
_MASKED_MAX = 200
_PREFIX_MIN = 16


def mask_message(message: str) -> str:
    """The message with addresses, paths, ids and numbers replaced by placeholders."""
    s = _HEX_RE.sub("<hex>", message)
    if "/" in s or "\\" in s:
        s = _PATH_RE.sub("<path>", s)
    s = _ID_RE.sub("<id>", s)
    s = _NUM_RE.sub("<n>", s)
    s = _WS_RE.sub(" ", s).strip()
    return s[:_MASKED_MAX]


def _messages_match(a: str, b: str) -> bool:
    if a == b:
        return True
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= _PREFIX_MIN and long_.startswith(short)


@dataclass(slots=True)
class _Group:
    id: str
    masked: str
    frame: str | None


class SignatureIndex:
    """Assigns signatures (group ids) to entries in stream order.

    Two entries have the same signature when

    1. their exception types are equal, and
    2. their messages are equal once *masked* (:func:`mask_message`: hex addresses, paths, long ids and
       every number replaced by placeholders, so rank numbers, pids, sizes, request ids and addresses do
       not matter), or one masked message is a prefix (of at least 16 characters) of the other, because
       copies of one message are often cut (a truncated paste, a control byte that ended the line), and
    3. their innermost frames are equal, *or one of them has none*: a copy whose frames were elided
       (SGLang prints ``...``), cut out of the excerpt, or that is a bare exception line is the same crash
       as a full copy. A group takes the first concrete frame it sees; after that an entry with a
       *different* frame starts a new group (same error raised from a different place is a different bug).

    Because rules 2 and 3 compare against groups already seen, ids are stable within one index. The id is
    a short hash of the group's first (type, masked message, frame).
    """

    def __init__(self) -> None:
        self._by_type: dict[str, list[_Group]] = {}

    def assign(self, exc_type: str, message: str, frame: str | None) -> str:
        masked = mask_message(message)
        groups = self._by_type.setdefault(exc_type, [])
        for g in groups:
            if not _messages_match(g.masked, masked):
                continue
            if frame is None or g.frame is None or g.frame == frame:
                if g.frame is None and frame is not None:
                    g.frame = frame
                return g.id
        digest = hashlib.sha1(f"{exc_type}\x1f{masked}\x1f{frame or ''}".encode()).hexdigest()[:12]
        groups.append(_Group(digest, masked, frame))
        return digest


# ------------------------------------------------------------------------------------------- grouping


class Window(NamedTuple):
    """How close (in lines, and in seconds when the lines carry time) an entry must follow another."""

    lines: int
    ns: int

    def holds(self, d_lines: int, d_ns: int) -> bool:
        return d_lines <= self.lines and d_ns <= self.ns


#: Any entry this close after the failure's last entry belongs to that failure (the ranks of one crash,
#: the errors a dying server prints).
SAME_FAILURE = Window(400, 5_000_000_000)
#: Lines that report a death caused elsewhere (sigquit, process exits, EngineDeadError) join a failure
#: from further away: a launcher waits for the other ranks before it reports the exit.
CONSEQUENCE_WINDOW = Window(2000, 60_000_000_000)
#: After a process exit only lines this close still belong to the failure (the same exit seen by a second
#: supervisor); anything later is a new failure, of a restarted process.
AFTER_EXIT = Window(20, 5_000_000_000)


@dataclass(slots=True)
class _Failure:
    root: str
    last_line: int
    last_ns: int
    last_log_ns: int | None = None
    exit_line: int | None = None
    exit_ns: int = 0
    exit_log_ns: int | None = None
    pids: dict[str, str] = field(default_factory=dict)  # process -> its pid, where the tag gave one


def _consequence_of(entry: CrashEntry) -> CrashConsequence:
    return CrashConsequence(
        signature=entry.signature,
        exception_type=entry.exception_type,
        message=entry.message,
        processes=(entry.process,) if entry.process is not None else (),
        count=1,
    )


class SignatureBook:
    """Groups entries live into failures and :class:`~specload.datatypes.CrashEvent`.

    A server that dies prints more than its cause: the parent's ``Received sigquit from a child process``,
    ``scheduler is dead``, the engine client's ``EngineDeadError``, the supervisor's exit notice, a shell's
    ``Aborted``. The first entry of a failure is its root cause; entries that follow it closely
    (:data:`SAME_FAILURE`; longer for lines that are consequences by nature, :data:`CONSEQUENCE_WINDOW`)
    belong to it, as more processes showing the root signature or as its consequences. A process exit ends
    a failure: after it only lines within :data:`AFTER_EXIT` join. How close is read from the log's own
    timestamps where both lines have one (then the lines between do not count: a burst of tracebacks is
    long, an appended log's next run is far), else from the lines between and the time they were read
    (offline: the lines only). A process named again with another pid is a new process: a new failure.
    ``specload scan-log`` and the live run use this same book, so they count alike.

    One event per root signature; ``count`` is the number of failures with that root. ``processes``
    lists the named processes that showed the root signature, in order of first appearance (entries
    without a process tag count but add no name); ``consequences`` what followed the root, one per
    signature. :meth:`add` returns the event the entry changed (the root's, also for a consequence), or
    None when it changed nothing a reader sees: a re-print, or one more copy of a consequence already
    listed. A server printing the same crash line in a loop then costs one record line, not one per line.
    """

    def __init__(self) -> None:
        self._events: dict[str, CrashEvent] = {}
        self._open: _Failure | None = None
        self.last_root: str | None = None  # root signature of the failure the last entry went to

    def _joins(self, f: _Failure, entry: CrashEntry, t_ns: int) -> bool:
        proc, pid, log_ns = entry.process, entry.pid, entry.log_ns
        if proc is not None and pid is not None and f.pids.get(proc, pid) != pid:
            return False  # restarted
        if f.exit_line is not None:
            if log_ns is not None and f.exit_log_ns is not None:
                return AFTER_EXIT.holds(entry.line_no - f.exit_line, log_ns - f.exit_log_ns)
            return AFTER_EXIT.holds(entry.line_no - f.exit_line, t_ns - f.exit_ns)
        window = CONSEQUENCE_WINDOW if entry.consequence else SAME_FAILURE
        if log_ns is not None and f.last_log_ns is not None:
            return log_ns - entry.reach_ns - f.last_log_ns <= window.ns
        return window.holds(entry.line_no - f.last_line, t_ns - entry.reach_ns - f.last_ns)

    def add(self, entry: CrashEntry, t_ns: int) -> CrashEvent | None:
        f = self._open
        if f is not None and self._joins(f, entry, t_ns):
            before = self._events[f.root]
            event = self._join(before, entry, t_ns)
            visible = _visible(before) != _visible(event)
        else:
            f = self._open = _Failure(entry.signature, entry.line_no, t_ns)
            event = self._start(entry, t_ns)
            visible = True
        f.last_line, f.last_ns = max(f.last_line, entry.line_no), max(f.last_ns, t_ns)
        if entry.log_ns is not None:
            f.last_log_ns = entry.log_ns if f.last_log_ns is None else max(f.last_log_ns, entry.log_ns)
        if entry.process is not None and entry.pid is not None:
            f.pids.setdefault(entry.process, entry.pid)
        if entry.exception_type == "process_exit":
            f.exit_line, f.exit_ns, f.exit_log_ns = entry.line_no, t_ns, entry.log_ns
        self._events[event.signature] = event
        self.last_root = event.signature
        return event if visible else None

    def _start(self, entry: CrashEntry, t_ns: int) -> CrashEvent:
        old = self._events.get(entry.signature)
        if old is None:
            return CrashEvent(
                signature=entry.signature,
                exception_type=entry.exception_type,
                message=entry.message,
                innermost_frame=entry.innermost_frame,
                processes=(entry.process,) if entry.process is not None else (),
                count=1,
                first_seen_ns=t_ns,
                last_seen_ns=t_ns,
                excerpt=entry.excerpt,
                new=True,
                consequences=(),
            )
        return replace(
            old,
            # the group may learn its frame from a later, complete copy
            innermost_frame=old.innermost_frame or entry.innermost_frame,
            processes=_with(old.processes, entry.process),
            count=old.count + 1,
            last_seen_ns=max(old.last_seen_ns, t_ns),
            new=False,
        )

    def _join(self, root: CrashEvent, entry: CrashEntry, t_ns: int) -> CrashEvent:
        if entry.signature == root.signature:
            # the root's crash on one more process (or printed again by the same one)
            return replace(
                root,
                innermost_frame=root.innermost_frame or entry.innermost_frame,
                processes=_with(root.processes, entry.process),
                last_seen_ns=max(root.last_seen_ns, t_ns),
                new=False,
            )
        consequences = list(root.consequences)
        for i, c in enumerate(consequences):
            if c.signature == entry.signature:
                consequences[i] = replace(c, processes=_with(c.processes, entry.process), count=c.count + 1)
                break
        else:
            consequences.append(_consequence_of(entry))
        return replace(root, consequences=tuple(consequences), last_seen_ns=max(root.last_seen_ns, t_ns), new=False)

    def events(self) -> list[CrashEvent]:
        """The current state of every root signature, in order of first appearance."""
        return list(self._events.values())

    @property
    def failures(self) -> int:
        """Failures seen so far: what the crash count on screen says."""
        return sum(ev.count for ev in self._events.values())


def _visible(ev: CrashEvent) -> tuple:
    """What a reader of the event sees change (times and the counts of consequences do not count)."""
    return (ev.innermost_frame, ev.processes, ev.count, tuple((c.signature, c.processes) for c in ev.consequences))


def _with(processes: tuple[str, ...], process: str | None) -> tuple[str, ...]:
    if process is None or process in processes:
        return processes
    return (*processes, process)
