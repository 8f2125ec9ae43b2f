"""The crash detector: server log lines in, one at a time; crash entries out.

:class:`CrashDetector` follows Python tracebacks (with a header of their own or on the same line as a
message, chained exceptions, exception groups, elided frames, headerless tails, remote tracebacks
embedded in a message, several ranks interleaved) with a state machine per process, and tries the
marker table (``markers.py``) on every other line that passes its gate; markers that wait for more
lines (a C++ ``terminate``'s ``what()``) are held here. Line cleaning and prefix splitting live in
``logline.py``, signatures and failures in ``crashbook.py``; :class:`LogScanner` runs detector and book
over a whole log for ``scan-log``.

Prefixes the line parser does not know are learned from the line that opens a traceback (the text before
``Traceback (most recent call last):``) and stripped from that process's following lines while the
traceback lasts. Output of several processes glued on one physical line (no line buffering) is split where
a second process's tag or a line-start marker begins in the middle of the line. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from specload.watch.crashbook import CrashEntry, SignatureBook, SignatureIndex
from specload.watch.logline import LogLine, line_time_ns, parse_line
from specload.watch.markers import MARKER_STEPS, PREFILTER_RE, SHELL_RE, MarkerLine, exit_message

__all__ = ["MAX_LINE_CHARS", "CrashDetector", "LogScanner", "scan_text"]

# ------------------------------------------------------------------------------------------- patterns

_TB_HEADER_RE = re.compile(r"Traceback \(most recent call last\):\s*$")
_FILE_RE = re.compile(r"^\s*>?\s*File \"?(.*?)\"?, line (\w+), in (.+?)\s*$")
_EXC_RE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\([\w.]+\))?)(?::(?:\s(.*))?)?$")
# '  | ' bars in front of exception-group lines, or a whole '+-+---- 1 ----' / '+------' rule line
_GROUP_RULE_RE = re.compile(r"^\s*(?:(\+-[-+\s\d.]*$)|[|+] ?)")
_CHAIN_RE = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)\s*$"
)
# A bare exception line as the very first line of an excerpt (the tail of a cut traceback): only types
# that are unmistakably exceptions.
_ORPHAN_EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))(?:: (.*))?$")
_WHAT_RE = re.compile(r"^\s*what\(\):\s*(.*)$")

# Where a second process's output starts in the middle of a physical line (writers without line
# buffering): its tag, or a marker that always starts a line. Searched only in lines that pass the gate
# (PREFILTER_RE); a hit counts only after a non-blank character (a prefix at the start of the line is not
# glue, nor a marker word after a blank). No lookbehind in the pattern: with one, re tries every position.
_GLUE_RE = re.compile(
    r"(?:"
    r"\((?:VllmWorker\w*|Worker_\w+|EngineCore\w*|APIServer|RayWorkerWrapper)(?: rank=\d+)? pid=\d+[^)]*\) "
    r"|\[rank\d+\]:"
    r"|\[(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z][A-Z_]*\d+)*\] "
    r"|Fatal Python error: "
    r"|terminate called (?:after|without|recursively)"
    r"|!{3,} Segfault encountered"
    r"|(?:Segmentation fault|Aborted|Bus error|Illegal instruction|Floating point exception)"
    r"(?: \(core dumped\))?$"
    r")"
)

_GLUE_HINTS = ("pid=", "[rank", "[20", "Fatal Python", "terminate called", "Segfault", " in [")
_GLUE_ENDINGS = ("fault", "Aborted", "dumped)", "error", "instruction", "exception")


# faulthandler writes a frame in pieces ('  File "x.py", line 7 in ', then the function's name): another
# process's line can land between them, after the blank
_FRAME_HEAD_RE = re.compile(r'\s*File "[^"]*", line \d+ in ')


def _glue_possible(body: str) -> bool:
    """Cheap test before the glue search: the glue regex searches every position of the line."""
    return body.endswith(_GLUE_ENDINGS) or any(h in body for h in _GLUE_HINTS)


def _glued_at(body: str, at: int) -> bool:
    """A glue match at ``at`` starts a second process's output: it follows a non-blank character (a tag
    or marker after a blank is text), or a faulthandler frame cut after its ' in '."""
    return not body[at - 1].isspace() or _FRAME_HEAD_RE.fullmatch(body, 0, at) is not None


# Exception types of tracebacks that are consequences of a death elsewhere.
_CONSEQUENCE_TYPES_RE = re.compile(r"(?:^|\.)(?:\w*EngineDeadError|ChildFailedError)$")
_MPI_PROC_RE = re.compile(r"^\s*Process name: \[\[\d+,\d+\],(\d+)\]")
_MPI_CODE_RE = re.compile(r"^\s*Exit code: +(-?\d+)")

_TB_FRAMES, _TB_AFTER, _TB_CHAIN = 0, 1, 2
_AFTER_EXC_LIMIT = 40  # continuation lines after an exception line before the traceback is closed
_CHAIN_WAIT_LIMIT = 10  # non-blank lines after a chain marker before giving up on the next traceback
_FRAMES_LIMIT = 2000  # lines a traceback may take to reach its exception line
_EXCERPT_MAX = 400  # lines kept in one excerpt
_PENDING_LIMIT = 80  # lines a C++ 'terminate' waits for its what()
_HEADER_WAIT = 3  # lines of its process a vLLM fatal-error header waits for its traceback
_MPI_WAIT = 8  # lines mpirun's exit notice waits for its 'Exit code:' line
_STALE_FACTOR = 200  # an incomplete traceback quiet for settle_ns * this is dropped (live mode)
_IDLE_LINES = 1000  # a traceback whose process printed nothing for this many lines is over (any mode)
#: Lines longer than this are cut before they are examined: no crash line is that long, and a runaway
#: writer (a binary dumped into the log, /dev/zero) must cost bounded time and memory per line.
MAX_LINE_CHARS = 1 << 16


def _frame(path: str, line: str, func: str) -> str | None:
    if not line.isdigit():
        return None  # placeholder frames ('line xxx, in xxx') carry no location
    base = re.split(r"[\\/]", path)[-1]
    return f"{base}:{line} in {func}"


_DIGITS_RE = re.compile(r"\d+")


def _prefix_shape(p: LogLine) -> str:
    """The line's prefix with digits removed: equal for the lines of one multi-line log record."""
    return _DIGITS_RE.sub("", p.text[: len(p.text) - len(p.body)]) if p.record else ""


