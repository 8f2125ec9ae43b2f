"""Crash signatures in server logs: find crashes line by line, group repeats, and group a failure's lines.

This module owns *what a crash looks like* in the output of an LLM inference server, *when two crashes
are the same* and *which crashes are one failure*. Line cleaning and prefix splitting live in
``logline.py``; reading files and processes lives elsewhere and only calls :class:`CrashDetector` (or
:class:`LogScanner` for a whole log). Nothing here does I/O or imports Textual.

What is recognised
------------------
Python tracebacks (with a header of their own or on the same line as a message, chained exceptions,
exception groups, elided frames, headerless tails, remote tracebacks embedded in a message, several ranks
interleaved) are followed by :class:`CrashDetector`'s traceback state machine. Every other kind of crash
line is a row of :data:`MARKERS`, a table of (name, pattern, what entry it makes, doc) kept in the order
they are tried; the table is the reference for the marker kinds and their ``exception_type``.

Prefixes the line parser does not know are learned from the line that opens a traceback (the text before
``Traceback (most recent call last):``) and stripped from that process's following lines while the
traceback lasts. Output of several processes glued on one physical line (no line buffering) is split where
a second process's tag or a line-start marker begins in the middle of the line.

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

Failures: a root cause and its consequences (the count rule)
------------------------------------------------------------
A server that dies prints more than its cause: the parent's ``Received sigquit from a child process``,
``scheduler is dead``, the engine client's ``EngineDeadError``, the supervisor's exit notice, a shell's
``Aborted``. :class:`SignatureBook` groups entries into *failures*: the first entry is the root cause;
entries that follow it closely (:data:`SAME_FAILURE`; longer for lines that are consequences by nature,
:data:`CONSEQUENCE_WINDOW`) belong to it, as more processes showing the root signature or as its
consequences. A process exit ends a failure: after it only lines within :data:`AFTER_EXIT` join. A
:class:`~specload.datatypes.CrashEvent` is one root signature; its ``count`` is the number of failures it
caused, its ``consequences`` what followed. ``specload scan-log`` and the live run use this same book, so
they count alike (offline, where lines carry no time, only the line distances apply).
"""

from __future__ import annotations

import hashlib
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from specload.datatypes import CrashConsequence, CrashEvent
from specload.watch.logline import LogLine, parse_line

__all__ = [
    "MARKERS",
    "CrashDetector",
    "CrashEntry",
    "LogScanner",
    "Marker",
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
    consequence: bool = False  # a line that reports a death caused elsewhere (see "Failures" above)


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
    r"Traceback|File |rror|x(?:ception|it(?:ed|code))|panic|ssert|SIG|bort|atal|terminat|what\(\)|atchdog|"
    r"sigquit|Shard|"
    r"Crashed|dead|died|fault|[Kk]illed|Cuda|CUDA|GGML|runner process|core dumped|llegal|Bus error|"
    r"Floating point|model loading|mpirun|mpiexec|prterun|EngineCore f"
)  # (alternatives that start with a common letter cost time on every line: 'x(?:...)', not 'exited')

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
_SHELL_ALT = "Aborted|Segmentation fault|Bus error|Illegal instruction|Floating point exception|Killed"
_SHELL_RE = re.compile(r"^(" + _SHELL_ALT + r")(?: \(core dumped\))?$")

# Where a second process's output starts in the middle of a physical line (writers without line
# buffering): its tag, or a marker that always starts a line. Searched only in lines that pass the gate
# above; a hit counts only after a non-blank character (a prefix at the start of the line is not glue,
# nor a marker word after a blank). No lookbehind in the pattern: with one, re tries every position.
_GLUE_RE = re.compile(
    r"(?:"
    r"\((?:VllmWorker\w*|Worker_\w+|EngineCore\w*|APIServer|RayWorkerWrapper)(?: rank=\d+)? pid=\d+[^)]*\) "
    r"|\[rank\d+\]:"
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z][A-Z_]*\d+)*\] "
    r"|Fatal Python error: "
    r"|terminate called (?:after|without|recursively)"
    r"|!{3,} Segfault encountered"
    r"|(?:Segmentation fault|Aborted|Bus error|Illegal instruction|Floating point exception)"
    r"(?: \(core dumped\))?$"
    r")"
)

