"""The JSONL record schema: how each kind of line is written. Version 1.

Every line is one complete JSON object with a ``type``: ``run`` (header), ``request``, ``level``,
``event``, ``crash``, ``server``, ``gpu``, ``client``, ``end``. Times are seconds since the run started
(``t_s``/``start_s``) except the wall-clock stamps in ``run`` and ``end``. The README documents the
keys; tests check that every line the engine writes has them. What is secret and how it is masked is
``specload.secrets``.
"""

from __future__ import annotations

from specload.datatypes import CrashEvent, GpuSample, Output, RequestRecord, RunEvent, ServerSample

SCHEMA_VERSION = 1

REQUEST_KEYS = (
    "type", "id", "level", "level_index", "warmup", "ok", "start_s", "ttft_ms", "tpot_ms", "e2e_ms",
    "itl_ms_p50", "output_tokens", "tokens_estimated", "prompt_tokens", "chunks", "error",
)
LEVEL_KEYS = (
    "type", "level_index", "concurrency", "requests", "ok", "errors", "throughput_tok_s",
    "per_request_tok_s", "wall_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "e2e_s_avg",
    "e2e_s_p50", "e2e_s_p99",
)
EVENT_KEYS = ("type", "t_s", "kind", "value")
END_KEYS = ("type", "reason", "elapsed_s", "requests", "ok", "ended_at")
# a request line's optional keys, as the record's attributes: a group is written when its first is set
_OPTIONAL_KEYS = (
    ("prompt_tokens_requested",), ("max_tokens",), ("prompt_tokens_cached",), ("category",), ("turn", "conversation"),
    ("prompt_id", "prompt_sha"), ("spec_verify_ct",), ("spec_drafted", "spec_accepted"), ("server_timings",),
)


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def request_line(rec: RequestRecord, t0_ns: int, *, with_chunks: bool = False) -> dict:
    itl = rec.itl_per_token() if rec.ok else []  # numpy's array for a long answer, else a list
    if len(itl):
        import numpy as np  # (as datatypes does: not with this module)

        s = np.sort(itl)
        n = len(s)
        itl_p50 = _ms(float(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2))
    else:
        itl_p50 = None
    d: dict = {
        "type": "request",
        "id": rec.request_id,
        "level": rec.level,
        "level_index": rec.level_index,
        "warmup": rec.warmup,
        "ok": rec.ok,
        "start_s": round((rec.start_ns - t0_ns) / 1e9, 6),
        "end_s": round((rec.end_ns - t0_ns) / 1e9, 6),
        "ttft_ms": _ms(rec.ttft_ns),
        "tpot_ms": _ms(rec.tpot_ns),
        "e2e_ms": _ms(rec.e2e_ns),
        "itl_ms_p50": itl_p50,
        "output_tokens": rec.output_tokens,
        "tokens_estimated": rec.tokens_estimated,
        "prompt_tokens": rec.prompt_tokens,
        "chunks": rec.chunks,
        "finish_reason": rec.finish_reason,
        "retries": rec.retries,
        "error": None
        if rec.ok
        else {"kind": rec.error_kind.value if rec.error_kind else "error", "detail": rec.error_detail,
              "status": rec.http_status},
    }
    if rec.retries:
        # the time the stale attempts cost (the request is timed from the attempt the server answered)
        d["retry_ms"] = _ms(rec.retry_ns)
    for keys in _OPTIONAL_KEYS:
        if getattr(rec, keys[0]) is not None:
            d.update((k, getattr(rec, k)) for k in keys)
    if rec.output is not None:
        d["output"] = output_dict(rec.output)
    if rec.chunk_detail_capped:
        # said in the record: ITL covers only the first chunks (chunks, TTFT, E2E are exact)
        d["chunk_detail_capped"] = len(rec.chunk_offsets_ns)
    if with_chunks:
        d["chunk_ms"] = [round(o / 1e6, 3) for o in rec.chunk_offsets_ns]
        if rec.chunk_tokens is not None:
            d["chunk_tokens"] = list(rec.chunk_tokens)
    return d


def output_dict(o: Output) -> dict:
    """A request's answer (--check-outputs): its text and length; with logprobs its tokens (ids or
    texts), their logprobs and margins to the runner-up, as flat lists (about 20 bytes a token)."""
    d: dict = {"text": o.text, "chars": o.chars}
    if o.tokens is not None:
        d.update(tokens=list(o.tokens), logprobs=list(o.logprobs or ()), margins=list(o.margins or ()),
                 token_count=o.token_count)
    if o.unscored:
        d["unscored"] = o.unscored
    if o.capped:
        d["capped"] = True
    return d


def event_line(ev: RunEvent, t0_ns: int) -> dict:
    return {"type": "event", "t_s": round((ev.t_ns - t0_ns) / 1e9, 6), "kind": ev.kind, "value": ev.value}


def crash_line(ev: CrashEvent, t0_ns: int) -> dict:
    return {
        "type": "crash",
        "t_s": round((ev.last_seen_ns - t0_ns) / 1e9, 6),
        "first_seen_s": round((ev.first_seen_ns - t0_ns) / 1e9, 6),
        "signature": ev.signature,
        "exception_type": ev.exception_type,
        "message": ev.message,
        "innermost_frame": ev.innermost_frame,
        "processes": list(ev.processes),
        "count": ev.count,
        "new": ev.new,
        "excerpt": ev.excerpt,
        # what followed the root cause (sigquit lines, process exits, ...); an optional key, so records
        # stay schema version 1 and readers that do not know it ignore it
        "consequences": [
            {
                "signature": c.signature,
                "exception_type": c.exception_type,
                "message": c.message,
                "processes": list(c.processes),
                "count": c.count,
            }
            for c in ev.consequences
        ],
    }


# the figures of a server line and of a gpu line, each left out when the sample has none
SERVER_FIELDS = ("running", "queued", "gen_tok_s", "prompt_tok_s", "accept_len", "accept_rate", "token_usage")
GPU_FIELDS = ("util_pct", "mem_used_mib", "mem_total_mib", "power_w", "sm_clock_mhz", "temp_c")


def _present(sample: ServerSample | GpuSample, fields: tuple[str, ...]) -> dict:
    return {k: getattr(sample, k) for k in fields if getattr(sample, k) is not None}


def server_line(s: ServerSample, t0_ns: int) -> dict:
    d = {"type": "server", "t_s": round((s.t_ns - t0_ns) / 1e9, 6), "source": s.source,
         **_present(s, SERVER_FIELDS)}
    if s.extra:
        d["extra"] = s.extra
    return d


def gpu_line(s: GpuSample, t0_ns: int, *, named: bool) -> dict:
    """One GPU at one sample; its name only on its first line (``named``)."""
    d: dict = {"type": "gpu", "t_s": round((s.t_ns - t0_ns) / 1e9, 6), "gpu": s.gpu, "source": s.source,
               **_present(s, GPU_FIELDS)}
    if named and s.name:
        d["name"] = s.name
    return d
