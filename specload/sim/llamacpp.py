"""llama.cpp's llama-server as the simulator plays it (``--flavor llamacpp``): wire shapes and /metrics.

Everything here was copied from the real llama-server (build of llama-cpp-python 0.3.36's llama.cpp, see
shared/real-server/REPORT.md) byte for byte where a client could notice, key order included:

- ids are ``chatcmpl-`` + 32 random letters/digits on both endpoints; ``system_fingerprint`` is
  ``b0-unknown``; ``model`` is the configured name (the real server echoes its alias).
- chat stream: ``delta: {"role": "assistant", "content": null}`` first, then one chunk per *token*
  (llama-server never merges tokens, even when speculation accepted several in one step), then a finish
  chunk with an empty delta; with ``include_usage`` a ``choices: []`` chunk carries ``usage`` and
  ``timings``, without it the finish chunk carries ``timings``; then ``[DONE]``.
- completions stream: one ``text`` chunk per token, then an extra ``"text": ""`` chunk carrying
  ``finish_reason``, ``usage`` (always, asked or not) and ``timings`` together; then ``[DONE]``.
- ``timings``: ``prompt_ms`` runs from the slot starting the request (queueing excluded) to the first
  token; ``predicted_ms`` from the first token to the last; the per-token and per-second figures of the
  generation divide by ``predicted_n - 1`` (the first token came out of prompt processing), as the real
  server's numbers show (5 tokens, 448.163 ms -> 112.04 ms per token). Times are whole microseconds;
  a 0/0 ratio is JSON ``null``, as nlohmann::json writes NaN.
- /metrics is written by hand like llama.cpp does (``# HELP`` / ``# TYPE`` before each unlabelled
  ``llamacpp:`` sample); the throughput gauges cover the time since the previous scrape, as the real
  ``/metrics`` resets its bucket on each read.

The log lines of this flavour live in serverlog.py with the other formats.
"""

from __future__ import annotations

import random
import string
import time
from typing import TYPE_CHECKING, Any

import orjson

from specload.sim.scheduler import Counters, Sequence

if TYPE_CHECKING:
    from specload.sim.model import StepDraw

FINGERPRINT = "b0-unknown"
MAX_TOKENS_LIMIT = 2_147_483_647
_ID_CHARS = string.ascii_letters + string.digits
_DONE = b"data: [DONE]\n\n"


def new_id(rng: random.Random) -> str:
    return "chatcmpl-" + "".join(rng.choices(_ID_CHARS, k=32))


def error_body(status: int, message: str, type_: str, **extra: Any) -> bytes:
    # llama-server's key order: code, message, type, then the error's own fields
    return orjson.dumps({"error": {"code": status, "message": message, "type": type_, **extra}})


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def timings(seq: Sequence, spec_tokens: int) -> dict[str, Any]:
    """The ``timings`` object of a finished (or stopped) request."""
    start = seq.arrival if seq.admitted_at is None else seq.admitted_at
    first = seq.first_token_at if seq.first_token_at is not None else start
    last = seq.last_token_at if seq.last_token_at is not None else first
    prompt_ms = round((first - start) * 1e6) / 1000.0
    pred_ms = round((last - first) * 1e6) / 1000.0
    cache_n = seq.cached_tokens
    p, n = seq.prompt_tokens - cache_n, seq.completion_tokens  # prompt_n: the tokens processed
    out: dict[str, Any] = {
        "cache_n": cache_n,
        "prompt_n": p,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": _ratio(prompt_ms, p),
        "prompt_per_second": _ratio(1e3 * p, prompt_ms),
        "predicted_n": n,
        "predicted_ms": pred_ms,
        "predicted_per_token_ms": _ratio(pred_ms, n - 1),
        "predicted_per_second": _ratio(1e3 * (n - 1), pred_ms),
    }
    if spec_tokens and seq.verify_steps:
        out["draft_n"] = seq.verify_steps * spec_tokens
        out["draft_n_accepted"] = seq.accepted
    return out


