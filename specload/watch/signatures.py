"""Crash signatures in server logs: find crashes line by line and group repeats.

This module owns *what a crash looks like* in the output of an LLM inference server and *when two crashes
are the same*. Line cleaning and prefix splitting live in ``logline.py``; tailing files and processes
lives elsewhere and only calls :class:`CrashDetector`. Nothing here does I/O or imports Textual.

Markers recognised (the ``exception_type`` given to each is in brackets):

* Python tracebacks, with a header of their own or on the same line as a message, chained exceptions
  ("During handling ..." / "The above exception was the direct cause ..."; the last exception is the
  crash and earlier ones are its ``causes``), elided frames, headerless tails, remote tracebacks embedded
  in a message (Ray), several ranks interleaved [the type as printed];
* uncaught C++ exceptions: ``terminate called after throwing an instance of 'T'`` + ``what():`` and
  ``Unhandled exception: <mangled>. what(): ...`` [demangled T];
* C/C++ ``Assertion `x' failed`` [``Assertion failed``], ``GGML_ASSERT`` [``GGML_ASSERT``];
* CUDA errors printed outside a traceback (ggml, vLLM custom all-reduce, TensorRT-LLM) [``CUDA error``];
* ``Fatal Python error: X`` [``Fatal Python error``]; abort/segfault notices from Go, abseil/glog, the
  shell (including job-control notices ``[1]    7302 abort      cmd`` / ``[1]+  Killed   cmd``), Open MPI
  (``[host:pid] Signal: Aborted (6)``) and torch's ``!!!!!!! Segfault encountered !!!!!!!`` [``SIGABRT``,
  ``SIGSEGV`` ...]; Windows ``Exception 0xc0000005`` from the Go runtime;
* Rust panics, old and new format, and Go panics [``panic``], Go ``fatal error:`` [``fatal error``];
* torch NCCL watchdog timeouts [``NCCL watchdog timeout``], SGLang's watchdog [``watchdog_timeout``];
* lifecycle lines that report a server death (SGLang sigquit / scheduler dead, TGI shard failures, vLLM
  engine or worker death incl. V0 ``Worker ... pid N died, exit code`` and ``Got fatal signal from worker
  processes``, Ollama ``llama runner process has terminated`` / ``msg="llama runner terminated"`` (the
  message is the ``error=`` value), llama.cpp model-load exit) [``server_fatal``].

The grouping rule (the ``signature``)
-------------------------------------
Two entries have the same signature when

1. their exception types are equal, and
2. their messages are equal once *masked* — hex addresses, paths, long ids and every number replaced by
   placeholders, so rank numbers, pids, sizes, request ids and addresses do not matter — or one masked
   message is a prefix (of at least 16 characters) of the other, because copies of one message are often
   cut (a truncated paste, a control byte that ended the line), and
3. their innermost frames are equal, *or one of them has none*: a copy whose frames were elided (SGLang
   prints ``...``), cut out of the excerpt, or that is a bare exception line is the same crash as a full
   copy. A group takes the first concrete frame it sees; after that an entry with a *different* frame
   starts a new group (same error raised from a different place is a different bug).

Because rules 2 and 3 compare against groups already seen, signature ids are assigned by the detector in
stream order and are stable within one detector. The id is a short hash of the group's first
(type, masked message, frame).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

from specload.records import CrashEvent
from specload.watch.logline import LogLine, parse_line

__all__ = [
    "CrashDetector",
    "CrashEntry",
    "SignatureBook",
    "demangle",
    "mask_message",
    "scan_text",
]


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


class _SignatureIndex:
    """Assigns group ids by the rule in the module docstring."""

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


# ------------------------------------------------------------------------------------------- demangling

_LEN_NAME_RE = re.compile(r"(\d+)")


def demangle(name: str) -> str:
    """Itanium-demangle a type name as printed by ``typeid(e).name()`` (``N3c1016DistBackendErrorE``).

    Only the nested-name and ``St`` (std::) forms that exception types use; anything else is returned
    unchanged.
    """
    s = name[2:] if name.startswith("_Z") else name
    parts: list[str] = []
    if s.startswith("N") and s.endswith("E"):
        s = s[1:-1]
    if s.startswith("St"):
        parts.append("std")
        s = s[2:]
    i = 0
    while i < len(s):
        m = _LEN_NAME_RE.match(s, i)
        if not m:
            return name
        n = int(m.group(1))
        start = m.end()
        if n <= 0 or start + n > len(s):
            return name
        parts.append(s[start : start + n])
        i = start + n
    return "::".join(parts) if parts else name


# ------------------------------------------------------------------------------------------- patterns

# Cheap gate: a line outside any traceback or pending marker is examined further only if it contains one
# of these. Normal serving lines (throughput, access logs) fail it with a single regex scan.
_PREFILTER_RE = re.compile(
    r"Traceback|File |rror|xception|panic|ssert|SIG|bort|atal|terminat|what\(\)|atchdog|sigquit|Shard|"
    r"Crashed|dead|died|fault|[Kk]illed|Cuda|CUDA|GGML|runner process|core dumped|llegal|Bus error|"
    r"Floating point|model loading"
)

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

_TERMINATE_RE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_TERMINATE_BARE_RE = re.compile(r"terminate called (without an active exception|recursively)")
_WHAT_RE = re.compile(r"^\s*what\(\):\s*(.*)$")
_UNHANDLED_RE = re.compile(r"Unhandled exception: (\S+?)\.? what\(\):\s*(.*)$")
_ASSERT_RE = re.compile(r"Assertion [`'‘\"](.+)['’\"] failed")
_BSD_ASSERT_RE = re.compile(r"Assertion failed: \((.+)\), function ")
_GGML_ASSERT_RE = re.compile(r"GGML_ASSERT\((.*)\) failed")
_GGML_ASSERT2_RE = re.compile(r"GGML_ASSERT: \S+?:\d+: (.*)$")
_CUDA_GGML_RE = re.compile(r"^CUDA error: (.+)$")
_CUDA_GGML_OLD_RE = re.compile(r"^CUDA error \d+ at \S+: (.+)$")
_CUDA_VLLM_RE = re.compile(r"Failed: Cuda error \S+ '(.+)'")
_CUDA_TRT_RE = re.compile(r"CUDA runtime error in \S+: (.+?)(?:\s+\([^()]*\))?\s*$")
_CUDA_TRT2_RE = re.compile(r"Cuda Runtime \(([^)]+)\)")
_FATAL_PY_RE = re.compile(r"^Fatal Python error: (.*)$")
_SIGNAL_NAMES = "SIGABRT|SIGSEGV|SIGBUS|SIGILL|SIGFPE|SIGTRAP|SIGKILL|SIGSYS"
_GO_SIGNAL_RE = re.compile(r"^(" + _SIGNAL_NAMES + r"): \w")
_ABSL_SIGNAL_RE = re.compile(
    r"\*\*\* (" + _SIGNAL_NAMES + r") (?:received at time=|\(@[^)]*\) received by PID)"
)
_SHELL_NAMES = {
    "Aborted": "SIGABRT",
    "Segmentation fault": "SIGSEGV",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
    "Floating point exception": "SIGFPE",
    "Killed": "SIGKILL",
    "abort": "SIGABRT",
    "segmentation fault": "SIGSEGV",
    "bus error": "SIGBUS",
    "illegal hardware instruction": "SIGILL",
    "floating point exception": "SIGFPE",
    "killed": "SIGKILL",
}
_SHELL_ALT = "Aborted|Segmentation fault|Bus error|Illegal instruction|Floating point exception|Killed"
_SHELL_RE = re.compile(r"^(" + _SHELL_ALT + r")(?: \(core dumped\))?$")
_BASH_JOB_RE = re.compile(r": line \d+: +\d+ (" + _SHELL_ALT + r")\b")
_ZSH_RE = re.compile(
    r"^zsh: (abort|segmentation fault|bus error|illegal hardware instruction|killed|floating point exception)\b"
)
# job-control notices: zsh '[1]    7302 abort      cmd', bash '[1]+  Killed                  cmd'
_JOB_RE = re.compile(
    r"^\[\d+\][+-]? +(?:[+-] +)?(?:\d+ +)?("
    + _SHELL_ALT
    + r"|abort|segmentation fault|bus error|illegal hardware instruction|killed|floating point exception)"
    r"(?: \(core dumped\))?(?: {2,}|$)"
)
# Open MPI's signal report: '[host:01873] Signal: Aborted (6)'
_MPI_SIGNAL_RE = re.compile(r"^(?:\[[^\]]+\] )?Signal: [\w ]+ \((\d+)\)$")
_SIGNAL_NUMBERS = {
    "4": "SIGILL",
    "6": "SIGABRT",
    "7": "SIGBUS",
    "8": "SIGFPE",
    "9": "SIGKILL",
    "11": "SIGSEGV",
}
# torch's fatal-signal handler (c10): '!!!!!!! Segfault encountered !!!!!!!'
_TORCH_SEGFAULT_RE = re.compile(r"^!+ Segfault encountered !+$")
_WIN_EXC_RE = re.compile(r"^Exception (0x[0-9a-fA-F]+) 0x")
_RUST_OLD_RE = re.compile(r"thread '([^']*)' panicked at '(.*)', (\S+?:\d+(?::\d+)?)\s*$")
_RUST_NEW_RE = re.compile(r"thread '([^']*)' panicked at (\S+?:\d+(?::\d+)?):\s*(.*)$")
_GO_PANIC_RE = re.compile(r"^panic: (.+)$")
_GO_FATAL_RE = re.compile(r"^fatal error: (.+)$")
_NCCL_WATCHDOG_RE = re.compile(r"Watchdog caught collective operation timeout:.*$")
_SGLANG_WATCHDOG_RE = re.compile(r"Watchdog timeout \(self\.watchdog_timeout=.*$")
# server lifecycle deaths: the message is the text of the line after its prefix
_LIFECYCLE_RE = re.compile(
    r"Received sigquit from a child proces"
    r"|^Shard \d+ failed to start|^Shard \d+ crashed|Shard process was signaled to shutdown with signal"
    r"|^Webserver Crashed"
    r"|MQLLMEngine is already dead|Engine process \(pid \d+\) died"
    r"|(?:Engine core|Worker) proc \S+ died unexpectedly|^Worker \S+ pid \d+ died, exit code"
    r"|^Got fatal signal from worker processes, shutting down"
    r"|scheduler is dead|Child process unexpectedly failed with"
    r"|exiting due to model loading error"
)
_OLLAMA_RUNNER_RE = re.compile(
    r"llama runner process (?:has terminated|no longer running)\b.*$|msg=\"?llama runner terminated\b.*$"
)
# a Rust binary's `main` returning Err: 'Error: ShardCannotStart' (raw line, no logger prefix)
_RUST_MAIN_ERR_RE = re.compile(r"^Error: [A-Z]\w*(?:\s*[({].*)?$")

_TB_FRAMES, _TB_AFTER, _TB_CHAIN = 0, 1, 2
_AFTER_EXC_LIMIT = 40  # continuation lines after an exception line before the traceback is closed
_CHAIN_WAIT_LIMIT = 10  # non-blank lines after a chain marker before giving up on the next traceback
_FRAMES_LIMIT = 2000  # lines a traceback may take to reach its exception line
_EXCERPT_MAX = 400  # lines kept in one excerpt
_PENDING_LIMIT = 80  # lines a C++ 'terminate' waits for its what()
_STALE_FACTOR = 200  # an incomplete traceback quiet for settle_ns * this is dropped (live mode)


def _frame(path: str, line: str, func: str) -> str | None:
    if not line.isdigit():
        return None  # placeholder frames ('line xxx, in xxx') carry no location
    base = re.split(r"[\\/]", path)[-1]
    return f"{base}:{line} in {func}"


_DIGITS_RE = re.compile(r"\d+")


def _prefix_shape(p: LogLine) -> str:
    """The line's prefix with digits removed: equal for the lines of one multi-line log record."""
    return _DIGITS_RE.sub("", p.text[: len(p.text) - len(p.body)]) if p.record else ""


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

    def add(self, text: str) -> None:
        if len(self.lines) < _EXCERPT_MAX:
            self.lines.append(text)


