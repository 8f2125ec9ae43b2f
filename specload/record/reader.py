"""Reading records back: tolerant of a record cut short by a killed process, and of any line.

A last line without its newline, or one that is not valid JSON, is dropped and reported as
``truncated``; every complete line before it is kept. Every line is checked against the schema of
its type (keys and their types, numbers finite and of sane size) before anything uses it: a line
that fails is skipped and counted (``bad_lines``, with the first reasons in ``problems``), so a
hand-edited or corrupted record gives a report with a warning, never a traceback. A file holding
two records (two ``run`` headers: files concatenated) is refused with the line numbers, rather than
merged into one with levels overwritten. The file is streamed a line at a time (``specload.lines``):
a line over 16 MiB (/dev/zero, a corrupted file) is a one-line error, never the file in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from specload import lines
from specload.record.schema import GPU_FIELDS, SERVER_FIELDS


class RecordReadError(Exception):
    pass


@dataclass
class RecordData:
    run: dict | None = None
    requests: list[dict] = field(default_factory=list)
    levels: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    crashes: list[dict] = field(default_factory=list)
    servers: list[dict] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)
    clients: list[dict] = field(default_factory=list)
    end: dict | None = None
    truncated: bool = False
    bad_lines: int = 0
    problems: list[str] = field(default_factory=list)  # the first few reasons for bad lines

    def bad(self, line_no: int, reason: str) -> None:
        self.bad_lines += 1
        if len(self.problems) < 5:
            self.problems.append(f"line {line_no}: {reason}")


def iter_lines(path: str) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line, whether it is complete) of each non-blank line, streamed; a line over
    ``lines.MAX_LINE_BYTES`` (/dev/zero, a corrupted file) is a ``RecordReadError``."""
    try:
        for n, raw, complete in lines.iter_lines(path, lines.MAX_LINE_BYTES):
            if raw.strip():
                yield n, raw, complete
    except OSError as e:
        raise RecordReadError(f"cannot read {path}: {e.strerror}") from None
    except lines.TooLong as e:
        raise RecordReadError(f"{e} (a corrupted record, or not a record)") from None


# ---------------------------------------------------------------- the schema of each line type
# (is_int, is_num and is_str are shared with the readers of other tools' files, record/peers.py)

_MAX_INT = 1 << 53  # beyond it a float cannot hold the integer; no count in a record is near it
_MAX_NUM = 1e15  # seconds, milliseconds, rates: anything larger is not a measurement


def is_int(v: object) -> bool:
    return type(v) is int and -_MAX_INT <= v <= _MAX_INT


def is_num(v: object) -> bool:
    return (type(v) is int and -_MAX_INT <= v <= _MAX_INT) or (
        type(v) is float and -_MAX_NUM <= v <= _MAX_NUM  # NaN fails both comparisons
    )


def _bool(v: object) -> bool:
    return type(v) is bool


def is_str(v: object) -> bool:
    return type(v) is str


def _opt(check):
    return lambda v: v is None or check(v)


def _error(v: object) -> bool:
    return v is None or (
        isinstance(v, dict) and _opt(is_str)(v.get("kind")) and _opt(is_str)(v.get("detail")) and _opt(is_int)(v.get("status"))
    )


def _counts(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and is_int(n) for k, n in v.items())


def _numbers(v: object) -> bool:
    """A flat object of numbers (or nulls): a level's GPU figures."""
    return isinstance(v, dict) and all(isinstance(k, str) and (x is None or is_num(x)) for k, x in v.items())


def _strs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _any(v: object) -> bool:
    return True