def _log_time(p: LogLine, into_body: int = 0) -> int | None:
    """The log's own time of a line: from its prefixes (and the first ``into_body`` characters of its
    body, where a prefix no list knows stands before a traceback header)."""
    return line_time_ns(p.text, len(p.text) - len(p.body) + into_body)


def _learned_prefix(prefix: str) -> re.Pattern[str] | None:
    """A pattern for lines that carry the same prefix as ``prefix`` (the text before a traceback header):
    digits may differ (timestamps, line numbers), blank runs may differ in length, the rest is literal."""
    if not prefix.strip() or len(prefix) > 400:
        return None
    parts = []
    toks = re.findall(r"\d+|\s+|[^\d\s]+", prefix)
    for i, tok in enumerate(toks):
        if tok[0].isdigit():
            parts.append(r"\d+")
        elif tok[0].isspace() and i < len(toks) - 1:
            parts.append(r"\s+")  # padding between fields varies ('%(levelname)-8s')
        else:
            # literal, the blanks that end the prefix too: what follows may be indented (frame lines)
            parts.append(re.escape(tok))
    return re.compile("".join(parts))


def _exception_type_ok(name: str, has_message: bool) -> bool:
    last = name.split("(")[0].rsplit(".", 1)[-1]
    if not last:
        return False
    # Exception classes are CamelCase; module-qualified lower-case ones exist (socket.timeout).
    if last[0].isupper() or "." in name:
        return has_message or any(ch.isupper() for ch in name) or "." in name
    return False