@dataclass(slots=True)
class _Pending:
    kind: str  # "terminate", "rust", "winexc"
    process: str | None
    line_no: int
    t_ns: int
    exc_type: str
    lines: list[str]
    waited: int = 0
    seen_pc: bool = False


class CrashDetector:
    """Feeds on log lines, one at a time, and returns the crash entries each line completes.

    Keeps a traceback in progress per process tag, so several ranks' tracebacks interleaved line by line
    are told apart. A traceback is held after its exception line, because "During handling ..." may still
    follow; it is released by the next line that cannot continue it, by :meth:`poll` once it has been quiet
    for ``settle_ns``, or by :meth:`finish`.
    """

    def __init__(self, *, settle_ns: int = 300_000_000) -> None:
        self.settle_ns = settle_ns
        self._line_no = 0
        self._last_tag: str | None = None
        self._seen_text = False
        self._tbs: dict[str | None, _Traceback] = {}
        self._pending: list[_Pending] = []
        self._index = _SignatureIndex()

    # -------------------------------------------------------------------------------------- public

    def feed(self, line: str, t_ns: int = 0) -> list[CrashEntry]:
        """Take one physical line; return the entries it completes (usually none)."""
        self._line_no += 1
        p = parse_line(line)
        # Attribute the line to a process. A raw line (no logger prefix, no tag) continues whatever the
        # last tagged record was: traceback lines, what() lines, hints printed without a prefix.
        if p.tag is not None:
            proc = p.tag
            self._last_tag = p.tag if p.tag_inherits else None
        elif p.record:
            proc = None
            self._last_tag = None
        else:
            proc = self._last_tag
        out: list[CrashEntry] = []
        if "\n" in p.body:
            # one JSON record carrying a traceback: its lines are raw continuations of the record
            sublines = p.body.split("\n")
            self._feed_body(p, sublines[0], proc, t_ns, out)
            for sub in sublines[1:]:
                sub_line = replace(p, text=sub, body=sub, record=False, fields=None)
                self._feed_body(sub_line, sub, proc, t_ns, out)
            return out
        self._feed_body(p, p.body, proc, t_ns, out)
        return out

    def _feed_body(self, p: LogLine, body: str, proc: str | None, t_ns: int, out: list[CrashEntry]) -> None:
        first_text = False
        if not self._seen_text and body.strip():
            self._seen_text = True
            first_text = True
        if not self._tbs and not self._pending and not _PREFILTER_RE.search(body):
            return
        consumed = self._pending_line(p, body, proc, out)
        if not consumed:
            consumed = self._traceback_line(p, body, proc, t_ns, out)
        if not consumed and first_text:
            consumed = self._orphan_exception(p, body, proc, out)
        if not consumed:
            self._markers(p, body, proc, t_ns, out)

    def poll(self, t_ns: int) -> list[CrashEntry]:
        """Release entries whose block has been quiet for ``settle_ns`` (for live tailing)."""
        out: list[CrashEntry] = []
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
                self._emit_pending(pend, "", out)
        return out

    def finish(self) -> list[CrashEntry]:
        """End of input: emit what is complete; drop tracebacks that never reached an exception line."""
        out: list[CrashEntry] = []
        for tb in sorted(self._tbs.values(), key=lambda t: t.line_no):
            if tb.state != _TB_FRAMES:
                self._emit_traceback(tb, out)
        self._tbs.clear()
        for pend in self._pending:
            self._emit_pending(pend, "", out)
        self._pending.clear()
        out.sort(key=lambda e: e.line_no)
        return out

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
        )

    def _emit_traceback(self, tb: _Traceback, out: list[CrashEntry]) -> None:
        exc = tb.exc
        causes = list(tb.causes)
        if exc is None:
            if not causes:
                return
            # a chain marker was never followed by a traceback: the last exception seen is the crash
            t, m = causes.pop()
            exc = (t, m, None)
        cause_text = tuple(f"{t}: {m}" if m else t for t, m in causes)
        out.append(self._entry(exc[0], exc[1], exc[2], tb.process, tb.lines, tb.line_no, cause_text))

    def _emit_pending(self, pend: _Pending, message: str, out: list[CrashEntry]) -> None:
        out.append(self._entry(pend.exc_type, message, None, pend.process, pend.lines, pend.line_no))

    # -------------------------------------------------------------------------------------- tracebacks

    def _traceback_line(
        self, p: LogLine, body: str, proc: str | None, t_ns: int, out: list[CrashEntry]
    ) -> bool:
        """Advance the traceback of ``proc``; True when the line was part of its structure."""
        tb = self._tbs.get(proc)
        # Exception groups (Python 3.11+) draw their tracebacks behind '|' and '+-' rules: strip them
        # inside a group so its frames and exception lines read like any other traceback.
        in_group = tb is not None and tb.group
        if body[:1] in (" ", "|", "+") and (in_group or "Traceback" in body):
            m = _GROUP_RULE_RE.match(body)
            if m:
                body = "" if m.group(1) else body[m.end() :]
                in_group = True
        if "Traceback" in body and _TB_HEADER_RE.search(body):
            if tb is not None and tb.state == _TB_CHAIN:
                tb.state, tb.frame, tb.counter, tb.t_ns = _TB_FRAMES, None, 0, t_ns
                tb.add(p.text)
                return True
            if tb is not None and tb.state == _TB_AFTER:
                self._emit_traceback(tb, out)
            # (a traceback still in its frames is abandoned: it never reached an exception line)
            tb = _Traceback(proc, self._line_no, t_ns, group=in_group)
            tb.add(p.text)
            self._tbs[proc] = tb
            return True

        file_m = _FILE_RE.match(body) if "File" in body else None
        if tb is None:
            if file_m is None:
                return False
            # Frames without a header: an excerpt cut mid-traceback, or a logger that drops the header.
            tb = _Traceback(proc, self._line_no, t_ns)
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
                tb = _Traceback(proc, self._line_no, t_ns)
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
            if m and _exception_type_ok(m.group(1), m.group(2) is not None) and not _SHELL_RE.match(body):
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
        out.append(self._entry(m.group(1), m.group(2) or "", None, proc, p.text, self._line_no))
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
            elif pend.process == proc:
                stripped = body.strip()
                if not stripped:
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
        n = self._line_no

        def emit(exc_type: str, message: str) -> None:
            out.append(self._entry(exc_type, message, None, proc, p.text, n))

        m = _TERMINATE_RE.search(s)
        if m:
            self._pending.append(_Pending("terminate", proc, n, t_ns, m.group(1), [p.text]))
            return
        m = _UNHANDLED_RE.search(s)
        if m:
            emit(demangle(m.group(1)), m.group(2))
            return
        m = _TERMINATE_BARE_RE.search(s)
        if m:
            emit("std::terminate", f"terminate called {m.group(1)}")
            return
        m = _FATAL_PY_RE.match(s)
        if m:
            emit("Fatal Python error", m.group(1))
            return
        m = _ASSERT_RE.search(s) or _BSD_ASSERT_RE.search(s)
        if m:
            emit("Assertion failed", m.group(1))
            return
        m = _GGML_ASSERT_RE.search(s) or _GGML_ASSERT2_RE.search(s)
        if m:
            emit("GGML_ASSERT", m.group(1))
            return
        m = _NCCL_WATCHDOG_RE.search(s)
        if m:
            emit("NCCL watchdog timeout", m.group(0))
            return
        m = _SGLANG_WATCHDOG_RE.search(s)
        if m:
            emit("watchdog_timeout", m.group(0))
            return
        # A ggml-style 'CUDA error: X' line inside a traceback's message is part of that exception.
        if proc not in self._tbs:
            m = _CUDA_GGML_RE.match(s) or _CUDA_GGML_OLD_RE.match(s)
            if m:
                emit("CUDA error", m.group(1))
                return
        m = _CUDA_VLLM_RE.search(s) or _CUDA_TRT_RE.search(s) or _CUDA_TRT2_RE.search(s)
        if m:
            emit("CUDA error", m.group(1))
            return
        m = _GO_SIGNAL_RE.match(s) or _ABSL_SIGNAL_RE.search(s)
        if m:
            emit(m.group(1), "")
            return
        m = _SHELL_RE.match(s) or _BASH_JOB_RE.search(s) or _ZSH_RE.match(s) or _JOB_RE.match(s)
        if m:
            emit(_SHELL_NAMES[m.group(1)], "")
            return
        if _TORCH_SEGFAULT_RE.match(s):
            emit("SIGSEGV", "")
            return
        m = _MPI_SIGNAL_RE.match(s)
        if m and m.group(1) in _SIGNAL_NUMBERS:
            emit(_SIGNAL_NUMBERS[m.group(1)], "")
            return
        m = _WIN_EXC_RE.match(s)
        if m:
            self._pending.append(_Pending("winexc", proc, n, t_ns, f"Exception {m.group(1)}", [p.text]))
            return
        m = _RUST_OLD_RE.search(s)
        if m:
            emit("panic", m.group(2))
            return
        m = _RUST_NEW_RE.search(s)
        if m:
            if m.group(3):
                emit("panic", m.group(3))
            else:
                self._pending.append(_Pending("rust", proc, n, t_ns, "panic", [p.text]))
            return
        m = _GO_PANIC_RE.match(s)
        if m:
            emit("panic", m.group(1))
            return
        m = _GO_FATAL_RE.match(s)
        if m:
            emit("fatal error", m.group(1))
            return
        m = _OLLAMA_RUNNER_RE.search(s) if "llama runner" in s else None
        if m is None and "llama runner terminated" in (p.fields or {}).get("msg", ""):
            m = _OLLAMA_RUNNER_RE.search(p.text)
        if m:
            fields = p.fields or {}
            err = fields.get("error", "")
            marker = m.group(0).split(":")[0]
            if err and (marker in err or "llama runner terminated" in fields.get("msg", "")):
                emit("server_fatal", err)
            else:
                emit("server_fatal", m.group(0))
            return
        if _LIFECYCLE_RE.search(s):
            emit("server_fatal", s)
            return
        if not p.record and _RUST_MAIN_ERR_RE.match(s):
            emit("server_fatal", s)
            return