# Fatal signals and the names shells, Open MPI, systemd and Go give them.
_SIGNAL_NUMBERS = {"4": "SIGILL", "6": "SIGABRT", "7": "SIGBUS", "8": "SIGFPE", "9": "SIGKILL", "11": "SIGSEGV"}
_SHELL_NAMES = {
    "Aborted": "SIGABRT", "abort": "SIGABRT",
    "Segmentation fault": "SIGSEGV", "segmentation fault": "SIGSEGV",
    "Bus error": "SIGBUS", "bus error": "SIGBUS",
    "Illegal instruction": "SIGILL", "illegal hardware instruction": "SIGILL",
    "Floating point exception": "SIGFPE", "floating point exception": "SIGFPE",
    "Killed": "SIGKILL", "killed": "SIGKILL",
}  # fmt: skip
# A process stopped on request is not a crash: SIGTERM/SIGINT (and systemd's other clean signals).
_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP", "SIGPIPE"})
_SIGNAL_ALT = "SIGABRT|SIGSEGV|SIGBUS|SIGILL|SIGFPE|SIGTRAP|SIGKILL|SIGSYS"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _exit_message(code: int, *, shell_status: bool = False) -> str | None:
    """``exited with code N`` (with the signal when a shell or docker reports 128+N), None for a clean
    exit or a requested stop."""
    if code == 0:
        return None
    if shell_status and 128 < code <= 128 + 64:
        name = _signal_name(code - 128)
        return None if name in _STOP_SIGNALS else f"exited with code {code} ({name})"
    return f"exited with code {code}"


def _killed_message(name: str, *, core: bool = False) -> str | None:
    if name in _STOP_SIGNALS:
        return None
    return f"killed by {name}" + (" (core dumped)" if core else "")


def _command_name(cmd: str) -> str | None:
    """The program a shell command line runs: 'LD_LIBRARY_PATH=/x /app/bin/scalellm $ARGS' -> 'scalellm'."""
    for word in cmd.split():
        if "=" in word.split("/")[0]:
            continue  # an environment assignment
        return re.split(r"[\\/]", word)[-1] or None
    return None


_GLUE_HINTS = ("pid=", "[rank", "[20", "Fatal Python", "terminate called", "Segfault")
_GLUE_ENDINGS = ("fault", "Aborted", "dumped)", "error", "instruction", "exception")


def _glue_possible(body: str) -> bool:
    """Cheap test before the glue search: the glue regex searches every position of the line."""
    return body.endswith(_GLUE_ENDINGS) or any(h in body for h in _GLUE_HINTS)


# ------------------------------------------------------------------------------------------- markers


class Hit(NamedTuple):
    """What a marker found: the entry to make, or (``pending``) a marker that waits for more lines."""

    exception_type: str
    message: str
    pending: str | None = None  # kind of pending marker to start instead of an entry
    process: str | None = None  # the process named in the line itself, over the line's tag
    consequence: bool = False


@dataclass(frozen=True, slots=True)
class MarkerLine:
    """The line a marker looks at: its text without prefixes and blanks, and where it came from."""

    text: str
    parsed: LogLine
    process: str | None
    in_traceback: bool  # a traceback of this process is open


@dataclass(frozen=True, slots=True)
class Marker:
    """One kind of crash line: its pattern, the entry it makes, and why it is a crash."""

    name: str
    pattern: re.Pattern[str]
    make: Callable[[re.Match[str], MarkerLine], Hit | None]
    doc: str
    example: str  # a log excerpt the marker finds (tests run every row's example)
    anchored: bool = False  # the pattern must match at the start of the text (else: anywhere in it)
    gate: str | tuple[str, ...] = ""  # the text must contain this substring (one of these) to be tried
    whole_line: bool = False  # also try the whole cleaned line when the text after the prefixes misses


def _plain(exc_type: str, group: int | None = 1, *, consequence: bool = False):
    def make(m: re.Match[str], _line: MarkerLine) -> Hit:
        return Hit(exc_type, m.group(group) if group is not None else "", consequence=consequence)

    return make


def _signal_hit(m: re.Match[str], _line: MarkerLine) -> Hit:
    return Hit(m.group(1), "", consequence=True)


def _shell_hit(m: re.Match[str], line: MarkerLine) -> Hit | None:
    name = _SHELL_NAMES[m.group(1)]
    if name != "SIGKILL":
        return Hit(name, "", consequence=True)
    # 'Killed' is the shell reporting an external kill (OOM killer, kill -9), not a fault of the
    # program: a process exit, named by the command when the notice names one
    cmd = m.groupdict().get("cmd")
    return Hit("process_exit", "killed by SIGKILL", process=_command_name(cmd) if cmd else None, consequence=True)