@dataclass(slots=True)
class _Traceback:
    process: str | None
    line_no: int
    t_ns: int
    lines: list[str] = field(default_factory=list)
    state: int = _TB_FRAMES
    frame: str | None = None  # innermost frame so far in the current segment
    exc: tuple[str, str, str | None] | None = None  # (type, message, innermost frame)
    causes: list[tuple[str, str]] = field(default_factory=list)
    counter: int = 0  # lines seen in the current state (limits above)
    exc_prefix: str = ""  # prefix shape of the exception line (see _prefix_shape)
    group: bool = False  # inside an exception group's '|'-ruled tracebacks
    log_ns: int | None = None  # the log's time of the first line (line_time_ns)
    pid: str | None = None  # the pid in the first line's tag
    last_line: int = 0  # the last line of its process it saw (see _IDLE_LINES)

    def __post_init__(self) -> None:
        self.last_line = self.line_no

    def add(self, text: str) -> None:
        if len(self.lines) < _EXCERPT_MAX:
            self.lines.append(text)


@dataclass(slots=True)
class _Pending:
    kind: str  # "terminate", "rust", "winexc", "header", "mpi_exit"
    process: str | None
    line_no: int
    t_ns: int
    exc_type: str
    lines: list[str]
    waited: int = 0
    seen_pc: bool = False
    message: str = ""  # emitted when nothing completes the marker (header: its own line)
    consequence: bool = False
    log_ns: int | None = None
    pid: str | None = None