_onum, _oint, _ostr = _opt(is_num), _opt(is_int), _opt(is_str)
_onums = _opt(lambda v: isinstance(v, list) and all(is_num(x) for x in v))
_LEVEL_FLOATS = (
    "prompt_tokens_avg", "prompt_tokens_p50", "prompt_tokens_p99", "prompt_tokens_requested_avg",
    "prompt_tokens_cached_avg", "peak_tok_s", "ttft_ms_std", "tpot_ms_avg", "tpot_ms_std", "itl_ms_avg", "itl_ms_std",
    "gap_ms_avg", "gap_ms_std", "gap_ms_p50", "gap_ms_p99", "e2e_s_std", "accept_len", "accept_rate",
    "server_gen_tok_s",
)
# type -> {key: (check, required)}
_SCHEMA: dict[str, dict] = {
    "run": {"version": (_oint, False), "target": (_ostr, False), "model": (_ostr, False), "api": (_ostr, False)},
    "request": {
        "start_s": (is_num, True), "level_index": (is_int, True), "ok": (_bool, True), "id": (_oint, False),
        "level": (is_int, False), "warmup": (_bool, False), "end_s": (is_num, False), "ttft_ms": (_onum, False),
        "tpot_ms": (_onum, False), "e2e_ms": (_onum, False), "itl_ms_p50": (_onum, False),
        "output_tokens": (is_int, False), "tokens_estimated": (_bool, False), "prompt_tokens": (_oint, False),
        "chunks": (is_int, False), "finish_reason": (_ostr, False), "retries": (is_int, False), "error": (_error, False),
        "retry_ms": (is_num, False),
        "prompt_tokens_requested": (_oint, False), "prompt_tokens_cached": (_oint, False), "max_tokens": (_oint, False),
        # --check-outputs (what an answer holds is checked where it is read: stats/lossless.py)
        "prompt_id": (_ostr, False), "prompt_sha": (_ostr, False), "output": (_opt(lambda v: isinstance(v, dict)), False),
    },
    "level": {
        "level_index": (is_int, True), "concurrency": (is_int, True), "requests": (is_int, True), "ok": (is_int, True),
        "wall_s": (is_num, True), "throughput_tok_s": (is_num, True), "per_request_tok_s": (is_num, True),
        "errors": (_counts, False), "output_tokens": (is_int, False), "tokens_estimated": (_bool, False),
        "req_s": (is_num, False),
        **{k: (_onum, False) for k in ("ttft_ms_avg", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99",
                                        "itl_ms_p50", "itl_ms_p99", "e2e_s_avg", "e2e_s_p50", "e2e_s_p99")},
        # the figures of issue 15 (absent in older records)
        **{k: (_onum, False) for k in _LEVEL_FLOATS},
        "input_tokens": (_oint, False), "peak_concurrency": (_oint, False), "accept_per_pos": (_onums, False),
        "server_source": (_ostr, False),
        # a level cut by a crash, the server down or a pause (issue 11): what cut it, its active time
        "cut": (_ostr, False), "active_s": (_onum, False), "lost": (_oint, False),
        "gpu": (_numbers, False),  # its GPUs' figures (--gpu-metrics): utilisation, memory, power, energy
    },
    "event": {"t_s": (is_num, True), "kind": (is_str, True), "value": (_any, False)},
    "crash": {
        "t_s": (is_num, True), "signature": (is_str, True), "first_seen_s": (is_num, False), "exception_type": (_ostr, False),
        "message": (_ostr, False), "innermost_frame": (_ostr, False), "processes": (_strs, False),
        "count": (is_int, False), "new": (_bool, False), "excerpt": (_ostr, False),
    },
    "server": {
        "t_s": (is_num, True), "source": (is_str, True),
        **{k: (_onum, False) for k in SERVER_FIELDS},
    },
    "gpu": {"t_s": (is_num, True), "gpu": (is_int, True), "source": (is_str, False), "name": (_ostr, False),
            **{k: (_onum, False) for k in GPU_FIELDS}},
    "client": {"t_s": (is_num, True), "cpu_pct": (_onum, False), "loop_lag_ms": (_onum, False),
               "saturated": (_bool, False), "level": (is_int, False), "starved": (_bool, False),
               "lag_cpu_wait_ms": (_onum, False)},
    "end": {"reason": (is_str, True), "elapsed_s": (is_num, False), "requests": (is_int, False), "ok": (is_int, False),
            "ended_at": (is_str, False)},
}


def line_problem(obj: dict) -> str | None:
    """Why a decoded line cannot be used (None: it can): an unknown type, a missing key, a value of
    the wrong type, a number that is not finite or not of sane size."""
    t = obj.get("type")
    schema = _SCHEMA.get(t) if isinstance(t, str) else None
    if schema is None:
        return f"unknown line type {str(t)[:40]!r}"
    for key, (check, required) in schema.items():
        if key not in obj:
            if required:
                return f"{t} line without {key!r}"
            continue
        if not check(obj[key]):
            return f"{t} line: {key} = {str(obj[key])[:40]!r} is not valid"
    return None


def read_record(path: str) -> RecordData:
    rec = RecordData()
    buckets = {
        "request": rec.requests,
        "level": rec.levels,
        "event": rec.events,
        "crash": rec.crashes,
        "server": rec.servers,
        "gpu": rec.gpus,
        "client": rec.clients,
    }
    runs: list[int] = []
    for n, raw, complete in iter_lines(path):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            if complete:
                rec.bad(n, "not JSON")
            else:
                rec.truncated = True
            continue
        if not isinstance(obj, dict):
            rec.bad(n, "not a JSON object")
            continue
        problem = line_problem(obj)
        if problem is not None:
            rec.bad(n, problem)
            continue
        t = obj["type"]
        if t == "run":
            runs.append(n)
            rec.run = obj
        elif t == "end":
            rec.end = obj
        else:
            buckets[t].append(obj)
    if len(runs) > 1:
        at = ", ".join(str(n) for n in runs[:5])
        raise RecordReadError(
            f"{path} holds {len(runs)} records (run headers at lines {at}): files joined together? "
            "Split it at those lines and read each record on its own"
        )
    if rec.run is None:
        raise RecordReadError(f"{path} is not a specload record (no run header)")
    if rec.end is None:
        rec.truncated = True
    return rec
