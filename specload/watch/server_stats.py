"""Server statistics from log lines: SGLang batch lines, vLLM throughput and SpecDecoding lines,
llama.cpp per-request timing and draft-acceptance lines, each turned into a ``ServerSample``.

``parse_stats_line`` sees every log line of a run, so it is built to reject ordinary lines with a
handful of substring checks and no regex. Matched lines are located by a marker substring found
anywhere in the line, so whatever the deployment puts in front (timestamps, ``[TP0]`` rank tags,
journald or docker prefixes, the fixture's epoch/ISO columns, ANSI colour) does not matter.

The fields are read as ``key: value`` pairs rather than by one regex per version: servers add and
reorder fields between releases (``accept rate``, ``cuda graph``/``cpu graph``, ``#retracted-req``,
``CPU KV cache usage``), and a pair parser keeps working when they do. Only the keys we know are
mapped; the rest go into ``extra``.
"""

from __future__ import annotations

import math
import re

from specload.datatypes import ServerSample
from specload.watch.logline import clean_line

_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)
_BRACKET_TAG = re.compile(r"\[([^\[\]]*)\]\s*$")
_SGLANG_RANK = re.compile(r"\b(?:(?:PP|DP|TP|EP|CP|ATTN_CP|ATTN_DP|MOE_EP)\d+\s*)+$")
_VLLM_ENGINE = re.compile(r"Engine (\d+):\s*$")
_LLAMA_EVAL = re.compile(
    r"(prompt )?eval time =\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)\s*\(\s*([\d.]+) ms per token,"
    r"\s*([\d.]+|inf|nan) tokens per second\)"
)
_LLAMA_DRAFT = re.compile(
    r"draft acceptance(?: rate)? =\s*([\d.]+|nan|inf)\s*\(\s*(\d+) accepted /\s*(\d+) generated\)"
    r"(?:,\s*mean (?:acceptance )?len(?:gth)? =\s*([\d.]+))?"
)
_LLAMA_SLOT = re.compile(r"\bid\s+(\d+) \| task (-?\d+)")


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    m = _NUM.search(text)
    if m is None:
        return None
    v = float(m.group(0))
    return None if math.isnan(v) else v


def _pairs(text: str) -> dict[str, str]:
    """``"a: 1, b (x/s): 2.5, c: 1.0, 0.5"`` -> ``{"a": "1", "b (x/s)": "2.5", "c": "1.0, 0.5"}``.

    A comma-separated piece without ``": "`` continues the previous value (vLLM's per-position
    acceptance list).
    """
    out: dict[str, str] = {}
    key: str | None = None
    for piece in text.split(", "):
        k, sep, v = piece.partition(": ")
        if sep:
            key = k.strip()
            out[key] = v.strip()
        elif key is not None and piece.strip():
            out[key] = f"{out[key]}, {piece.strip()}"
    return out


def _pct(text: str | None) -> float | None:
    v = _num(text)
    return None if v is None else v / 100.0


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def _sglang_proc(prefix: str) -> str | None:
    """The rank tag of an SGLang scheduler line: ``[2026-05-20 08:02:44 PP0 TP3]`` -> ``PP0 TP3``."""
    m = _BRACKET_TAG.search(prefix)
    if m is None:
        return None
    r = _SGLANG_RANK.search(m.group(1))
    return r.group(0).strip() if r else None


def _sglang(line: str, t_ns: int) -> ServerSample | None:
    for marker in ("Decode batch", "Prefill batch"):
        at = line.find(marker)
        if at >= 0:
            break
    else:
        return None
    # "Decode batch. #running-req: ..." (older) or "Decode batch, #running-req: ..." (newer)
    body = line[at + len(marker) :].lstrip(".,: ")
    kv = _pairs(body)
    decode = marker.startswith("Decode")
    extra: dict = {"phase": "decode" if decode else "prefill"}
    proc = _sglang_proc(line[:at])
    if proc:
        extra["proc"] = proc
    for key in ("cuda graph", "cpu graph"):
        if key in kv:
            extra["graph"] = kv[key] == "True"
    for key, name in (
        ("#token", "tokens"),
        ("#retracted-req", "retracted"),
        ("#new-seq", "new_seq"),
        ("#new-token", "new_tokens"),
        ("#cached-token", "cached_tokens"),
        ("#prealloc-req", "prealloc"),
        ("#transfer-req", "transfer"),
    ):
        if key in kv:
            extra[name] = _int(_num(kv[key]))
    sample = ServerSample(
        t_ns=t_ns,
        source="log:sglang",
        running=_num(kv.get("#running-req")),
        queued=_num(kv.get("#queue-req")),
        gen_tok_s=_num(kv.get("gen throughput (token/s)")),
        prompt_tok_s=_num(kv.get("input throughput (token/s)")),
        accept_len=_num(kv.get("accept len")),
        accept_rate=_num(kv.get("accept rate")),
        token_usage=_num(kv.get("token usage")),
        extra=extra,
    )
    if sample.running is None and sample.gen_tok_s is None and sample.prompt_tok_s is None:
        return None
    return sample