def _mpi_signal_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    name = _SIGNAL_NUMBERS.get(m.group(1))
    return Hit(name, "", consequence=True) if name else None


def _cuda_ggml_hit(m: re.Match[str], line: MarkerLine) -> Hit | None:
    # inside a traceback's message, 'CUDA error: X' is part of that exception
    return None if line.in_traceback else Hit("CUDA error", m.group(1))


def _rust_new_hit(m: re.Match[str], _line: MarkerLine) -> Hit:
    if m.group(3):
        return Hit("panic", m.group(3))
    return Hit("panic", "", pending="rust")  # the message is on the next line


def _ollama_hit(m: re.Match[str], line: MarkerLine) -> Hit:
    fields = line.parsed.fields or {}
    err = fields.get("error", "")
    marker = m.group(0).split(":")[0]
    if err and (marker in err or "llama runner terminated" in fields.get("msg", "")):
        return Hit("server_fatal", err, consequence=True)
    return Hit("server_fatal", m.group(0), consequence=True)


def _lifecycle_hit(_m: re.Match[str], line: MarkerLine) -> Hit:
    return Hit("server_fatal", line.text, consequence=True)


def _rust_main_hit(_m: re.Match[str], line: MarkerLine) -> Hit | None:
    return None if line.parsed.record else Hit("server_fatal", line.text, consequence=True)


def _fatal_header_hit(_m: re.Match[str], line: MarkerLine) -> Hit:
    return Hit("server_fatal", line.text, pending="header", consequence=False)


def _docker_exit_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    msg = _exit_message(int(m.group(2)), shell_status=True)
    return Hit("process_exit", msg, process=m.group(1), consequence=True) if msg else None


def _mpirun_signal_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    msg = _killed_message(_signal_name(int(m.group(2))))
    return Hit("process_exit", msg, process=f"rank {m.group(1)}", consequence=True) if msg else None


def _systemd_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    unit, code, status, name = m.group(1), m.group(2), int(m.group(3)), m.group(4)
    if code == "exited":
        msg = _exit_message(status)
    else:  # killed, dumped: status is the signal number and its short name
        msg = _killed_message("SIG" + name if name.isupper() else _signal_name(status), core=code == "dumped")
    return Hit("process_exit", msg, process=unit, consequence=True) if msg else None


def _elastic_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    code = int(m.group(1))
    msg = _killed_message(_signal_name(-code)) if code < 0 else _exit_message(code)
    return Hit("process_exit", msg, process=f"local_rank {m.group(2)}", consequence=True) if msg else None


def _raylet_hit(m: re.Match[str], line: MarkerLine) -> Hit:
    return Hit("process_exit", m.group(0), process=line.process or "raylet", consequence=True)