class CrashDetector:
    """Feeds on log lines, one at a time, and returns the crash entries each line completes.

    Keeps a traceback in progress per process tag, so several ranks' tracebacks interleaved line by line
    are told apart. A traceback is held after its exception line, because "During handling ..." may still
    follow; it is released by the next line that cannot continue it, by :meth:`poll` once it has been quiet
    for ``settle_ns``, or by :meth:`finish`. Entries that are consequences by nature (a parent's sigquit
    line, a process exit) are held back while any traceback is still open, so that the root cause, whose
    traceback is often released later, comes out first.
    """

    def __init__(self, *, settle_ns: int = 300_000_000) -> None:
        self.settle_ns = settle_ns
        self.cut_lines = 0  # lines longer than MAX_LINE_CHARS, examined cut
        self._line_no = 0
        self._last_tag: str | None = None
        self._seen_text = False
        self._tbs: dict[str | None, _Traceback] = {}
        self._pending: list[_Pending] = []
        self._held: list[tuple[int, CrashEntry]] = []  # consequences waiting for open tracebacks
        self._learned: dict[str | None, re.Pattern[str]] = {}
        self._index = SignatureIndex()

    # -------------------------------------------------------------------------------------- public

    def feed(self, line: str, t_ns: int = 0) -> list[CrashEntry]:
        """Take one physical line; return the entries it completes (usually none)."""
        self._line_no += 1
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS]
            self.cut_lines += 1
        p = parse_line(line)
        hot = False
        if not (self._tbs or self._pending or self._held or self._learned):
            # the common case, kept lean: a line outside any crash that no marker could start
            if p.tag is not None:
                self._last_tag = p.tag if p.tag_inherits else None
            elif p.record:
                self._last_tag = None
            if PREFILTER_RE.search(p.body) is None:
                if not self._seen_text and p.body.strip():
                    self._seen_text = True
                return []
            hot = True  # (passed on, so the prefilter is not searched twice)
        out: list[CrashEntry] = []
        if self._held:
            # what waits may time out here, before the next poll: what it waits for, if quiet as long,
            # completes first (else a consequence could leave before its root)
            self._settle(t_ns, out)
        if self._tbs and not self._line_no & 63:
            self._close_idle(out)
        self._feed_parsed(p, t_ns, out, hot=hot)
        return self._release(out, t_ns) if out or self._held else out

    def _close_idle(self, out: list[CrashEntry]) -> None:
        """Tracebacks whose process went quiet: complete if they reached their exception, else dropped.
        (Offline, where no clock ends them, this bounds what waits on them: see _release.)"""
        for key, tb in list(self._tbs.items()):
            if self._line_no - tb.last_line > _IDLE_LINES:
                del self._tbs[key]
                if tb.state != _TB_FRAMES:
                    self._emit_traceback(tb, out)

    def _feed_parsed(
        self, p: LogLine, t_ns: int, out: list[CrashEntry], glued: bool = False, hot: bool = False
    ) -> None:
        # Attribute the line to a process. A raw line (no logger prefix, no tag) continues whatever the
        # last tagged record was: traceback lines, what() lines, hints printed without a prefix.
        if p.tag is not None:
            proc = p.tag
        elif p.record:
            proc = None
        else:
            proc = self._last_tag
        learned = self._learned.get(proc) if self._learned else None
        if learned is not None:
            if proc in self._tbs:
                p = self._strip_learned(p, learned)
            else:
                del self._learned[proc]
        if p.tag is not None:
            proc = p.tag
            self._last_tag = p.tag if p.tag_inherits else None
        elif p.record:
            proc = None
            self._last_tag = None
        body = p.body
        if not glued and (self._tbs or self._pending) and PREFILTER_RE.search(body) is None:
            pass  # (a line inside a crash block: no glue search needed unless a marker word is in it)
        elif not glued and _glue_possible(body):
            m = next((g for g in _GLUE_RE.finditer(body, 1) if _glued_at(body, g.start())), None)
            if m is not None:
                # another process's output starts mid-line: the two parts are two lines
                self._feed_parsed(replace(p, body=body[: m.start()]), t_ns, out, glued=True)
                rest = parse_line(body[m.start() :])
                self._feed_parsed(rest, t_ns, out, glued=True)
                return
        if "\n" in body:
            # one JSON record carrying a traceback: its lines are raw continuations of the record
            sublines = body.split("\n")
            self._feed_body(p, sublines[0], proc, t_ns, out)
            for sub in sublines[1:]:
                sub_line = replace(p, text=sub, body=sub, record=False, fields=None)
                self._feed_body(sub_line, sub, proc, t_ns, out)
            return
        self._feed_body(p, body, proc, t_ns, out, hot)

    def _strip_learned(self, p: LogLine, learned: re.Pattern[str]) -> LogLine:
        text = p.body
        m = learned.match(text)
        if m is None:
            # the line parser may have peeled this line further ('May 12 10:00:00 ERROR x.Error: '
            # reads as journald's 'host proc: '): the learned prefix then starts among the peeled ones
            text = p.text
            m = learned.search(text)
            if m is None or m.start() > len(text) - len(p.body):
                return p
        rest = parse_line(text[m.end() :])
        return replace(rest, text=p.text, tag=p.tag or rest.tag, record=p.record or rest.record)

    def _feed_body(
        self, p: LogLine, body: str, proc: str | None, t_ns: int, out: list[CrashEntry], hot: bool = False
    ) -> None:
        first_text = False
        if not self._seen_text and body.strip():
            self._seen_text = True
            first_text = True
        if not hot and not self._tbs and not self._pending and not PREFILTER_RE.search(body):
            return
        consumed = self._pending_line(p, body, proc, out)
        if not consumed:
            consumed = self._traceback_line(p, body, proc, t_ns, out)
        if not consumed and first_text:
            consumed = self._orphan_exception(p, body, proc, out)
        if not consumed:
            self._markers(p, body, proc, t_ns, out)

    def _release(self, out: list[CrashEntry], t_ns: int, *, force: bool = False) -> list[CrashEntry]:
        """Entries leave in the order they started: an entry is held while a traceback or pending marker
        that started before it is open (it may still complete into an earlier entry: the first failure in
        time is the root cause), a consequence while any traceback is open (its root's may be the one
        still open). Live, nothing is held longer than ``settle_ns``."""
        if not out and not self._held:
            return out
        self._held.extend((t_ns, e) for e in out)
        if force:
            ready = [e for _, e in self._held]
            self._held = []
        else:
            starts = [tb.line_no for tb in self._tbs.values()] + [q.line_no for q in self._pending]
            first = min(starts, default=None)
            ready, keep = [], []
            for t, e in self._held:
                blocked = (e.consequence and bool(self._tbs)) or (first is not None and first < e.line_no)
                if blocked and t_ns - t < self.settle_ns:
                    keep.append((t, e))
                else:
                    ready.append(e)
            self._held = keep
        ready.sort(key=lambda e: e.line_no)
        return ready

    def poll(self, t_ns: int) -> list[CrashEntry]:
        """Release entries whose block has been quiet for ``settle_ns`` (for live tailing)."""
        out: list[CrashEntry] = []
        self._settle(t_ns, out)
        return self._release(out, t_ns)

    def _settle(self, t_ns: int, out: list[CrashEntry]) -> None:
        """Complete the tracebacks and pending markers quiet for ``settle_ns``; drop stale ones."""
        for key, tb in list(self._tbs.items()):
            quiet = t_ns - tb.t_ns
            if tb.state != _TB_FRAMES and quiet >= self.settle_ns:
                del self._tbs[key]
                self._emit_traceback(tb, out)
            elif tb.state == _TB_FRAMES and quiet >= self.settle_ns * _STALE_FACTOR:
                del self._tbs[key]  # never reached its exception line: not a crash
        for pend in list(self._pending):
            if t_ns - pend.t_ns >= self.settle_ns:
                self._pending.remove(pend)
                self._emit_pending(pend, pend.message, out)

    def finish(self) -> list[CrashEntry]:
        """End of input: emit what is complete; drop tracebacks that never reached an exception line."""
        out: list[CrashEntry] = []
        for tb in sorted(self._tbs.values(), key=lambda t: t.line_no):
            if tb.state != _TB_FRAMES:
                self._emit_traceback(tb, out)
        self._tbs.clear()
        for pend in self._pending:
            self._emit_pending(pend, pend.message, out)
        self._pending.clear()
        out.sort(key=lambda e: e.line_no)
        return self._release(out, 0, force=True)

    # -------------------------------------------------------------------------------------- entries

    def _entry(
        self,
        exc_type: str,
        message: str,
        frame: str | None,
        process: str | None,
        excerpt: list[str] | str,
        line_no: int,
        causes: tuple[str, ...] = (),
        consequence: bool = False,
        *,
        log_ns: int | None = None,
        pid: str | None = None,
        reach_ns: int = 0,
    ) -> CrashEntry:
        message = message.strip()
        return CrashEntry(
            exception_type=exc_type,
            message=message,
            innermost_frame=frame,
            process=process,
            signature=self._index.assign(exc_type, message, frame),
            causes=causes,
            excerpt=excerpt if isinstance(excerpt, str) else "\n".join(excerpt),
            line_no=line_no,
            consequence=consequence,
            log_ns=log_ns,
            pid=pid,
            reach_ns=reach_ns,
        )

    def _emit_traceback(self, tb: _Traceback, out: list[CrashEntry]) -> None:
        self._learned.pop(tb.process, None)
        exc = tb.exc
        causes = list(tb.causes)
        if exc is None:
            if not causes:
                return
            # a chain marker was never followed by a traceback: the last exception seen is the crash
            t, m = causes.pop()
            exc = (t, m, None)
        cause_text = tuple(f"{t}: {m}" if m else t for t, m in causes)
        consequence = _CONSEQUENCE_TYPES_RE.search(exc[0]) is not None
        out.append(
            self._entry(exc[0], exc[1], exc[2], tb.process, tb.lines, tb.line_no, cause_text, consequence,
                        log_ns=tb.log_ns, pid=tb.pid)
        )

    def _emit_pending(self, pend: _Pending, message: str, out: list[CrashEntry]) -> None:
        if pend.kind == "mpi_exit" and not message:
            return  # the notice's 'Exit code:' never came: nothing to say the exit was not clean
        out.append(
            self._entry(pend.exc_type, message, None, pend.process, pend.lines, pend.line_no,
                        consequence=pend.consequence, log_ns=pend.log_ns, pid=pend.pid)
        )

    # -------------------------------------------------------------------------------------- tracebacks

    def _traceback_line(
        self, p: LogLine, body: str, proc: str | None, t_ns: int, out: list[CrashEntry]
    ) -> bool:
        """Advance the traceback of ``proc``; True when the line was part of its structure."""
        tb = self._tbs.get(proc)
        if tb is not None:
            tb.last_line = self._line_no
        # Exception groups (Python 3.11+) draw their tracebacks behind '|' and '+-' rules: strip them
        # inside a group so its frames and exception lines read like any other traceback.
        in_group = tb is not None and tb.group
        if body[:1] in (" ", "|", "+") and (in_group or "Traceback" in body):
            m = _GROUP_RULE_RE.match(body)
            # (outside a group, a bar opens one only in front of the header: 'time | level | name |
            # Traceback' is a custom log format, its prefix learned below)
            if m and (in_group or body[m.end() :].lstrip().startswith(("Traceback", "Exception Group"))):
                body = "" if m.group(1) else body[m.end() :]
                in_group = True
        if "Traceback" in body and _TB_HEADER_RE.search(body):
            if tb is not None and tb.state == _TB_CHAIN:
                tb.state, tb.frame, tb.counter, tb.t_ns = _TB_FRAMES, None, 0, t_ns
                tb.add(p.text)
                return True
            if tb is not None and tb.state == _TB_AFTER:
                kept = self._learned.get(proc)  # (this header's prefix, if learned, was stripped above)
                self._emit_traceback(tb, out)
                if kept is not None:
                    self._learned[proc] = kept
            # (a traceback still in its frames is abandoned: it never reached an exception line)
            at = body.find("Traceback (most recent call last)")
            log_ns = _log_time(p, max(p.body.find("Traceback"), 0))
            tb = _Traceback(proc, self._line_no, t_ns, group=in_group, log_ns=log_ns, pid=p.pid)
            if at > 0:
                # text before the header: a message ('Scheduler hit an exception: ') or a prefix no list
                # knows; if it is a prefix, the traceback's other lines carry it too (see _strip_learned)
                learned = _learned_prefix(body[:at])
                if learned is not None:
                    self._learned[proc] = learned
            tb.add(p.text)
            self._tbs[proc] = tb
            return True

        file_m = _FILE_RE.match(body) if "File" in body else None
        if tb is None:
            if file_m is None:
                return False
            # Frames without a header: an excerpt cut mid-traceback, or a logger that drops the header.
            tb = _Traceback(proc, self._line_no, t_ns, log_ns=_log_time(p), pid=p.pid)
            self._tbs[proc] = tb
            return self._frames_line(tb, p, body, file_m, t_ns)

        if tb.state == _TB_FRAMES:
            return self._frames_line(tb, p, body, file_m, t_ns)

        stripped = body.strip()
        if tb.state == _TB_AFTER:
            if not stripped:
                tb.add(p.text)
                return False
            if _CHAIN_RE.match(stripped):
                assert tb.exc is not None
                tb.causes.append((tb.exc[0], tb.exc[1]))
                tb.exc = None
                tb.state, tb.counter, tb.t_ns = _TB_CHAIN, 0, t_ns
                tb.add(p.text)
                return True
            if file_m is not None:
                # Frames right after an exception line: a remote traceback carried in the message (Ray
                # prints the worker's frames and its exception). Close this one, start the embedded one.
                del self._tbs[proc]
                self._emit_traceback(tb, out)
                tb = _Traceback(proc, self._line_no, t_ns, log_ns=_log_time(p), pid=p.pid)
                self._tbs[proc] = tb
                return self._frames_line(tb, p, body, file_m, t_ns)
            # A continuation of the exception's message (CUDA hints, a multi-line message) is a raw line
            # or carries the same record prefix as the exception line (vLLM re-prefixes every line of a
            # record). Anything else is a new record: the traceback is complete.
            tb.counter += 1
            if (p.record and _prefix_shape(p) != tb.exc_prefix) or tb.counter > _AFTER_EXC_LIMIT:
                del self._tbs[proc]
                self._emit_traceback(tb, out)
                return False
            tb.add(p.text)
            tb.t_ns = t_ns
            return False

        # _TB_CHAIN: waiting for the next traceback of the chain
        if not stripped:
            tb.add(p.text)
            return False
        if file_m is not None:
            tb.state, tb.frame, tb.counter = _TB_FRAMES, None, 0
            return self._frames_line(tb, p, body, file_m, t_ns)
        tb.counter += 1
        if tb.counter > _CHAIN_WAIT_LIMIT:
            del self._tbs[proc]
            self._emit_traceback(tb, out)
        return False

    def _frames_line(
        self, tb: _Traceback, p: LogLine, body: str, file_m: re.Match[str] | None, t_ns: int
    ) -> bool:
        tb.t_ns = t_ns
        if file_m is not None:
            tb.frame = _frame(file_m.group(1), file_m.group(2), file_m.group(3))
            tb.add(p.text)
            return True
        if body and not body[0].isspace():
            m = _EXC_RE.match(body)
            if m and _exception_type_ok(m.group(1), m.group(2) is not None) and not SHELL_RE.match(body):
                tb.exc = (m.group(1), m.group(2) or "", tb.frame)
                tb.exc_prefix = _prefix_shape(p)
                tb.state, tb.counter = _TB_AFTER, 0
                tb.add(p.text)
                return True
        # source lines, caret lines, '...', or lines of another stream printed into this one
        tb.counter += 1
        if body.strip():
            tb.add(p.text)
        if tb.counter > _FRAMES_LIMIT:
            del self._tbs[tb.process]
        return False

    def _orphan_exception(self, p: LogLine, body: str, proc: str | None, out: list[CrashEntry]) -> bool:
        m = _ORPHAN_EXC_RE.match(body)
        if not m:
            return False
        out.append(self._entry(m.group(1), m.group(2) or "", None, proc, p.text, self._line_no,
                               log_ns=_log_time(p), pid=p.pid))
        return True

    # -------------------------------------------------------------------------------------- pending

    def _pending_line(self, p: LogLine, body: str, proc: str | None, out: list[CrashEntry]) -> bool:
        if not self._pending:
            return False
        what = _WHAT_RE.match(body) if "what()" in body else None
        for pend in list(self._pending):
            if pend.kind == "terminate":
                if what is not None:
                    # what() belongs to the most recent terminate (they are printed back to back; other
                    # processes' lines may come between)
                    terminates = [q for q in self._pending if q.kind == "terminate"]
                    own = [q for q in terminates if q.process == proc]
                    latest = max(own or terminates, key=lambda q: q.line_no)
                    latest.lines.append(p.text)
                    self._pending.remove(latest)
                    self._emit_pending(latest, what.group(1), out)
                    return True
                pend.waited += 1
                if pend.waited > _PENDING_LIMIT:
                    self._pending.remove(pend)
                    self._emit_pending(pend, "", out)
            elif pend.kind == "mpi_exit":
                stripped = body.strip()
                m = _MPI_PROC_RE.match(stripped)
                if m:
                    pend.process = f"rank {m.group(1)}"
                    pend.lines.append(p.text)
                    return True
                m = _MPI_CODE_RE.match(stripped)
                pend.waited += 1
                if m or pend.waited > _MPI_WAIT:
                    self._pending.remove(pend)
                    if m:
                        pend.lines.append(p.text)
                        self._emit_pending(pend, exit_message(int(m.group(1))) or "", out)
                        return True
            elif pend.process == proc:
                stripped = body.strip()
                if not stripped:
                    continue
                if pend.kind == "header":
                    # vLLM logs the traceback right after this line: it is the crash, the line its header
                    self._pending.remove(pend)
                    if "Traceback" not in stripped:
                        self._emit_pending(pend, pend.message, out)
                    continue
                if pend.kind == "rust":
                    pend.lines.append(p.text)
                    self._pending.remove(pend)
                    self._emit_pending(pend, stripped, out)
                    return True
                # winexc: "Exception 0xc0000005 ...", "PC=0x...", then the line that says where
                pend.lines.append(p.text)
                if not pend.seen_pc:
                    pend.seen_pc = stripped.startswith("PC=")
                    pend.waited += 1
                    if pend.waited > 3:
                        self._pending.remove(pend)
                        self._emit_pending(pend, "", out)
                    return True
                self._pending.remove(pend)
                self._emit_pending(pend, stripped, out)
                return True
        return False

    # -------------------------------------------------------------------------------------- markers

    def _markers(self, p: LogLine, body: str, proc: str | None, t_ns: int, out: list[CrashEntry]) -> None:
        s = body.strip()
        if not s:
            return
        line: MarkerLine | None = None
        for gates, find, make, whole_line, pattern in MARKER_STEPS:
            # (plain loops: a generator in any() costs more than the whole test on a short line)
            if gates:
                for g in gates:
                    if g in s:
                        break
                else:
                    if not whole_line:
                        continue
                    for g in gates:
                        if g in p.text:
                            break
                    else:
                        continue
            m = find(s)
            if m is None and whole_line:
                m = pattern.search(p.text)
            if m is None:
                continue
            if line is None:
                line = MarkerLine(s, p, proc, proc in self._tbs)
            hit = make(m, line)
            if hit is None:
                continue
            process = hit.process if hit.process is not None else proc
            if hit.pending is not None:
                self._pending.append(
                    _Pending(hit.pending, process, self._line_no, t_ns, hit.exception_type, [p.text],
                             message=hit.message, consequence=hit.consequence, log_ns=_log_time(p), pid=p.pid)
                )
            else:
                out.append(
                    self._entry(hit.exception_type, hit.message, None, process, p.text, self._line_no,
                                consequence=hit.consequence, log_ns=_log_time(p), pid=p.pid,
                                reach_ns=hit.reach_ns)
                )
            return


