"""Normalise one physical server-log line: clean it and split its prefixes from its text.

This module owns the knowledge of *how log lines are wrapped*: colour codes, carriage returns,
control bytes, and the prefixes that loggers, process managers and log shippers put in front of the
text. The crash detector (``detector.py``) only ever looks at the text behind those prefixes plus
the normalised process tag, so a new prefix format is a change here only. Prefixes come in three
kinds, and the difference matters for multi-process logs:

* **transport** prefixes are added by whatever carried the line (journald, an aggregator export,
  docker ``--timestamps``). They say nothing about which process wrote the line.
* **record** prefixes are written by the application's logger (``INFO 07-30 ... [file.py:N]``, glog
  ``[E611 ...]``, TGI's ``2024-...Z ERROR target:``). A line with one starts a new log record.
* **tag** prefixes name the process: SGLang ``[... TP0]``, vLLM ``(VllmWorker rank=3 pid=229)``,
  torch ``[rank0]:``, Ray ``(RayWorkerWrapper pid=690, ip=...)``.

A line with neither a record prefix nor a tag is *raw* (a traceback line, a message continuation);
the detector attributes it to the process of the previous tagged record.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["LogLine", "clean_line", "line_time_ns", "parse_line", "split_line", "parse_logfmt"]

# ---------------------------------------------------------------------------------------------- cleaning

# Real escape sequences: CSI (colours, cursor), OSC (titles, ended by BEL or ST), charset selection
# ('ESC ( B', which `tput sgr0` emits) and the other two-byte escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]+[0-~]|\x1b[@-Z\\-_]"
)
# Colour codes whose ESC byte was lost in a copy-paste (fixture 015: '[1;36m(VllmWorker ...'). Only the
# SGR shape '[<digits;...>m' is removed: it practically never occurs in real log text.
_BARE_SGR_RE = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
# Control bytes other than TAB. DEL included. (CR is handled before: it means "overwrite the line".)
_CTRL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A line's ending: carriage returns, real or printed (a pager's '^M', the control picture), in any mix
# and with blanks between ('\r^M': a CRLF line copied from a pager, then saved with CRLF again).
_CR_END_RE = re.compile(r"(?:\s|\^M|\u240d)+$")
# rsyslog and CloudWatch write the ESC byte of colour codes as the text '#033'; a log copied from a pager
# shows it as 'ESC' (less without -R) or '^[' (cat -v, vim).
_PRINTED_ESC_RE = re.compile(r"(?:#033|ESC|\^\[)\[[0-?]*[ -/]*[@-~]")


def clean_line(raw: str) -> str:
    """Strip colour codes (real or in their printed forms), carriage returns (real or a printed ``^M``),
    control bytes and the newline."""
    line = raw.rstrip("\n")
    cr = "\r" in line or "^M" in line or "\u240d" in line
    if cr:
        line = _CR_END_RE.sub("", line)
    if "\r" in line:
        # A terminal shows the text after the last CR (progress bars redraw this way).
        line = line.rsplit("\r", 1)[-1]
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    if "#033[" in line or "ESC[" in line or "^[[" in line:
        line = _PRINTED_ESC_RE.sub("", line)
    if "m" in line and "[" in line:
        line = _BARE_SGR_RE.sub("", line)
    if _CTRL_RE.search(line):
        line = _CTRL_RE.sub("", line)
    if cr:
        # the printed forms of a carriage return: at the end (once colour codes are gone) it is a CRLF
        # ending, inside the line it is a CR (a progress bar's redraw): keep what follows the last
        line = _CR_END_RE.sub("", line)
        if "^M" in line:
            line = line.rsplit("^M", 1)[-1]
    return line.rstrip()


# ---------------------------------------------------------------------------------------------- logfmt

_LOGFMT_PAIR_RE = re.compile(r'([\w.\-]+|"[^"]*")=("(?:[^"\\]|\\.)*"?|\S*)')


def parse_logfmt(text: str) -> dict[str, str]:
    """``key=value key="quoted \\"value\\""`` pairs as a dict (values unquoted and unescaped)."""
    fields: dict[str, str] = {}
    for m in _LOGFMT_PAIR_RE.finditer(text):
        key, value = m.group(1).strip('"'), m.group(2)
        if value.startswith('"'):
            value = value[1:-1] if value.endswith('"') and len(value) > 1 else value[1:]
            value = value.replace('\\"', '"').replace("\\\\", "\\")
        fields.setdefault(key, value)
    return fields


# ---------------------------------------------------------------------------------------------- prefixes

_LEVELS = {
    "T": "TRACE", "TRACE": "TRACE",
    "D": "DEBUG", "DEBUG": "DEBUG",
    "I": "INFO", "INFO": "INFO",
    "W": "WARNING", "WARN": "WARNING", "WARNING": "WARNING",
    "E": "ERROR", "ERROR": "ERROR", "ERR": "ERROR",
    "C": "CRITICAL", "CRITICAL": "CRITICAL",
    "F": "FATAL", "FATAL": "FATAL",
}  # fmt: skip


def _level(word: str | None) -> str | None:
    return _LEVELS.get(word.upper()) if word else None


_LVL = r"(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"

# Transport prefixes ------------------------------------------------------------------------------------
# '<epoch_ms>\t<ISO>\t' from a log aggregator export (fixture 004), or a bare '<ISO>\t'.
_AGGREGATOR_RE = re.compile(r"(?:\d{10,13}\t)?" + _ISO + r"\t")
# journald: 'Sep 11 18:19:47 host proc[pid]: '. The month may have lost letters in a paste ('pr 28').
_JOURNALD_RE = re.compile(r"[A-Za-z]{1,3} {1,2}\d{1,2} \d\d:\d\d:\d\d \S+ [\w.@/\-]+(?:\[\d+\])?: ")
# docker/kubectl --timestamps and log exports (CloudWatch: a tab): an RFC 3339 stamp and blanks, *not*
# followed by a level (that would be TGI's own record prefix, handled below). The kubelet's CRI log files
# add the stream and a full/partial flag: '2025-01-15T10:02:11.482913605Z stdout F '.
_CONTAINER_TS_RE = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)[ \t]+"
    r"(?:(?:stdout|stderr) [FP] |(?!\s*" + _LVL + r"\b))"
)
# docker compose: 'service-1  | ', or a container_name without the '-N' ('vllm-server   | ': compose pads
# the names to one width, so at least two blanks when the name is not the longest).
_COMPOSE_RE = re.compile(r"[a-z0-9][\w.\-]*(?:-\d+\s+| {2,})\| ")

# Tag prefixes -------------------------------------------------------------------------------------------
# vLLM process names: '(VllmWorker rank=3 pid=229)', '(Worker_TP3 pid=562)', '(EngineCore_DP0 pid=1)',
# '(APIServer pid=1179246)'. Other '(Name pid=N[, ip=A])' prefixes are Ray actors, kept as printed.
_PAREN_PID_RE = re.compile(r"\((?:([\w:.\-]+) )?(?:rank=(\d+) )?pid=(\d+)(?:, ip=([\d.a-fA-F:]+))?\) ?")
_VLLM_NAMES_RE = re.compile(r"(?:VllmWorker|Worker|EngineCore|APIServer|ApiServer)\w*")
_RAY_SYSTEM_RE = re.compile(r"\((raylet|gcs_server|monitor|autoscaler|dashboard)(?:, ip=[\d.]+)?\) ?")
_TORCH_RANK_RE = re.compile(r"\[rank(\d+)\]: ?")
# mpirun --tag-output: '[1,0]<stderr>:' (job, rank).
_MPI_TAG_RE = re.compile(r"\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>: ?")
# SGLang: '[2025-01-20 19:10:07 DP0 TP0] ', '[... PP0 ATTN_CP7 TP7] ' or without ranks '[2025-01-20 19:10:07] '.
# Newer SGLang drops the year: '[12-16 14:27:08] '.
_SGLANG_RE = re.compile(r"\[(?:\d{4}-)?\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?((?: [A-Z][A-Z_]*\d+)*)\] ?")

# Record prefixes ---------------------------------------------------------------------------------------
# vLLM: 'INFO 07-30 17:40:19 [logger.py:41] ' and the 2023 form 'INFO 06-21 21:40:02 llm_engine.py:59] '.
_VLLM_RE = re.compile(_LVL + r" \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[\w./\-]+:\d+\]|[\w./\-]+:\d+\]) ?")
# glog / torch: '[E611 01:51:09.940883637 ProcessGroupNCCL.cpp:1896] ', 'E0608 12:00:00.123 77 f.cc:12] '.
_GLOG_RE = re.compile(r"\[?([IWEF])\d{3,4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? +[\w./+\-]+:\d+\] ?")
# Ray's own C++ logger: '[2025-08-12 07:37:56,997 E 1018 10264] logging.cc:117: '.
_RAY_CPP_RE = re.compile(r"\[" + _ISO + r" ([IWEFD]) \d+ \d+\] [\w.+\-]+:\d+: ")
# TGI / Rust tracing: '2024-06-17T13:18:26.673888Z ERROR shard-manager: text_generation_launcher: '.
_TRACING_RE = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s+"
    + _LVL
    + r"\s+(?:[a-z][\w\-]*(?:::[\w\-]+)*(?:\{[^}]*\})?: )*"
)
# Python logging and friends: '2025-08-12 07:36:07,572 INFO worker.py:1747 -- ',
# '2023-11-01 10:20:21,882 <PID:111> INFO ', '2024-01-01 10:00:00 - name - ERROR - '.
_PYLOG_RE = re.compile(
    _ISO
    + r"\s+(?:<PID:\d+>\s+)?(?:-\s+)?(?:[\w.]+\s+-\s+)?"
    + _LVL
    + r"\b(?:\s+-\s+|:\s*|\s+)(?:[\w./\-]+\.\w+:\d+(?::| --)\s)?"
)
# loguru's default format: '2024-06-17 13:18:26.673 | ERROR    | module:function:42 - '.
_LOGURU_RE = re.compile(_ISO + r"\s*\|\s*" + _LVL + r"\s*\|\s*\S+ - ")
# Go's log package: '2024/09/11 18:19:47 '.
_GOLOG_RE = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)? ")
# SGLang's custom format: '[service][2026-03-10 14:48:25][file.py:312][ERROR]: '.
_BRACKET_SERVICE_RE = re.compile(
    r"\[[^\[\]]+\]\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\](?:\[[\w./\-]+:\d+\])?(?:\[(\w+)\])?:? ?"
)
# A level word on its own: uvicorn 'INFO:     ', 'ERROR core.py:501: ' after a bracketed timestamp.
_LEVEL_ONLY_RE = re.compile(_LVL + r"(?::\s+|\s+)(?:[\w./\-]+\.(?:py|go|cc|cpp|rs|c|h):\d+[:\]]?\s+)?")
_BRACKET_LEVEL_RE = re.compile(r"\[" + _LVL + r"\]:? ?")
_TRTLLM_RE = re.compile(r"\[TensorRT-LLM\](?:\[(\w+)\])? ?")
# TensorRT-LLM's Python logger: '[06/24/2025-08:12:13] [TRT-LLM] [RANK 0] [E] '.
_TRTLLM_PY_RE = re.compile(r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\] (?:\[RANK (\d+)\] )?\[([A-Z])\] ")
# logfmt: 'time=... level=ERROR source=sched.go:456 msg=...'.
_LOGFMT_RE = re.compile(r"time=\S+ level=(\w+)(?: source=\S+)? ?")

# Suffixes ----------------------------------------------------------------------------------------------
_RAY_REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# TGI tracing span field at the end of a record: '... rank=1'.
_TGI_RANK_SUFFIX_RE = re.compile(r"(?:^|\s)rank=(\d+)$")


@dataclass(frozen=True, slots=True)
class LogLine:
    """One cleaned line split into its process tag, level and text."""

    text: str  # the cleaned line with its prefixes (what a person should see in an excerpt)
    body: str  # the text after every prefix, indentation kept (a JSON record's may hold several lines)
    tag: str | None  # normalised process tag carried by this line itself, or None
    tag_inherits: bool  # True when the tag is a prefix tag (raw lines that follow belong to it)
    record: bool  # True when an application logger's prefix (timestamp/level) or a tag starts the line
    level: str | None  # TRACE/DEBUG/INFO/WARNING/ERROR/CRITICAL/FATAL when the prefix says so
    fields: dict[str, str] | None = None  # logfmt key/values when the line is logfmt
    pid: str | None = None  # the pid in the line's own process tag ('(EngineCore_DP0 pid=313)')


def _paren_pid_tag(m: re.Match[str]) -> str:
    name, rank = m.group(1), m.group(2)
    if name and _VLLM_NAMES_RE.fullmatch(name):
        if rank is not None:
            return f"rank {rank}"
        if name.startswith("Worker_"):
            return name[len("Worker_") :]  # 'Worker_TP3' -> 'TP3'
        if name == "VllmWorkerProcess":
            # vLLM V0 runs several of these and names them only by pid
            return m.group(0).strip()[1:-1]
        return name
    # Ray and anything else: the tag as printed, without the parentheses.
    return m.group(0).strip()[1:-1]


_JSON_MESSAGE_KEYS = ("message", "msg", "event", "log")
_JSON_EXTRA_KEYS = ("exc_info", "exception", "stack_trace", "stack_info", "stacktrace", "error.stack")
_JSON_LEVEL_KEYS = ("level", "levelname", "severity", "lvl")


def _parse_json_record(s: str) -> tuple[str, str | None, str | None] | None:
    """(text, level, rank tag) of a JSON-lines log record, or None when it is not one.

    The text is the message followed by any traceback field on new lines (Python's JSON formatters put
    the traceback in ``exc_info``); the detector splits it back into lines.
    """
    try:
        obj = json.loads(s)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    # tracing-subscriber (TGI --json-output) nests the message and span fields
    scopes = [obj] + [obj[k] for k in ("fields", "span") if isinstance(obj.get(k), dict)]
    text = next((str(d[k]) for d in scopes for k in _JSON_MESSAGE_KEYS if isinstance(d.get(k), str)), None)
    if text is None:
        return None
    extras = [str(d[k]) for d in scopes for k in _JSON_EXTRA_KEYS if isinstance(d.get(k), str) and d[k]]
    if extras:
        text = "\n".join([text, *extras])
    level = next((_level(str(obj[k])) for k in _JSON_LEVEL_KEYS if obj.get(k) is not None), None)
    rank = next((d["rank"] for d in scopes if isinstance(d.get("rank"), (int, str))), None)
    return text, level, (f"rank {rank}" if rank is not None else None)


# The prefixes a line may start with, by its first character, in the order tried, each with what it
# says: ``transport`` (nothing of the line's own), ``record`` (a logger's: a record starts),
# ``level`` (a record with its level in group 1), or a tag's kind (``rank``, ``pid``, ``ray``,
# ``sglang``, ``trt``); ``logfmt`` ends the peeling.
_BRACKET = ((_TORCH_RANK_RE, "rank"), (_MPI_TAG_RE, "rank"), (_TRTLLM_PY_RE, "trt"), (_SGLANG_RE, "sglang"),
            (_GLOG_RE, "level"), (_RAY_CPP_RE, "level"), (_BRACKET_SERVICE_RE, "level"),
            (_BRACKET_LEVEL_RE, "level"), (_TRTLLM_RE, "level"))
_DIGIT = ((_AGGREGATOR_RE, "transport"), (_CONTAINER_TS_RE, "transport"), (_COMPOSE_RE, "transport"),
          (_TRACING_RE, "level"), (_LOGURU_RE, "level"), (_PYLOG_RE, "level"), (_GOLOG_RE, "record"))
_UPPER = ((_VLLM_RE, "level"), (_GLOG_RE, "level"), (_LEVEL_ONLY_RE, "level"), (_JOURNALD_RE, "transport"))
_LOWER = ((_JOURNALD_RE, "transport"), (_LOGFMT_RE, "logfmt"), (_COMPOSE_RE, "transport"))
_PAREN = ((_PAREN_PID_RE, "pid"), (_RAY_SYSTEM_RE, "ray"))


def _prefix(s: str) -> tuple[re.Match[str], str] | None:
    """The outermost prefix of ``s`` (not empty) and what it says, or None."""
    c = s[0]
    rules = (_PAREN if c == "(" else _BRACKET if c == "[" else _DIGIT if c.isdigit() else _UPPER if c.isupper()
             else _LOWER if c.islower() else _LOWER[:1] if c.isalpha() else ())
    for rx, kind in rules:
        if m := rx.match(s):
            return m, kind
    return None


def parse_line(raw: str) -> LogLine:
    """Clean ``raw`` and peel its prefixes off, outermost first."""
    text = clean_line(raw)
    s = text
    tag: str | None = None
    record = False
    level: str | None = None
    fields: dict[str, str] | None = None
    pid: str | None = None
    ray_system = False
    # Prefixes nest (journald around logfmt, Ray around torch around glog); a few rounds suffice and
    # the bound keeps a pathological line cheap.
    for _ in range(8):
        if not s:
            break
        if s[0] == "{" and s.endswith("}"):
            parsed = _parse_json_record(s)
            if parsed is not None:
                s, level, json_tag = parsed
                tag = tag or json_tag
                record = True
            break
        hit = _prefix(s)
        if hit is None:
            break
        m, kind = hit
        if kind == "pid" and tag is None:
            tag, pid = _paren_pid_tag(m), m.group(3)
        elif kind == "ray" and tag is None:
            # Ray forwards every line of its system processes with this tag: raw lines after one are
            # the driver's own output, so the tag does not carry over (see tag_inherits below).
            tag, ray_system = m.group(1), True
        elif kind == "rank" and tag is None:
            tag = f"rank {m.group(1)}"
        elif kind == "trt":
            if tag is None and m.group(1) is not None:
                tag = f"rank {m.group(1)}"
            level = level or _level(m.group(2))
        elif kind == "sglang" and tag is None and m.group(1).strip():
            tag = m.group(1).strip()
        elif kind in ("level", "logfmt"):
            level = level or _level(m.group(1))
        record = record or kind in ("record", "level", "trt", "sglang", "logfmt")
        if kind == "logfmt":
            fields = parse_logfmt(s)
        s = s[m.end() :]
        if kind == "logfmt":
            break

    tag_inherits = tag is not None and not ray_system
    if "[repeated" in s:
        s = _RAY_REPEATED_RE.sub("", s)
    if tag is None and s.endswith(tuple("0123456789")) and "rank=" in s:
        suffix = _TGI_RANK_SUFFIX_RE.search(s)
        if suffix:
            tag = f"rank {suffix.group(1)}"
            s = s[: suffix.start()].rstrip()
    return LogLine(
        text=text,
        body=s,
        tag=tag,
        tag_inherits=tag_inherits,
        record=record or tag is not None,
        level=level,
        fields=fields,
        pid=pid,
    )


# ---------------------------------------------------------------------------------------------- time

_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
# The timestamps of the prefixes above, as (month, day, h, m, s, fraction) groups: ISO and Python logging
# ('2025-05-12 14:03:07,123', '2025-05-12T14:03:07.1Z'), Go ('2025/05/12 14:03:07'), vLLM and SGLang
# without the year ('05-12 14:03:07'), glog and torch ('E0512 14:03:07.5', 'E512 ...'), journald ('May 12 14:03:07'),
# TensorRT-LLM ('05/12/2025-14:03:07').
_TIME_RE = re.compile(
    r"(?:\d{4}[-/])?(?P<mo>\d\d)[-/](?P<d>\d\d)[ T](?P<t>\d\d:\d\d:\d\d)(?P<f>[.,]\d+)?"
    r"|\b[IWEF](?P<mo2>\d{1,2})(?P<d2>\d\d) (?P<t2>\d\d:\d\d:\d\d)(?P<f2>\.\d+)?"
    r"|\b(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<d3>\d{1,2}) (?P<t3>\d\d:\d\d:\d\d)"
    r"|\b(?P<mo4>\d\d)/(?P<d4>\d\d)/\d{4}-(?P<t4>\d\d:\d\d:\d\d)"
)


def line_time_ns(text: str, end: int) -> int | None:
    """The time a log line's own prefix gives (looked for in ``text[:end]``), in ns on a clock that
    only orders and spaces the lines of one log: the year and the time zone are not read."""
    m = _TIME_RE.search(text, 0, end)
    if m is None:
        return None
    g = m.groupdict()
    if g["t"] is not None:
        month, day, hms, frac = g["mo"], g["d"], g["t"], g["f"]
    elif g["t2"] is not None:
        month, day, hms, frac = g["mo2"], g["d2"], g["t2"], g["f2"]
    elif g["t3"] is not None:
        month, day, hms, frac = _MONTHS.get(g["mon"]), g["d3"], g["t3"], None
        if month is None:
            return None
    else:
        month, day, hms, frac = g["mo4"], g["d4"], g["t4"], None
    h, mi, sec = hms.split(":")
    seconds = (((int(month) * 32 + int(day)) * 24 + int(h)) * 60 + int(mi)) * 60 + int(sec)
    ns = seconds * 1_000_000_000
    if frac:
        ns += int((frac[1:] + "000000000")[:9])
    return ns


def split_line(raw: str) -> tuple[str | None, str]:
    """``(normalised process tag or None, text after the prefixes)`` for one raw line."""
    parsed = parse_line(raw)
    return parsed.tag, parsed.body