def usage(seq_prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "completion_tokens": completion,
        "prompt_tokens": seq_prompt,
        "total_tokens": seq_prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class LlamaFormatter:
    """The SSE events and whole bodies of one request, llama-server style.

    Same attribute interface as server.py's vLLM formatter (``sent``, ``flushed``, ``accounted``,
    ``created``), so the streaming loop, fault injection and accounting need no flavour branches.
    """

    __slots__ = ("kind", "rid", "model", "seq", "spec_tokens", "include_usage", "created", "sent",
                 "flushed", "accounted", "_pre", "_post")

    def __init__(self, kind: str, rid: str, model: str, seq: Sequence, spec_tokens: int,
                 include_usage: bool) -> None:
        self.kind = kind  # "chat" | "completions"
        self.rid = rid
        self.model = model
        self.seq = seq
        self.spec_tokens = spec_tokens
        self.include_usage = include_usage
        self.created = int(time.time())
        self.sent = 0
        self.flushed = 0
        self.accounted = False
        # one chunk per token and tokens differ only in text: serialise once, splice texts in
        # (vocabulary words need no JSON escaping)
        marker = "\x00SPLICE\x00"
        whole = _sse(self._content(marker))
        self._pre, _, self._post = whole.partition(orjson.dumps(marker))

    def _chat(self, choices: list, **tail: Any) -> dict[str, Any]:
        return {
            "choices": choices,
            "created": self.created,
            "id": self.rid,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "object": "chat.completion.chunk",
            **tail,
        }

    def _text(self, choices: list, obj: str = "text_completion", **tail: Any) -> dict[str, Any]:
        # the completions endpoint puts "id" after "object" (and "usage"), unlike chat
        out: dict[str, Any] = {
            "choices": choices,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "object": obj,
        }
        if "usage" in tail:
            out["usage"] = tail.pop("usage")
        out["id"] = self.rid
        out.update(tail)
        return out

    def _content(self, text: str) -> dict[str, Any]:
        if self.kind == "chat":
            return self._chat([{"finish_reason": None, "index": 0, "delta": {"content": text}}])
        return self._text([{"text": text, "index": 0, "logprobs": None, "finish_reason": None}])

    def head(self) -> bytes:
        if self.kind != "chat":
            return b""
        return _sse(self._chat([{"finish_reason": None, "index": 0,
                                 "delta": {"role": "assistant", "content": None}}]))

    def step(self, d: StepDraw, seq: Sequence, timings_: dict | None) -> bytes:
        self.sent += d.tokens
        pre, post = self._pre, self._post
        if d.tokens == 1:
            return b"".join((pre, b'"', d.text.encode(), b'"', post))
        # every simulated token is " word": split a multi-token step back into its tokens
        return b"".join(
            b"".join((pre, b'" ', w.encode(), b'"', post)) for w in d.text.split(" ")[1:]
        )

    def tail(self, finish: str) -> bytes:
        t = timings(self.seq, self.spec_tokens)
        u = usage(self.seq.prompt_tokens, self.sent, self.seq.cached_tokens)
        if self.kind == "chat":
            fin = [{"finish_reason": finish, "index": 0, "delta": {}}]
            if self.include_usage:
                out = _sse(self._chat(fin)) + _sse(self._chat([], usage=u, timings=t))
            else:
                out = _sse(self._chat(fin, timings=t))
        else:
            fin = [{"text": "", "index": 0, "logprobs": None, "finish_reason": finish}]
            out = _sse(self._text(fin, usage=u, timings=t))
        return out + _DONE

    def whole(self, text: str, finish: str) -> dict[str, Any]:
        t = timings(self.seq, self.spec_tokens)
        u = usage(self.seq.prompt_tokens, self.sent, self.seq.cached_tokens)
        if self.kind == "chat":
            choice = {"finish_reason": finish, "index": 0,
                      "message": {"role": "assistant", "content": text}}
            return self._text([choice], obj="chat.completion", usage=u, timings=t)
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
        return self._text([choice], usage=u, timings=t)


def models_body(model: str, n_ctx_slot: int) -> dict[str, Any]:
    """``/v1/models``: llama-server's Ollama-compatible ``models`` list next to the OpenAI ``data``."""
    return {
        "models": [{"name": model, "model": model, "type": "model", "capabilities": ["completion"]}],
        "object": "list",
        "data": [
            {
                "id": model,
                "aliases": [model],
                "tags": [],
                "object": "model",
                "created": int(time.time()),
                "owned_by": "llamacpp",
                "meta": {"n_ctx": n_ctx_slot},
            }
        ],
    }


# (name, type, help) in the real server's order; help texts copied from it
_METRICS: tuple[tuple[str, str, str], ...] = (
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    ("n_decode_total", "counter",
     "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "counter",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"),
)


def _num(v: float) -> str:
    # C++ ostream << double: 6 significant digits, no trailing zeros; counts stay integers
    return str(v) if isinstance(v, int) else f"{v:.6g}"


class LlamaMetrics:
    """llama-server's request-level counters (a request's generation counts when it completes) and the
    /metrics text. Engine-level counts (prompt evaluation, decode passes, drafts) come from ``Counters``."""

    def __init__(self, counters: Counters) -> None:
        self.c = counters
        self.tokens_predicted = 0
        self.predicted_s = 0.0
        self.n_tokens_max = 0
        self.prompt_tokens_cached = 0  # prompt tokens the prefix cache served (prefix_cache on)
        # the previous scrape's totals: the gauges are rates over the time between scrapes
        self._last = (0, 0.0, 0, 0.0)

    def finished(self, seq: Sequence) -> None:
        self.tokens_predicted += seq.completion_tokens
        if seq.first_token_at is not None and seq.last_token_at is not None:
            self.predicted_s += seq.last_token_at - seq.first_token_at
        self.seen(seq)

    def seen(self, seq: Sequence) -> None:
        self.n_tokens_max = max(self.n_tokens_max, seq.prompt_tokens + seq.completion_tokens)

    def text(self, running: int, deferred: int, accepted_per_pos: list[int]) -> bytes:
        c = self.c
        lp_tok, lp_s, lg_tok, lg_s = self._last
        d_p_tok, d_p_s = c.prompt_eval_tokens - lp_tok, c.prompt_eval_s - lp_s
        d_g_tok, d_g_s = self.tokens_predicted - lg_tok, self.predicted_s - lg_s
        self._last = (c.prompt_eval_tokens, c.prompt_eval_s, self.tokens_predicted, self.predicted_s)
        values: dict[str, float] = {
            "prompt_tokens_total": c.prompt_eval_tokens,
            "prompt_tokens_cached_total": self.prompt_tokens_cached,
            "prompt_seconds_total": c.prompt_eval_s,
            "tokens_predicted_total": self.tokens_predicted,
            "tokens_predicted_seconds_total": self.predicted_s,
            "n_decode_total": c.decode_calls,
            "n_tokens_max": self.n_tokens_max,
            "spec_decode_num_draft_tokens_total": c.draft_tokens,
            "spec_decode_num_accepted_tokens_total": c.accepted_tokens,
            "spec_decode_num_drafts_total": c.drafts,
            "prompt_tokens_seconds": d_p_tok / d_p_s if d_p_s > 0 else 0.0,
            "predicted_tokens_seconds": d_g_tok / d_g_s if d_g_s > 0 else 0.0,
            "requests_processing": running,
            "requests_deferred": deferred,
            "n_busy_slots_per_decode": c.busy_slot_steps / c.decode_calls if c.decode_calls else 0.0,
        }
        lines: list[str] = []
        for name, type_, help_ in _METRICS:
            full = "llamacpp:" + name
            lines += (f"# HELP {full} {help_}", f"# TYPE {full} {type_}", f"{full} {_num(values[name])}")
        if c.drafts:
            # the real server adds this family only once something was drafted
            full = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
            lines += (f"# HELP {full} Accepted tokens per draft position", f"# TYPE {full} counter")
            lines += (f'{full}{{position="{i}"}} {v}' for i, v in enumerate(accepted_per_pos))
        return ("\n".join(lines) + "\n").encode()
