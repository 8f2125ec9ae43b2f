"""Crash markers: every kind of crash line outside Python tracebacks, as one table.

:data:`MARKERS` is a table of (name, pattern, what entry it makes, doc, example), in the order the
detector (``detector.py``) tries them; it is the reference for the marker kinds and their
``exception_type``. Here too: the cheap gate a line must pass before any marker is tried
(:data:`PREFILTER_RE`), the names of fatal signals and exit codes, and C++ type demangling. Nothing here
does I/O.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from specload.watch.logline import LogLine

__all__ = ["MARKERS", "MARKER_STEPS", "PREFILTER_RE", "SHELL_RE", "Hit", "Marker", "MarkerLine", "demangle",
           "exit_message", "signal_name"]


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


# ------------------------------------------------------------------------------------------- gates

# Cheap gate: a line outside any traceback or pending marker is examined further only if it contains one
# of these. Normal serving lines (throughput, access logs) fail it with a single regex scan.
PREFILTER_RE = re.compile(
    r"Traceback|File |rror|x(?:ception|it(?:ed|code))|panic|ssert|SIG|bort|atal|terminat|what\(\)|atchdog|"
    r"sigquit|Shard|"
    r"Crashed|dead|died|fault|[Kk]illed|Cuda|CUDA|GGML|runner process|core dumped|llegal|Bus error|"
    r"Floating point|model loading|mpirun|mpiexec|prterun|EngineCore f|Xid|Unable to determine the device"
)  # (alternatives that start with a common letter cost time on every line: 'x(?:...)', not 'exited')

_SHELL_ALT = "Aborted|Segmentation fault|Bus error|Illegal instruction|Floating point exception|Killed"
SHELL_RE = re.compile(r"^(" + _SHELL_ALT + r")(?: \(core dumped\))?$")

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


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_message(code: int, *, shell_status: bool = False) -> str | None:
    """``exited with code N`` (with the signal when a shell or docker reports 128+N), None for a clean
    exit or a requested stop."""
    if code == 0:
        return None
    if shell_status and 128 < code <= 128 + 64:
        name = signal_name(code - 128)
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


# ------------------------------------------------------------------------------------------- markers


class Hit(NamedTuple):
    """What a marker found: the entry to make, or (``pending``) a marker that waits for more lines."""

    exception_type: str
    message: str
    pending: str | None = None  # kind of pending marker to start instead of an entry
    process: str | None = None  # the process named in the line itself, over the line's tag
    consequence: bool = False
    reach_ns: int = 0  # how long before this line its cause may lie (CrashEntry.reach_ns)


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
    msg = exit_message(int(m.group(2)), shell_status=True)
    return Hit("process_exit", msg, process=m.group(1), consequence=True) if msg else None


def _mpirun_signal_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    msg = _killed_message(signal_name(int(m.group(2))))
    return Hit("process_exit", msg, process=f"rank {m.group(1)}", consequence=True) if msg else None


def _systemd_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    unit, code, status, name = m.group(1), m.group(2), int(m.group(3)), m.group(4)
    if code == "exited":
        msg = exit_message(status)
    else:  # killed, dumped: status is the signal number and its short name
        msg = _killed_message("SIG" + name if name.isupper() else signal_name(status), core=code == "dumped")
    return Hit("process_exit", msg, process=unit, consequence=True) if msg else None


def _elastic_hit(m: re.Match[str], _line: MarkerLine) -> Hit | None:
    code = int(m.group(1))
    msg = _killed_message(signal_name(-code)) if code < 0 else exit_message(code)
    return Hit("process_exit", msg, process=f"local_rank {m.group(2)}", consequence=True) if msg else None


def _raylet_hit(m: re.Match[str], line: MarkerLine) -> Hit:
    return Hit("process_exit", m.group(0), process=line.process or "raylet", consequence=True)


_RAN_FOR_RE = re.compile(r"ran for (\d+) milli")


def _watchdog_hit(m: re.Match[str], _line: MarkerLine) -> Hit:
    ran = _RAN_FOR_RE.search(m.group(0))
    return Hit("NCCL watchdog timeout", m.group(0), consequence=True,
               reach_ns=int(ran.group(1)) * 1_000_000 if ran else 0)


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
        "nccl-watchdog", _R(r"Watchdog caught collective operation timeout:.*$"), _watchdog_hit,
        "torch ProcessGroupNCCL watchdog: a collective another rank never joined. A consequence of what "
        "stopped that rank, which may lie as far back as the collective 'ran for'.",
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
    Marker(
        "nvidia-xid", _R(r"NVRM: Xid \((?:PCI:)?([^)]*)\): (\d+)(?:, (.*))?$"),
        lambda m, _l: Hit(f"Xid {m.group(2)}", m.group(3) or "", process=f"GPU {m.group(1)}"),
        "The NVIDIA driver's XID error (kernel log, or a GPU reader's output): the type carries the XID "
        "(79: the GPU fell off the bus), the process is the GPU's PCI address.", gate="Xid",
        example="[ 8812.270345] NVRM: Xid (PCI:0000:3b:00): 79, pid=1873, name=python3, GPU has fallen off the bus.",
    ),
    Marker(
        "gpu-lost", _R(r"Unable to determine the device handle for GPU ?([0-9A-Fa-f:.]+): (.+)$"),
        lambda m, _l: Hit("GPU lost", m.group(2), process=f"GPU {m.group(1)}"),
        "nvidia-smi (or NVML) cannot reach a GPU any more: fallen off the bus, or lost.",
        gate="device handle",
        example="Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
    ),
)

# The table as the detector walks it: (gates, finder, make, whole_line, pattern) per row, built once, so
# the walk does no attribute lookups (it runs for every line that passed the prefilter).
MARKER_STEPS = tuple(
    (
        (m.gate,) if isinstance(m.gate, str) and m.gate else m.gate or (),
        m.pattern.match if m.anchored else m.pattern.search,
        m.make,
        m.whole_line,
        m.pattern,
    )
    for m in MARKERS
)