def _vllm_throughput(line: str, t_ns: int) -> ServerSample | None:
    at = line.find("Avg prompt throughput")
    kv = _pairs(line[at:])
    extra: dict = {"kind": "throughput"}
    m = _VLLM_ENGINE.search(line[:at])
    if m:
        extra["engine"] = m.group(1)
    # GPU KV cache usage on GPUs; the V1 CPU build says "CPU KV cache usage" for the same thing.
    # V0 printed both, and there "CPU" meant swap space: prefer GPU whenever it is present.
    usage = kv.get("GPU KV cache usage") or kv.get("KV cache usage") or kv.get("CPU KV cache usage")
    queued = kv.get("Waiting") or kv.get("Pending")
    if "Swapped" in kv:
        extra["swapped"] = _num(kv["Swapped"])
    for key, name in (("Prefix cache hit rate", "prefix_hit_rate"),):
        if key in kv:
            extra[name] = _pct(kv[key])
    sample = ServerSample(
        t_ns=t_ns,
        source="log:vllm",
        running=_num(kv.get("Running")),
        queued=_num(queued),
        gen_tok_s=_num(kv.get("Avg generation throughput")),
        prompt_tok_s=_num(kv.get("Avg prompt throughput")),
        token_usage=_pct(usage),
        extra=extra,
    )
    if sample.gen_tok_s is None and sample.running is None:
        return None
    return sample


def _vllm_spec(line: str, t_ns: int) -> ServerSample | None:
    at = line.find("SpecDecoding metrics:")
    if at < 0:
        return None
    kv = _pairs(line[at + len("SpecDecoding metrics:") :])
    accepted = _num(kv.get("Accepted"))
    drafted = _num(kv.get("Drafted"))
    rate = _pct(kv.get("Avg Draft acceptance rate") or kv.get("Draft acceptance rate"))
    if rate is None and accepted is not None and drafted:
        rate = accepted / drafted
    extra: dict = {"kind": "spec"}
    if accepted is not None:
        extra["accepted_tokens"] = int(accepted)
    if drafted is not None:
        extra["drafted_tokens"] = int(drafted)
    per_pos = kv.get("Per-position acceptance rate")
    if per_pos:
        extra["per_position"] = tuple(float(x) for x in _NUM.findall(per_pos))
    m = _VLLM_ENGINE.search(line[:at])
    if m:
        extra["engine"] = m.group(1)
    sample = ServerSample(
        t_ns=t_ns,
        source="log:vllm",
        accept_len=_num(kv.get("Mean acceptance length")),
        accept_rate=rate,
        extra=extra,
    )
    if sample.accept_len is None and sample.accept_rate is None and accepted is None:
        return None
    return sample


def _llama_slot(line: str, extra: dict) -> None:
    m = _LLAMA_SLOT.search(line)
    if m:
        extra["slot"] = int(m.group(1))
        extra["task"] = int(m.group(2))


def _llama_eval(line: str, t_ns: int) -> ServerSample | None:
    m = _LLAMA_EVAL.search(line)
    if m is None:
        return None
    prompt = m.group(1) is not None
    tok_s = _num(m.group(5))
    # Per request (one slot), not the server's aggregate: marked so consumers do not sum or
    # chart it as server throughput by mistake.
    extra: dict = {
        "kind": "prompt_eval" if prompt else "eval",
        "scope": "request",
        "ms": float(m.group(2)),
        "tokens": int(m.group(3)),
    }
    _llama_slot(line, extra)
    return ServerSample(
        t_ns=t_ns,
        source="log:llamacpp",
        gen_tok_s=None if prompt else tok_s,
        prompt_tok_s=tok_s if prompt else None,
        extra=extra,
    )


def _llama_draft(line: str, t_ns: int) -> ServerSample | None:
    m = _LLAMA_DRAFT.search(line)
    if m is None:
        return None
    accepted, generated = int(m.group(2)), int(m.group(3))
    extra: dict = {
        "kind": "spec",
        "scope": "request",
        "accepted_tokens": accepted,
        "drafted_tokens": generated,
    }
    _llama_slot(line, extra)
    return ServerSample(
        t_ns=t_ns,
        source="log:llamacpp",
        accept_rate=_num(m.group(1)),
        accept_len=_num(m.group(4)),
        extra=extra,
    )


def parse_stats_line(line: str, t_ns: int) -> ServerSample | None:
    """A ``ServerSample`` when ``line`` is a known server statistics line, else None.

    Cost for an ordinary line: at most five substring checks. Never raises on odd input.
    """
    if "batch" in line:
        parser = _sglang
    elif "Avg prompt throughput" in line:
        parser = _vllm_throughput
    elif "SpecDecoding metrics" in line:
        parser = _vllm_spec
    elif "draft acceptance" in line:
        parser = _llama_draft
    elif "eval time" in line:
        parser = _llama_eval
    else:
        return None
    # the same cleaning as the crash detector's (colour codes, CRs, control bytes), only for the
    # few lines that are statistics
    line = clean_line(line)
    # A statistics line mangled by the transport (cut by a pipe, interleaved with another
    # process's output) must cost a missing sample, never an exception in the log pipeline.
    try:
        return parser(line, t_ns)
    except (ValueError, IndexError, OverflowError):
        return None
