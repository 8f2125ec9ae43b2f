"""Other load testers' result files as runs (``vllm bench serve --save-result`` JSON, SGLang's
``bench_serving --output-file`` JSONL), so ``specload report`` shows and compares them like
specload's own records.

Fields are mapped by their documented meaning; where a definition differs from specload's (ITL per
chunk, vLLM's chat TTFT, whole-benchmark throughput) the run carries a note rather than mixing the
two silently (the README's "Reports" lists them). What a file lacks is missing, never zero, and the
file's own summary is kept beside the figures recomputed from its arrays, so a mismatch is said.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import overload

import numpy as np

from specload import lines
from specload.datatypes import RequestRecord
from specload.record.reader import is_int, is_num, is_str
from specload.record.runs import (
    Run,
    RunDescription,
    RunReadError,
    Timeline,
    default_label,
    register_reader,
)
from specload.stats.level_metrics import LevelRequests
from specload.stats.levels import LevelColumns, LevelSummary, ServerFigures

VLLM = "vllm-bench-serve"
SGLANG = "sglang-bench-serving"

ITL_NOTE = (
    "{tool}'s ITL is the gap between streamed chunks (per chunk); specload's is per token. The ITL "
    "shown here is per token, each gap divided by the request's mean tokens per chunk; {tool}'s "
    "per-chunk ITL is the gap here, and in its summary."
)
THROUGHPUT_NOTE = (
    "{tool}'s output throughput divides all output tokens by the whole benchmark's duration (ramp-up "
    "and drain included); specload's level throughput is its steady state."
)
VLLM_TTFT_NOTE = (
    "vLLM's TTFT ends at the first streamed chunk with choices (for chat, the role-only chunk when the "
    "server sends one); specload's at the first chunk carrying text."
)
TPOT_NOTE = (
    "TPOT is (E2E - TTFT) / (output tokens - 1) in {tool} and specload alike; they differ only in where "
    "E2E ends ({end})."
)
NO_TIMELINE_NOTE = "{tool} records no server samples, events or crashes: missing here, not zero."

# the summary fields a tool writes, by what they mean; (file key, unit) -> our name
_VLLM_SUMMARY = ("ttft", "tpot", "itl", "e2el")
_SGLANG_SUMMARY = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e_latency": "e2el"}


# ------------------------------------------------------------------------------------------ schema
# What each field the readers use must hold, checked before any is used: a field of another type is
# a one-line error naming the file and the field. An absent or null field is missing; fields not
# named here are not read. Times are seconds, counts integers below 2**53.


def _count(v: object) -> bool:
    return is_int(v) and v >= 0  # type: ignore[operator]


def _figure(v: object) -> bool:
    # a summary figure: a number, or a float that is not finite (np.mean of nothing; missing here)
    return is_num(v) or (type(v) is float and not math.isfinite(v))


ONE, EACH, EACH_LIST = 0, 1, 2  # the field is a value, a list of values, a list of lists of values
_SECONDS = (is_num, "a number of seconds")
_TOKENS = (_count, "a token count")
_COUNT = (_count, "a count")
_FIGURE = (_figure, "a number")
_TEXT = (is_str, "text")
_COMMON_FIELDS: dict[str, tuple] = {
    "ttfts": (*_SECONDS, EACH), "itls": (*_SECONDS, EACH_LIST), "output_lens": (*_TOKENS, EACH),
    "input_lens": (*_TOKENS, EACH), "errors": (lambda v: v is None or is_str(v), "an error text", EACH),
    "request_rate": (lambda v: _figure(v) or v == "inf", "a request rate", ONE),
    **{k: (*_COUNT, ONE) for k in ("completed", "total_input_tokens", "total_output_tokens", "max_concurrency")},
    **{k: (*_FIGURE, ONE) for k in ("duration", "request_throughput", "output_throughput")},
    **{k: (*_TEXT, ONE) for k in ("model_id", "backend")},
}
_VLLM_FIELDS = {
    **_COMMON_FIELDS, "latencies": (*_SECONDS, EACH), "start_times": (*_SECONDS, EACH),
    "spec_decode_per_position_acceptance_rates": (*_FIGURE, EACH),
    **{k: (*_COUNT, ONE) for k in ("failed", "max_concurrent_requests", "num_prompts")},
    **{k: (*_FIGURE, ONE) for k in ("total_token_throughput", "max_output_tokens_per_s", "burstiness",
                                   "spec_decode_acceptance_length", "spec_decode_acceptance_rate")},
    **{k: (*_TEXT, ONE) for k in ("endpoint_type", "label", "tokenizer_id", "date")},
}
_SGLANG_FIELDS = {
    **_COMMON_FIELDS,
    **{k: (*_COUNT, ONE) for k in ("total_output_tokens_retokenized", "random_input_len", "random_output_len",
                                   "sharegpt_output_len")},
    **{k: (*_FIGURE, ONE) for k in ("input_throughput", "concurrency", "accept_length", "random_range_ratio")},
    "dataset_name": (*_TEXT, ONE),
}


def _show(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:39] + "…"


def field_problem(d: dict, fields: dict[str, tuple]) -> str | None:
    """Why the fields of a tool's result ``d`` cannot be used (the first field that fails), or None;
    every summary figure (``*_ms``) must be a number too."""
    for key, (check, what, shape) in fields.items():
        v = d.get(key)
        if v is None:
            continue
        if shape == ONE:
            if not check(v):
                return f"{key} = {_show(v)} is not {what}"
            continue
        if not isinstance(v, list):
            return f"{key} = {_show(v)} is not a list"
        if shape == EACH and all(map(check, v)):
            continue
        for i, x in enumerate(v):
            if shape == EACH:
                if not check(x):
                    return f"{key}[{i}] = {_show(x)} is not {what}"
            elif not isinstance(x, list):
                return f"{key}[{i}] = {_show(x)} is not a list"
            elif not all(map(check, x)):
                j = next(j for j, y in enumerate(x) if not check(y))
                return f"{key}[{i}][{j}] = {_show(x[j])} is not {what}"
    for key, v in d.items():
        if key.endswith("_ms") and v is not None and not _figure(v):
            return f"{key} = {_show(v)} is not a number"
    return None


# ------------------------------------------------------------------------------------------ helpers


@overload
def _list(d: dict, key: str) -> list | None: ...
@overload
def _list(d: dict, key: str, default: list) -> list: ...
def _list(d: dict, key: str, default: list | None = None) -> list | None:
    """``d[key]`` when it is a list (a peer's file is not trusted to have the shape it should), else ``default``."""
    v = d.get(key)
    return v if isinstance(v, list) else default


def _f(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


# An exception line of a Python traceback: its type at the start of a line, then ':' or the line's end
# (frames and their source lines are indented, and name parameters such as 'timeout' in passing).
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)", re.MULTILINE)
# an exception type (its last dotted name) as specload's error kind
_KIND_OF_EXCEPTION = {
    **dict.fromkeys(("ConnectionRefusedError", "ClientConnectorError", "ClientConnectorDNSError", "gaierror",
                     "ClientConnectorCertificateError", "ClientConnectorSSLError", "ClientProxyConnectionError",
                     "ConnectError"), "connect"),
    **dict.fromkeys(("ServerDisconnectedError", "ClientPayloadError", "ConnectionResetError", "BrokenPipeError",
                     "RemoteProtocolError", "IncompleteRead", "ContentLengthError", "TransferEncodingError"),
                    "disconnect"),
    **dict.fromkeys(("TimeoutError", "ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError",
                     "ReadTimeout", "ConnectTimeout"), "timeout"),
    **dict.fromkeys(("JSONDecodeError", "UnicodeDecodeError"), "malformed"),
    "ClientResponseError": "http",
}


def _error_kind(text: str) -> str:
    """A peer tool's error text (``traceback.format_exception`` of the aiohttp exception, or the HTTP
    reason) as specload's error kinds: by the first exception type the text names that says one (a
    traceback names the cause first: the ConnectionRefusedError before the ClientConnectorError raised
    from it; a CancelledError says nothing, the TimeoutError after it does)."""
    for m in _EXCEPTION_LINE.finditer(text):
        kind = _KIND_OF_EXCEPTION.get(m.group(1).rsplit(".", 1)[-1])
        if kind is not None:
            return kind
    if "never received a valid chunk" in text.lower():
        return "malformed"
    return "error" if "Traceback (most recent call last)" in text else "http"


def per_token_itl_median(gaps_s: Sequence[float], output_tokens: float) -> float:
    """One request's median per-token ITL in ms from its chunk gaps: specload's rule without per-chunk
    counts (the first chunk carries one token, the others share the rest evenly)."""
    n = len(gaps_s)
    if n == 0 or not output_tokens:
        return math.nan
    mean = (output_tokens - 1) / n if output_tokens - 1 > n else 1.0
    return float(np.median(np.asarray(gaps_s, dtype=np.float64))) * 1e3 / mean


def _stats_ms(values_s: Sequence[float], percentiles: Sequence[float]) -> dict:
    """mean/median/std and percentiles in ms, numpy's definitions (linear interpolation), as both tools
    compute them (``np.mean(x or 0)``: an empty list gives 0 there; here it gives nothing)."""
    a = np.asarray(values_s, dtype=np.float64)
    if a.size == 0:
        return {}
    out = {"mean": float(np.mean(a)) * 1e3, "median": float(np.median(a)) * 1e3, "std": float(np.std(a)) * 1e3}
    for p in percentiles:
        out[f"p{_pword(p)}"] = float(np.percentile(a, p)) * 1e3
    return out


def _pword(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _iso_date(date: object) -> str | None:
    # vLLM writes "%Y%m%d-%H%M%S" (local time of the machine that ran it)
    s = str(date or "")
    if len(s) == 15 and s[8] == "-" and s.replace("-", "").isdigit():
        return f"{s[:4]}-{s[4:6]}-{s[6:8]}T{s[9:11]}:{s[11:13]}:{s[13:15]} (local time)"
    return s or None


def _api(endpoint: object) -> str | None:
    e = str(endpoint or "")
    if "chat" in e:
        return "chat"
    if e in ("sglang", "sglang-native"):
        return "generate"
    if e in ("openai", "vllm", "sglang-oai", "lmdeploy", "openai-completions"):
        return "completions"
    return e or None


def _loads(text: bytes | str) -> object:
    # the standard library's parser: both tools write with json.dumps, which spells an infinite
    # request rate (the default) as Infinity, outside strict JSON
    return json.loads(text)


def _load_json(path: str) -> object:
    try:
        return _loads(lines.read_capped(path))
    except OSError as e:
        raise RunReadError(f"cannot read {path}: {e.strerror}") from None
    except lines.TooLong as e:
        raise RunReadError(str(e)) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise RunReadError(f"{path}: not valid JSON ({e})") from None


def _arrays(d: dict, keys: Sequence[str]) -> int | None:
    """The common length of the per-request arrays the file has, or None when it has none; a file whose
    arrays disagree in length is an error."""
    lens = {k: len(d[k]) for k in keys if isinstance(d.get(k), list)}
    if not lens:
        return None
    if len(set(lens.values())) != 1:
        raise RunReadError(f"per-request arrays of different lengths: {lens}")
    return next(iter(lens.values()))


# ------------------------------------------------------------------------------------------ vLLM


def _is_vllm(path: str, head: bytes) -> bool:
    h = head.lstrip()
    # the summary's first keys come before the (long) per-request arrays in vLLM's file
    return (
        h.startswith(b"{")
        and b'"total_token_throughput"' in h
        and b'"output_throughput"' in h
        and b'"total_output_tokens_retokenized"' not in h
        and b'"type"' not in h[:200]
    )


def _tool_summary(d: dict, keys: tuple[str, ...], latencies: Iterable[str]) -> dict:
    """The figures a tool's summary holds, under its own names: ``keys`` as they are, and each
    ``*_{latency}_ms`` as a float."""
    out = {k: d[k] for k in keys if _f(d.get(k)) is not None}
    for key, v in d.items():
        if any(key.endswith(f"_{m}_ms") for m in latencies) and _f(v) is not None:
            out[key] = float(v)
    return out


def vllm_summary(d: dict) -> dict:
    """The figures vLLM's summary holds, under its own names (ms for latencies)."""
    return _tool_summary(d, ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                             "request_throughput", "output_throughput", "total_token_throughput",
                             "max_output_tokens_per_s", "max_concurrent_requests",
                             "spec_decode_acceptance_length", "spec_decode_acceptance_rate"), _VLLM_SUMMARY)


def recompute_vllm(d: dict) -> dict:
    """vLLM's summary figures recomputed from the file's per-request arrays with vLLM's definitions
    (``calculate_metrics``): successful requests only, TPOT over requests with more than one token,
    ITL pooled over all chunk gaps, percentiles from the file's own set."""
    n = _arrays(d, ("ttfts", "latencies", "output_lens", "errors", "itls"))
    if n is None or not isinstance(d.get("ttfts"), list):
        return {}
    ok = _requests_ok(d, n)
    ttft = [d["ttfts"][i] for i in range(n) if ok[i]]
    lat = [d["latencies"][i] for i in range(n) if ok[i]] if isinstance(d.get("latencies"), list) else []
    lens = d.get("output_lens") or [0] * n
    tpot = [(d["latencies"][i] - d["ttfts"][i]) / (lens[i] - 1) for i in range(n)
            if ok[i] and lens[i] > 1 and isinstance(d.get("latencies"), list)]
    itl = [g for i in range(n) if ok[i] for g in (d.get("itls") or [[]] * n)[i]]
    pcts = sorted({float(k[1:].split("_", 1)[0]) for k in d if k.startswith("p") and k.endswith("_ttft_ms")
                   and k[1:].split("_", 1)[0].replace(".", "", 1).isdigit()}) or [99.0]
    out: dict = {"completed": sum(ok), "failed": n - sum(ok)}
    total_out = sum(lens[i] for i in range(n) if ok[i])
    out["total_output_tokens"] = total_out
    if _f(d.get("duration")):
        out["output_throughput"] = total_out / float(d["duration"])
    for name, vals in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", lat)):
        for stat, v in _stats_ms(vals, pcts).items():
            out[f"{stat}_{name}_ms"] = v
    return out


def _requests_ok(d: dict, n: int) -> list[bool]:
    """Which requests of a vLLM or SGLang benchmark file succeeded."""
    errors = _list(d, "errors", [""] * n)
    lens = _list(d, "output_lens", [1] * n)
    # a failed request has an error text and output length 0 (vLLM appends 0 for it); the length
    # decides when the HTTP reason was empty
    return [not errors[i] and (lens[i] or 0) > 0 for i in range(n)]


def read_vllm(path: str, label: str | None = None) -> Run:
    d = _load_json(path)
    if not isinstance(d, dict):
        raise RunReadError(f"{path}: not a vllm bench serve result (not a JSON object)")
    problem = field_problem(d, _VLLM_FIELDS)
    if problem is not None:
        raise RunReadError(f"{path}: {problem}")
    try:
        n = _arrays(d, ("ttfts", "itls", "latencies", "output_lens", "input_lens", "start_times", "errors"))
    except RunReadError as e:
        raise RunReadError(f"{path}: {e}") from None
    rate = _f(d.get("request_rate"))
    open_loop = rate is not None and math.isfinite(rate)
    notes = [
        ITL_NOTE.format(tool="vLLM"),
        VLLM_TTFT_NOTE,
        TPOT_NOTE.format(tool="vLLM", end="vLLM: the last chunk with choices; specload: the last chunk carrying text"),
        THROUGHPUT_NOTE.format(tool="vLLM"),
        NO_TIMELINE_NOTE.format(tool="vllm bench serve"),
    ]
    summary = vllm_summary(d)
    recomputed = recompute_vllm(d)
    notes.extend(_mismatches("vLLM", summary, recomputed))
    mc = d.get("max_concurrency")
    if n is None:
        notes.append("the file has no per-request arrays (saved without --save-detailed): its summary only, "
                     "no intervals")
        completed, failed = _request_counts(path, d.get("completed"), d.get("failed"))
        concurrency = int(mc) if isinstance(mc, int) else completed + failed
        level = LevelRequests(
            index=0, concurrency=concurrency, ok=np.array([True] * completed + [False] * failed),
            error_kind=(None,) * completed + ("error",) * failed, open_loop=open_loop,
            summary=_summary_level(concurrency, d, completed, failed, "e2el"),
        )
    else:
        if not isinstance(mc, int):
            notes.append("no --max-concurrency: every request was sent at once (concurrency = the request count)"
                         if not open_loop else f"open loop at {rate:g} req/s without a concurrency cap")
        concurrency = int(mc) if isinstance(mc, int) else n
        level = _vllm_level(path, d, n, concurrency, open_loop)
    extra = {k: d[k] for k in ("backend", "endpoint_type", "label", "tokenizer_id", "num_prompts", "request_rate",
                               "burstiness", "max_concurrency", "date") if k in d}
    extra["tool_summary"] = summary
    extra["recomputed"] = recomputed
    lens = d.get("input_lens")
    desc = RunDescription(
        tool="vllm bench serve",
        model=d.get("model_id") if isinstance(d.get("model_id"), str) else None,
        api=_api(d.get("endpoint_type") or d.get("backend")),
        prompt_source="dataset",
        prompt_tokens=round(float(np.mean(lens))) if isinstance(lens, list) and lens else None,
        rate=rate if open_loop else None,
        started_at=_iso_date(d.get("date")),
        config=extra,
    )
    return Run(
        label=label or (d["label"] if isinstance(d.get("label"), str) and d["label"] else default_label(path)),
        source=path, kind=VLLM, description=desc, levels=(level,),
        timeline=Timeline(events=None, server=None, crashes=None, client=None),
        end=None, truncated=False, notes=tuple(notes),
    )


def _vllm_level(where: str, d: dict, n: int, concurrency: int, open_loop: bool) -> LevelRequests:
    ok = np.array(_requests_ok(d, n), dtype=bool)

    def col(key: str, scale: float = 1.0, ok_only: bool = True) -> np.ndarray | None:
        v = d.get(key)
        if not isinstance(v, list):
            return None
        a = np.array([_f(x) if _f(x) is not None else np.nan for x in v], dtype=np.float64) * scale
        return np.where(ok, a, np.nan) if ok_only else a

    start = col("start_times", ok_only=False)
    if start is not None and start.size:
        # perf_counter() of the client: the first request's start is the run's zero
        start = start - np.nanmin(start)
    lat = col("latencies", 1e3)
    ttft = col("ttfts", 1e3)
    tokens = col("output_lens", ok_only=False)
    all_lat = col("latencies", ok_only=False)
    end = start + np.nan_to_num(all_lat) if start is not None and all_lat is not None else None
    tpot = None
    if lat is not None and ttft is not None and tokens is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(ok & (tokens > 1), (lat - ttft) / (tokens - 1), np.nan)
    itl = None
    if isinstance(d.get("itls"), list) and tokens is not None:
        itl = np.array([per_token_itl_median(d["itls"][i], tokens[i]) if ok[i] else np.nan for i in range(n)])
    errors = _list(d, "errors", [""] * n)
    lv = LevelRequests(
        index=0,
        concurrency=concurrency,
        ok=ok,
        start_s=start,
        end_s=end,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=lat,
        itl_ms=itl,
        output_tokens=tokens,
        prompt_tokens=col("input_lens", ok_only=False),
        tokens_estimated=None,
        error_kind=tuple(None if ok[i] else _error_kind(str(errors[i] or "")) for i in range(n)),
        open_loop=open_loop,
    )
    per_pos = _list(d, "spec_decode_per_position_acceptance_rates")
    rate = _f(d.get("spec_decode_acceptance_rate"))  # percent
    accept = _f(d.get("spec_decode_acceptance_length"))
    # the server's counters over the whole run, as vLLM's client computed them
    server = None if accept is None and rate is None else ServerFigures(
        accept_len=accept, accept_rate=None if rate is None else rate / 100,
        accept_per_pos=tuple(float(v) for v in per_pos) if per_pos else None, source=VLLM)
    return replace(lv, summary=level_line(where, lv, _list(d, "itls")).with_server(server))


MAX_SPAN_S = 1e6  # eleven days: one benchmark's requests, the first sent to the last chunk, lie within it


def _span_s(lv: LevelRequests, itls: list | None) -> tuple[float, str]:
    """From the level's first request sent to its last chunk (or end), in seconds, and the field that
    adds the most to it."""
    if lv.n == 0:
        return 0.0, ""
    zero = np.zeros(lv.n)
    start = zero if lv.start_s is None else np.nan_to_num(lv.start_s)
    parts = {
        "start_times": start - np.min(start),
        "ttfts": zero if lv.ttft_ms is None else np.nan_to_num(lv.ttft_ms) / 1e3,
        "itls": np.array([math.fsum(g) for g in itls]) if itls else zero,
        # SGLang's E2E is TTFT + the gaps; vLLM's its latencies (and then its requests have an end)
        "latencies": zero if lv.e2e_ms is None or lv.end_s is None else np.nan_to_num(lv.e2e_ms) / 1e3,
    }
    last = np.maximum(parts["ttfts"] + parts["itls"], parts["latencies"])
    return float(np.max(parts["start_times"] + last)), max(parts, key=lambda k: float(np.max(parts[k])))


def level_line(where: str, lv: LevelRequests, itls: list | None) -> LevelSummary:
    """The level's line computed from the file's per-request arrays by specload's own code
    (``LevelColumns``, as a record's level line is): each request's chunk times are its TTFT plus the
    running sum of its chunk gaps (the times vLLM's own peak tok/s rebuilds), so its ITL is per token
    (a gap over the tokens of its chunk, every token pooled) and its gap per chunk is the tool's ITL.
    Without start times (SGLang's file) every request starts at 0: the caller puts the tool's own
    rates in their place. Requests spanning more than ``MAX_SPAN_S`` are a ``RunReadError``."""
    span, field = _span_s(lv, itls)
    if not span <= MAX_SPAN_S:
        raise RunReadError(f"{where}: {field} make its requests span {span:.3g} s, more than one benchmark "
                           "run (times not in seconds, or a corrupted file)")
    cols = LevelColumns(lv.index, lv.concurrency)

    def at(col: np.ndarray | None, i: int) -> float | None:
        return None if col is None or not np.isfinite(col[i]) else float(col[i])

    for i in range(lv.n):
        start = round((at(lv.start_s, i) or 0.0) * 1e9)
        e2e_ms = at(lv.e2e_ms, i)
        end_s = at(lv.end_s, i)
        end = round(end_s * 1e9) if end_s is not None else start + round((e2e_ms or 0.0) * 1e6)
        if not lv.ok[i]:
            cols.add_values(start_ns=start, end_ns=end, ok=False, error_kind=lv.error_kind[i], output_tokens=0,
                            estimated=False, ttft_ns=None, e2e_ns=None, tpot_ns=None, itl_ns=None)
            continue
        ttft_ms = at(lv.ttft_ms, i)
        offs: tuple[int, ...] = ()
        if ttft_ms is not None:
            t = ttft_ms / 1e3 + np.concatenate(([0.0], np.cumsum(np.asarray(itls[i] if itls else [], dtype=float))))
            offs = tuple(np.rint(t * 1e9).astype(np.int64).tolist())
        tokens = at(lv.output_tokens, i)
        prompt = at(lv.prompt_tokens, i)
        cols.add(RequestRecord(
            request_id=i, level=lv.concurrency, level_index=lv.index, warmup=False, start_ns=start, end_ns=end,
            ttft_ns=None if ttft_ms is None else round(ttft_ms * 1e6),
            e2e_ns=None if e2e_ms is None else round(e2e_ms * 1e6),
            output_tokens=len(offs) if tokens is None else int(tokens), tokens_estimated=tokens is None,
            prompt_tokens=None if prompt is None else int(prompt), chunks=len(offs), chunk_offsets_ns=offs,
        ))
    return cols.summary()


MAX_REQUESTS = 10_000_000  # a summary-only file's level holds a column entry per request it counts


def _request_counts(where: str, completed: object, failed: object) -> tuple[int, int]:
    c = completed if isinstance(completed, int) else 0  # counts, checked by the schema
    f = failed if isinstance(failed, int) else 0
    if c + f > MAX_REQUESTS:
        raise RunReadError(f"{where}: {c + f} requests counted, more than the {MAX_REQUESTS:,} specload reads")
    return c, f


def _summary_level(concurrency: int, d: dict, completed: int, failed: int, e2e_key: str) -> LevelSummary:
    """A level line from a tool's summary alone (a file without per-request arrays): throughput and
    the latency figures it has; what it lacks is None."""

    def ms(key: str) -> float | None:
        return _f(d.get(key))

    def s(key: str) -> float | None:
        v = _f(d.get(key))
        return None if v is None else v / 1e3

    return LevelSummary(
        level_index=0, concurrency=concurrency, requests=completed + failed, ok=completed,
        errors=(("error", failed),) if failed else (), output_tokens=int(d.get("total_output_tokens") or 0),
        tokens_estimated=False, wall_s=_f(d.get("duration")) or math.nan,
        throughput_tok_s=_f(d.get("output_throughput")) or math.nan, per_request_tok_s=math.nan,
        req_s=_f(d.get("request_throughput")) or math.nan, ttft_ms_avg=ms("mean_ttft_ms"),
        ttft_ms_p50=ms("median_ttft_ms"), ttft_ms_p99=ms("p99_ttft_ms"), tpot_ms_p50=ms("median_tpot_ms"),
        tpot_ms_p99=ms("p99_tpot_ms"), itl_ms_p50=None, itl_ms_p99=None, e2e_s_avg=s(f"mean_{e2e_key}_ms"),
        e2e_s_p50=s(f"median_{e2e_key}_ms"), e2e_s_p99=s(f"p99_{e2e_key}_ms"),
        # p90 and p95 where the tool was asked for them (--metric-percentiles 50,90,95,99)
        ttft_ms_p90=ms("p90_ttft_ms"), ttft_ms_p95=ms("p95_ttft_ms"), tpot_ms_p90=ms("p90_tpot_ms"),
        tpot_ms_p95=ms("p95_tpot_ms"), gap_ms_p90=ms("p90_itl_ms"), gap_ms_p95=ms("p95_itl_ms"),
        e2e_s_p90=s(f"p90_{e2e_key}_ms"), e2e_s_p95=s(f"p95_{e2e_key}_ms"),
    )


def _mismatches(tool: str, summary: dict, recomputed: dict) -> list[str]:
    """Summary figures that the file's own arrays do not reproduce at the precision the tool prints
    (two decimals): a file edited or put together from several runs."""
    bad = []
    for k, v in summary.items():
        r = recomputed.get(k)
        if r is None or not isinstance(v, int | float):
            continue
        if round(float(v), 2) != round(float(r), 2) and abs(float(v) - float(r)) > 0.006:
            bad.append(f"{k} {v:.2f} (arrays give {r:.2f})")
    if not bad:
        return []
    return [f"{tool}'s summary in the file does not match its per-request arrays: " + "; ".join(bad[:6])]


# ------------------------------------------------------------------------------------------ SGLang


def _is_sglang(path: str, head: bytes) -> bool:
    first = head.lstrip().split(b"\n", 1)[0]
    return first.startswith(b"{") and b'"output_throughput"' in first and (
        b'"total_output_tokens_retokenized"' in first or b'"mean_e2e_latency_ms"' in first
    )


def sglang_summary(d: dict) -> dict:
    return _tool_summary(d, ("completed", "duration", "total_input_tokens", "total_output_tokens",
                             "total_output_tokens_retokenized", "request_throughput", "input_throughput",
                             "output_throughput", "concurrency", "accept_length"), _SGLANG_SUMMARY)


def recompute_sglang(d: dict) -> dict:
    """SGLang's summary figures that its per-request arrays (``--output-details``) determine, with its
    definitions: TTFT and ITL (pooled chunk gaps) over successful requests, output throughput. TPOT
    and E2E need each request's latency, which the file does not hold."""
    n = _arrays(d, ("ttfts", "itls", "output_lens", "errors"))
    if n is None or not isinstance(d.get("ttfts"), list):
        return {}
    ok = _requests_ok(d, n)
    ttft = [d["ttfts"][i] for i in range(n) if ok[i]]
    itl = [g for i in range(n) if ok[i] for g in (d.get("itls") or [[]] * n)[i]]
    lens = d.get("output_lens") or [0] * n
    out: dict = {"completed": sum(ok), "total_output_tokens": sum(lens[i] for i in range(n) if ok[i])}
    if _f(d.get("duration")):
        out["output_throughput"] = out["total_output_tokens"] / float(d["duration"])
    for stat, v in _stats_ms(ttft, (99,)).items():
        out[f"{stat}_ttft_ms"] = v
    for stat, v in _stats_ms(itl, (95, 99)).items():
        out[f"{stat}_itl_ms"] = v
    if itl:
        out["max_itl_ms"] = float(np.max(itl)) * 1e3
    return out


def read_sglang(path: str, label: str | None = None) -> Run:
    runs = []
    try:
        # each line is a whole benchmark run, its per-request arrays included: capped as a file is
        for i, line, _ in lines.iter_lines(path, lines.MAX_DOCUMENT_BYTES):
            if not line.strip():
                continue
            try:
                obj = _loads(line)
            except (ValueError, UnicodeDecodeError):
                raise RunReadError(f"{path}:{i}: not valid JSON") from None
            if isinstance(obj, dict):
                problem = field_problem(obj, _SGLANG_FIELDS)
                if problem is not None:
                    raise RunReadError(f"{path}:{i}: {problem}")
                runs.append(obj)
    except OSError as e:
        raise RunReadError(f"cannot read {path}: {e.strerror}") from None
    except lines.TooLong as e:
        raise RunReadError(str(e)) from None
    if not runs:
        raise RunReadError(f"{path}: no benchmark results")
    levels = []
    notes = [
        ITL_NOTE.format(tool="SGLang"),
        TPOT_NOTE.format(tool="SGLang", end="SGLang: the last line read, [DONE] included; specload: the last "
                         "chunk carrying text"),
        THROUGHPUT_NOTE.format(tool="SGLang"),
        "SGLang records no request start times or latencies: no timeline, throughput without an interval, "
        "and E2E per request is derived as TTFT + the chunk gaps (its end at the last chunk, as specload's).",
        NO_TIMELINE_NOTE.format(tool="sglang.bench_serving"),
    ]
    summaries = []
    recomputed = []
    for idx, d in enumerate(runs):
        try:
            n = _arrays(d, ("ttfts", "itls", "output_lens", "input_lens", "errors"))
        except RunReadError as e:
            raise RunReadError(f"{path}:{idx + 1}: {e}") from None
        s, r = sglang_summary(d), recompute_sglang(d)
        summaries.append(s)
        recomputed.append(r)
        notes.extend(f"line {idx + 1}: {m}" for m in _mismatches("SGLang", s, r))
        mc = d.get("max_concurrency")
        if n is None:
            completed, failed = _request_counts(f"{path}:{idx + 1}", d.get("completed"), 0)
        else:  # the arrays say which requests succeeded, whatever the summary says
            completed = sum(_requests_ok(d, n))
            failed = n - completed
        concurrency = int(mc) if isinstance(mc, int) else (n if n is not None else completed)
        rate = _f(d.get("request_rate"))
        open_loop = rate is not None and math.isfinite(rate)
        summary = replace(_summary_level(concurrency, d, completed, failed, "e2e_latency"), level_index=idx)
        if n is None:
            notes.append(f"line {idx + 1}: no per-request arrays (run without --output-details): summary only")
            levels.append(LevelRequests(index=idx, concurrency=concurrency, ok=np.ones(completed, dtype=bool),
                                        error_kind=(None,) * completed, open_loop=open_loop, summary=summary))
        else:
            levels.append(_sglang_level(f"{path}:{idx + 1}", d, n, idx, concurrency, open_loop, summary))
    d0 = runs[0]
    extra = {k: d0[k] for k in ("backend", "dataset_name", "random_input_len", "random_output_len",
                                "random_range_ratio", "sharegpt_output_len") if k in d0}
    extra["tool_summary"] = summaries if len(summaries) > 1 else summaries[0]
    extra["recomputed"] = recomputed if len(recomputed) > 1 else recomputed[0]
    lens = [x for d in runs for x in (d.get("input_lens") or [])]
    rate = _f(d0.get("request_rate"))
    desc = RunDescription(
        tool="sglang bench_serving",
        model=d0.get("model_id") if isinstance(d0.get("model_id"), str) else None,
        api=_api(d0.get("backend")),
        max_tokens=int(d0["random_output_len"]) if isinstance(d0.get("random_output_len"), int)
        and str(d0.get("dataset_name", "")).startswith("random") else None,
        prompt_source=str(d0["dataset_name"]) if d0.get("dataset_name") else None,
        prompt_tokens=round(float(np.mean(lens))) if lens else None,
        rate=rate if rate is not None and math.isfinite(rate) else None,
        config=extra,
    )
    return Run(
        label=label or default_label(path), source=path, kind=SGLANG, description=desc,
        levels=tuple(levels), timeline=Timeline(events=None, server=None, crashes=None, client=None),
        end=None, truncated=False, notes=tuple(notes),
    )


def _sglang_level(where: str, d: dict, n: int, idx: int, concurrency: int, open_loop: bool,
                  summary: LevelSummary) -> LevelRequests:
    ok = np.array(_requests_ok(d, n), dtype=bool)
    ttfts = _list(d, "ttfts")
    itls = _list(d, "itls")
    lens = _list(d, "output_lens")
    ttft = np.array([v * 1e3 if ok[i] and (v := _f(ttfts[i])) is not None else np.nan for i in range(n)]) \
        if ttfts is not None else None
    tokens = np.array([float(x or 0) for x in lens]) if lens is not None else None
    e2e = tpot = itl = None
    if ttft is not None and itls is not None:
        # SGLang keeps no per-request latency: TTFT + the chunk gaps ends at the last chunk
        e2e = np.array([ttft[i] + sum(itls[i]) * 1e3 if ok[i] else np.nan for i in range(n)])
        if tokens is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                tpot = np.where(ok & (tokens > 1), (e2e - ttft) / (tokens - 1), np.nan)
            itl = np.array([per_token_itl_median(itls[i], tokens[i]) if ok[i] else np.nan for i in range(n)])
    errors = _list(d, "errors", [""] * n)
    # the level's throughput is the tool's (tokens over its duration): without start times there is no
    # steady state to measure; the summary line carries it
    lv = LevelRequests(
        index=idx,
        concurrency=concurrency,
        ok=ok,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=e2e,
        itl_ms=itl,
        output_tokens=tokens,
        prompt_tokens=np.array([float(x or 0) for x in d["input_lens"]]) if isinstance(d.get("input_lens"), list)
        else None,
        error_kind=tuple(None if ok[i] else _error_kind(str(errors[i] or "")) for i in range(n)),
        open_loop=open_loop,
    )
    # the figures from the arrays; the rates over the tool's whole duration (it keeps no start times)
    line = replace(level_line(where, lv, itls), wall_s=summary.wall_s, throughput_tok_s=summary.throughput_tok_s,
                   req_s=summary.req_s, peak_tok_s=None, peak_concurrency=None, span_ns=None)
    accept = _f(d.get("accept_length"))
    return replace(lv, summary=line.with_server(ServerFigures(accept_len=accept, source=SGLANG) if accept else None))


register_reader(VLLM, _is_vllm, read_vllm)
register_reader(SGLANG, _is_sglang, read_sglang)