def _R(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


#: Every crash marker outside Python tracebacks, in the order they are tried (the first that makes a
#: hit wins). ``exception_type`` conventions follow the shared fixtures' README: the demangled C++ type,
#: ``Assertion failed``, ``GGML_ASSERT``, ``CUDA error``, the signal name for fault signals, ``panic``,
#: ``server_fatal`` for a server's own death notices and ``process_exit`` for a process's exit reported by
#: whoever supervised it (docker, systemd, mpirun, torch elastic, Ray, a shell): non-zero exits and fatal
#: signals only, the code or signal in the message, the process named in the line as the process.
MARKERS: tuple[Marker, ...] = (
    Marker(
        "cxx-terminate", _R(r"terminate called after throwing an instance of '([^']+)'"),
        lambda m, _l: Hit(m.group(1), "", pending="terminate"),
        "Uncaught C++ exception; the message is the what() line that follows (waited for).",
        gate="terminate",
        example="terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: x",
    ),
    Marker(
        "cxx-unhandled", _R(r"Unhandled exception: (\S+?)\.? what\(\):\s*(.*)$"),
        lambda m, _l: Hit(demangle(m.group(1)), m.group(2)),
        "TensorRT-LLM's one-line form with a mangled type name.",
        gate="Unhandled",
        example="Unhandled exception: N3c1016DistBackendErrorE. what(): NCCL error",
    ),
    Marker(
        "cxx-terminate-bare", _R(r"terminate called (without an active exception|recursively)"),
        lambda m, _l: Hit("std::terminate", f"terminate called {m.group(1)}"),
        "std::terminate without an exception object.",
        gate="terminate", example="terminate called without an active exception",
    ),
    Marker(
        "fatal-python", _R(r"Fatal Python error: (.*)$"), _plain("Fatal Python error", consequence=True),
        "CPython's fatal error (faulthandler); usually follows the abort it reports.",
        anchored=True, example="Fatal Python error: Segmentation fault",
    ),
    Marker(
        "assert", _R(r"Assertion [`'‘\"](.+)['’\"] failed"), _plain("Assertion failed"),
        "glibc assert(): the expression without its quotes.",
        gate="ssert", example="llama-server: ggml.c:12: f: Assertion `n > 0' failed.",
    ),
    Marker(
        "assert-bsd", _R(r"Assertion failed: \((.+)\), function "), _plain("Assertion failed"),
        "BSD/macOS assert().", gate="ssert",
        example="Assertion failed: (n > 0), function f, file ggml.c, line 12.",
    ),
    Marker(
        "ggml-assert", _R(r"GGML_ASSERT\((.*)\) failed"), _plain("GGML_ASSERT"), "ggml's assert.",
        gate="GGML", example="/app/ggml.c:8349: GGML_ASSERT(i01 >= 0) failed",
    ),
    Marker(
        "ggml-assert-old", _R(r"GGML_ASSERT: \S+?:\d+: (.*)$"), _plain("GGML_ASSERT"),
        "ggml's older assert format.", gate="GGML",
        example="GGML_ASSERT: /app/ggml.c:8349: i01 >= 0",
    ),
    Marker(
        "nccl-watchdog", _R(r"Watchdog caught collective operation timeout:.*$"),
        _plain("NCCL watchdog timeout", 0), "torch ProcessGroupNCCL watchdog.",
        gate="atchdog",
        example="[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=216) ran for 600011 ms",
    ),
    Marker(
        "sglang-watchdog", _R(r"Watchdog timeout \(self\.watchdog_timeout=.*$"),
        _plain("watchdog_timeout", 0), "SGLang's scheduler watchdog.",
        gate="atchdog", example="Watchdog timeout (self.watchdog_timeout=300)",
    ),
    Marker(
        "cuda-ggml", _R(r"CUDA error: (.+)$"), _cuda_ggml_hit,
        "ggml 'CUDA error: X' (outside a traceback's message).",
        anchored=True, example="CUDA error: out of memory",
    ),
    Marker(
        "cuda-ggml-old", _R(r"CUDA error \d+ at \S+: (.+)$"), _cuda_ggml_hit, "older ggml form.",
        anchored=True, example="CUDA error 2 at ggml-cuda.cu:6951: out of memory",
    ),
    Marker(
        "cuda-vllm", _R(r"Failed: Cuda error \S+ '(.+)'"), _plain("CUDA error"), "vLLM custom all-reduce.",
        gate="Cuda",
        example="Failed: Cuda error /w/csrc/custom_all_reduce.cuh:307 'invalid argument'",
    ),
    Marker(
        "cuda-trt", _R(r"CUDA runtime error in \S+: (.+?)(?:\s+\([^()]*\))?\s*$"), _plain("CUDA error"),
        "TensorRT-LLM.", gate="CUDA",
        example="[TensorRT-LLM][ERROR] CUDA runtime error in cudaMemcpy: an illegal memory access (/x.cu:9)",
    ),
    Marker(
        "cuda-trt2", _R(r"Cuda Runtime \(([^)]+)\)"), _plain("CUDA error"), "TensorRT-LLM.",
        gate="Cuda", example="[TensorRT-LLM][ERROR] Assertion failed: Cuda Runtime (out of memory)",
    ),
    Marker(
        "go-signal", _R(r"(" + _SIGNAL_ALT + r"): \w"), _signal_hit, "Go runtime 'SIGSEGV: segmentation'.",
        anchored=True, example="SIGSEGV: segmentation violation",
    ),
    Marker(
        "absl-signal", _R(r"\*\*\* (" + _SIGNAL_ALT + r") (?:received at time=|\(@[^)]*\) received by PID)"),
        _signal_hit, "abseil/glog failure signal handler (Ray, TensorRT).",
        gate="***", example="*** SIGABRT received at time=1723447076 on cpu 3 ***",
    ),
    Marker(
        "shell-signal", _R(r"(" + _SHELL_ALT + r")(?: \(core dumped\))?$"), _shell_hit,
        "A shell's notice of a child killed by a signal ('Aborted (core dumped)', 'Killed').",
        anchored=True, example="Segmentation fault (core dumped)",
    ),
    Marker(
        "bash-job", _R(r": line \d+: +\d+ (" + _SHELL_ALT + r")\b(?: \(core dumped\))? *(?P<cmd>.*)$"),
        _shell_hit, "bash: 'script.sh: line 28:  7 Killed  CMD'; the process is CMD's program.",
        gate="line", example="run.sh: line 3:  4711 Aborted  (core dumped) ./llama-server",
    ),
    Marker(
        "zsh", _R(r"zsh: (abort|segmentation fault|bus error|illegal hardware instruction|killed|"
                  r"floating point exception)\b(?: \(core dumped\))? *(?P<cmd>.*)$"),
        _shell_hit, "zsh's notice.", anchored=True, example="zsh: segmentation fault  ./server",
    ),
    Marker(
        "job-notice", _R(r"\[\d+\][+-]? +(?:[+-] +)?(?:\d+ +)?(" + _SHELL_ALT + r"|abort|segmentation fault|"
                         r"bus error|illegal hardware instruction|killed|floating point exception)"
                         r"(?: \(core dumped\))?(?: {2,}(?P<cmd>.*)|$)"),
        _shell_hit, "Job-control notices: zsh '[1]    7302 abort      cmd', bash '[1]+  Killed  cmd'.",
        anchored=True, example="[1]    7302 abort      text-embeddings-router",
    ),
    Marker(
        "torch-segfault", _R(r"!+ Segfault encountered !+$"), lambda _m, _l: Hit("SIGSEGV", "", consequence=True),
        "torch's c10 fatal-signal handler.", anchored=True,
        example="!!!!!!! Segfault encountered !!!!!!!",
    ),
    Marker(
        "mpi-signal", _R(r"(?:\[[^\]]+\] )?Signal: [\w ]+ \((\d+)\)$"), _mpi_signal_hit,
        "Open MPI's signal report '[host:pid] Signal: Aborted (6)'.", anchored=True,
        example="[gpu-node-2:01873] Signal: Aborted (6)",
    ),
    Marker(
        "win-exception", _R(r"Exception (0x[0-9a-fA-F]+) 0x"),
        lambda m, _l: Hit(f"Exception {m.group(1)}", "", pending="winexc"),
        "Windows exception from the Go runtime; the message is the line after 'PC='.",
        anchored=True,
        example="Exception 0xc0000005 0x0 0x7ffb 0x7ffb\nPC=0x7ffb\nruntime.cgocall(0x1, 0x2)",
    ),
    Marker(
        "rust-panic-old", _R(r"thread '([^']*)' panicked at '(.*)', (\S+?:\d+(?::\d+)?)\s*$"),
        _plain("panic", 2), "Rust panic, format before 1.73.", gate="panicked",
        example="thread 'main' panicked at 'no shard', router/src/main.rs:10:5",
    ),
    Marker(
        "rust-panic", _R(r"thread '([^']*)' panicked at (\S+?:\d+(?::\d+)?):\s*(.*)$"), _rust_new_hit,
        "Rust panic; the message may be on the next line.", gate="panicked",
        example="thread 'main' panicked at router/src/main.rs:10:5:\nno shard",
    ),
    Marker("go-panic", _R(r"panic: (.+)$"), _plain("panic"), "Go panic.", anchored=True,
           example="panic: runtime error: index out of range [3] with length 3"),
    Marker("go-fatal", _R(r"fatal error: (.+)$"), _plain("fatal error"), "Go runtime fatal error.",
           anchored=True, example="fatal error: concurrent map writes"),
    Marker(
        "ollama-runner", _R(r"llama runner process (?:has terminated|no longer running)\b.*$"
                            r"|msg=\"?llama runner terminated\b.*$"), _ollama_hit,
        "Ollama's runner death; for logfmt lines the message is the error= value.",
        gate="llama runner", whole_line=True,
        example="time=2025-01-01T00:00:00Z level=ERROR source=sched.go:1 msg=\"llama runner terminated\" "
        "error=\"exit status 2\"",
    ),
    Marker(
        "vllm-fatal-header", _R(r"EngineCore (?:encountered a fatal error|failed to start)\.?"),
        _fatal_header_hit,
        "vLLM's engine death header: the traceback logged after it is the crash; alone (cut log, silent "
        "death) it is server_fatal.", gate="EngineCore",
        example="(EngineCore_DP0 pid=5) ERROR 01-01 00:00:00 [core.py:1] EngineCore encountered a fatal error.",
    ),
    Marker(
        "lifecycle", _R(
            r"Received sigquit from a child proces"
            r"|^Shard \d+ failed to start|^Shard \d+ crashed|Shard process was signaled to shutdown with signal"
            r"|^Webserver Crashed"
            r"|MQLLMEngine is already dead|Engine process \(pid \d+\) died"
            r"|(?:Engine core|Worker) proc \S+ died unexpectedly|^Worker \S+ pid \d+ died, exit code"
            r"|MPClient: engine core exited unexpectedly"
            r"|^Got fatal signal from worker processes, shutting down"
            r"|scheduler is dead|Child process unexpectedly failed with"
            r"|exiting due to model loading error"), _lifecycle_hit,
        "A server's own notice of a death (SGLang sigquit/scheduler dead, TGI shard and webserver, vLLM "
        "engine/worker death and MPClient's liveness monitor, llama.cpp model-load exit); the message is "
        "the line's text.",
        gate=("sigquit", "Shard", "Webserver", "MQLLMEngine", "Engine process", "died", "MPClient", "Got fatal",
              "is dead", "Child process", "model loading"),
        example="[2025-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.",
    ),
    Marker(
        "rust-main-err", _R(r"Error: [A-Z]\w*(?:\s*[({].*)?$"), _rust_main_hit,
        "A Rust binary's main returning Err ('Error: ShardCannotStart'), raw lines only.",
        anchored=True, example="Error: ShardCannotStart",
    ),
    Marker(
        "docker-exit", _R(r"([a-z0-9][\w.\-]*) exited with code (\d+)$"), _docker_exit_hit,
        "docker compose's notice; 128+N is signal N.", anchored=True,
        gate="exited with code", example="vllm-1 exited with code 139",
    ),
    Marker(
        "mpirun-signal", _R(r"(?:mpirun|mpiexec|prterun) noticed that process rank (\d+) with PID \d+ on node "
                            r"\S+ exited on signal (\d+)"), _mpirun_signal_hit,
        "Open MPI's notice of a rank killed by a signal.", gate="noticed that",
        example="mpirun noticed that process rank 1 with PID 0 on node n1 exited on signal 11 (Segmentation fault).",
    ),
    Marker(
        "mpirun-exit", _R(r"(?:mpirun|mpiexec|prterun) detected that one or more processes exited with "
                          r"non-zero status"),
        lambda _m, _l: Hit("process_exit", "", pending="mpi_exit", consequence=True),
        "Open MPI's notice of a non-zero exit; rank and code are on the 'Process name:' and 'Exit code:' "
        "lines that follow.", gate="detected that",
        example="mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "  Process name: [[52473,1],0]\n  Exit code:    1",
    ),
    Marker(
        "systemd-exit", _R(r"(\S+\.(?:service|scope)): Main process exited, code=(exited|killed|dumped), "
                           r"status=(\d+)/(\w+)"), _systemd_hit,
        "systemd's notice about a unit's main process (clean signals and status 0 are not crashes).",
        gate="Main process exited",
        example="Nov 15 21:48:40 h systemd[1]: ollama.service: Main process exited, code=killed, status=9/KILL",
    ),
    Marker(
        "elastic-exit", _R(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)"), _elastic_hit,
        "torch elastic agent: a worker failed; exitcode -N is signal N.", gate="exitcode",
        example="ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 7)",
    ),
    Marker(
        "raylet-exit", _R(r"Raylet is terminated\. Termination is unexpected\."), _raylet_hit,
        "Ray's notice of a raylet death ('Termination is graceful.' is not a crash).",
        gate="Raylet",
        example="(raylet) Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL",
    ),
)

# The table as the detector walks it: (gates, finder, make, whole_line, pattern) per row, built once, so
# the walk does no attribute lookups (it runs for every line that passed the prefilter).
_MARKER_STEPS = tuple(
    (
        (m.gate,) if isinstance(m.gate, str) and m.gate else m.gate or (),
        m.pattern.match if m.anchored else m.pattern.search,
        m.make,
        m.whole_line,
        m.pattern,
    )
    for m in MARKERS
)

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
        self._index = _SignatureIndex()

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
            if _PREFILTER_RE.search(p.body) is None:
                if not self._seen_text and p.body.strip():
                    self._seen_text = True
                return []
            hot = True  # (passed on, so the prefilter is not searched twice)
        out: list[CrashEntry] = []
        self._feed_parsed(p, t_ns, out, hot=hot)
        return self._release(out, t_ns) if out or self._held else out

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
        if not glued and (self._tbs or self._pending) and _PREFILTER_RE.search(body) is None:
            pass  # (a line inside a crash block: no glue search needed unless a marker word is in it)
        elif not glued and _glue_possible(body):
            m = next((g for g in _GLUE_RE.finditer(body, 1) if not body[g.start() - 1].isspace()), None)
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
        m = learned.match(p.body)
        if m is None:
            return p
        rest = parse_line(p.body[m.end() :])
        return replace(rest, text=p.text, tag=p.tag or rest.tag, record=p.record or rest.record)

    def _feed_body(
        self, p: LogLine, body: str, proc: str | None, t_ns: int, out: list[CrashEntry], hot: bool = False
    ) -> None:
        first_text = False
        if not self._seen_text and body.strip():
            self._seen_text = True
            first_text = True
        if not hot and not self._tbs and not self._pending and not _PREFILTER_RE.search(body):
            return
        consumed = self._pending_line(p, body, proc, out)
        if not consumed:
            consumed = self._traceback_line(p, body, proc, t_ns, out)
        if not consumed and first_text:
            consumed = self._orphan_exception(p, body, proc, out)
        if not consumed:
            self._markers(p, body, proc, t_ns, out)

    def _release(self, out: list[CrashEntry], t_ns: int, *, force: bool = False) -> list[CrashEntry]:
        """Hold consequences back while a traceback is open; release them after what completed."""
        if not out and not self._held:
            return out
        ready = [e for e in out if not e.consequence]
        self._held.extend((t_ns, e) for e in out if e.consequence)
        if self._held and (force or not self._tbs):
            ready.extend(e for _, e in self._held)
            self._held.clear()
        elif self._held:
            # a traceback still open for long is not waited for: settle_ns after the consequence
            keep = [(t, e) for t, e in self._held if t_ns - t < self.settle_ns]
            ready.extend(e for t, e in self._held if t_ns - t >= self.settle_ns)
            self._held = keep
        return ready

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
                self._emit_pending(pend, pend.message, out)
        return self._release(out, t_ns)

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
            self._entry(exc[0], exc[1], exc[2], tb.process, tb.lines, tb.line_no, cause_text, consequence)
        )

    def _emit_pending(self, pend: _Pending, message: str, out: list[CrashEntry]) -> None:
        if pend.kind == "mpi_exit" and not message:
            return  # the notice's 'Exit code:' never came: nothing to say the exit was not clean
        out.append(
            self._entry(pend.exc_type, message, None, pend.process, pend.lines, pend.line_no,
                        consequence=pend.consequence)
        )

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
            at = body.find("Traceback (most recent call last)")
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
                        self._emit_pending(pend, _exit_message(int(m.group(1))) or "", out)
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
        for gates, find, make, whole_line, pattern in _MARKER_STEPS:
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
                             message=hit.message, consequence=hit.consequence)
                )
            else:
                out.append(
                    self._entry(hit.exception_type, hit.message, None, process, p.text, self._line_no,
                                consequence=hit.consequence)
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
    exit_line: int | None = None
    exit_ns: int = 0


def _consequence_of(entry: CrashEntry) -> CrashConsequence:
    return CrashConsequence(
        signature=entry.signature,
        exception_type=entry.exception_type,
        message=entry.message,
        processes=(entry.process,) if entry.process is not None else (),
        count=1,
    )


class SignatureBook:
    """Groups entries live into failures and :class:`~specload.datatypes.CrashEvent` (see "Failures" in the
    module docstring).

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
        d_ns = max(0, t_ns - f.last_ns)
        if f.exit_line is not None:
            return AFTER_EXIT.holds(entry.line_no - f.exit_line, max(0, t_ns - f.exit_ns))
        window = CONSEQUENCE_WINDOW if entry.consequence else SAME_FAILURE
        return window.holds(entry.line_no - f.last_line, d_ns)

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
        if entry.exception_type == "process_exit":
            f.exit_line, f.exit_ns = entry.line_no, t_ns
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