def scan_text(text: str) -> list[CrashEntry]:
    """All crashes in a whole log: one entry per signature per process, in order of first appearance."""
    det = CrashDetector()
    entries: list[CrashEntry] = []
    for line in text.split("\n"):
        entries.extend(det.feed(line))
    entries.extend(det.finish())
    entries.sort(key=lambda e: e.line_no)
    seen: set[tuple[str, str | None]] = set()
    unique: list[CrashEntry] = []
    for e in entries:
        key = (e.signature, e.process)
        if key not in seen:
            seen.add(key)
            unique.append(e)
    return unique


# ------------------------------------------------------------------------------------------- grouping


@dataclass(slots=True)
class _BookGroup:
    event: CrashEvent


class SignatureBook:
    """Groups entries live into :class:`~specload.records.CrashEvent` by their signature.

    ``processes`` lists the named processes that showed the signature, in order of first appearance;
    entries without a process tag count but add no name.
    """

    def __init__(self) -> None:
        self._groups: dict[str, _BookGroup] = {}

    def add(self, entry: CrashEntry, t_ns: int) -> CrashEvent:
        group = self._groups.get(entry.signature)
        if group is None:
            event = CrashEvent(
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
            )
            self._groups[entry.signature] = _BookGroup(event)
            return event
        old = group.event
        processes = old.processes
        if entry.process is not None and entry.process not in processes:
            processes = (*processes, entry.process)
        event = CrashEvent(
            signature=old.signature,
            exception_type=old.exception_type,
            message=old.message,
            # the group may learn its frame from a later, complete copy
            innermost_frame=old.innermost_frame or entry.innermost_frame,
            processes=processes,
            count=old.count + 1,
            first_seen_ns=old.first_seen_ns,
            last_seen_ns=max(old.last_seen_ns, t_ns),
            excerpt=old.excerpt,
            new=False,
        )
        group.event = event
        return event

    def events(self) -> list[CrashEvent]:
        """The current state of every signature, in order of first appearance."""
        return [g.event for g in self._groups.values()]