# ------------------------------------------------------------------------------------------- whole logs


class LogScanner:
    """A whole log, line by line, in bounded memory: the detector, the book, one entry per signature
    and process (the first), and the counters ``scan-log`` reports."""

    def __init__(self) -> None:
        self.detector = CrashDetector()
        self.book = SignatureBook()
        self.lines = 0
        self._entries: dict[tuple[str, str | None], CrashEntry] = {}
        self._roles: dict[tuple[str, str | None], str] = {}  # (signature, process) -> root signature

    def feed(self, line: str) -> None:
        self.lines += 1
        self._take(self.detector.feed(line))

    def feed_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed(line)

    def finish(self) -> None:
        self._take(self.detector.finish())

    def _take(self, entries: list[CrashEntry]) -> None:
        for e in entries:
            self.book.add(e, 0)
            key = (e.signature, e.process)
            if key not in self._entries:
                self._entries[key] = e
                self._roles[key] = self.book.last_root or e.signature

    @property
    def cut_lines(self) -> int:
        return self.detector.cut_lines

    def entries(self) -> list[CrashEntry]:
        """One entry per signature per process, in order of first appearance."""
        return sorted(self._entries.values(), key=lambda e: e.line_no)

    def root_of(self, entry: CrashEntry) -> str:
        """The signature of the failure's root cause that ``entry`` belonged to when first seen."""
        return self._roles[(entry.signature, entry.process)]


def scan_text(text: str) -> list[CrashEntry]:
    """All crashes in a whole log: one entry per signature per process, in order of first appearance."""
    scanner = LogScanner()
    scanner.feed_lines(text.split("\n"))
    scanner.finish()
    return scanner.entries()
