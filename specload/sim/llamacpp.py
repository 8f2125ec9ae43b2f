"""llama.cpp's llama-server as the simulator plays it (``--flavor llamacpp``): its wire (``LlamaWire``:
request rules, slots and tasks, error bodies, ``/tokenize``, ``/apply-template``) and its shapes
(``LlamaFormatter``, ``timings``, ``llamacpp:*`` /metrics), copied from the real binary byte for byte
where a client could notice (shared/real-server/REPORT.md): one chunk per token, even when
speculation accepted several. Its log lines are serverlog.py's.
"""

from __future__ import annotations

import itertools
import random
import string
import time
from typing import Any

import orjson
from aiohttp import web

from specload.sim import tokenizer
from specload.sim.config import SimConfig
from specload.sim.model import VOCAB, StepDraw, estimate_chat_tokens, estimate_prompt_tokens
from specload.sim.openai import (
    DONE,
    SIM_VERSION,
    BadRequest,
    Req,
    Serve,
    content_entries,
    json_response,
    read_object,
    sampling,
    sse,
)
from specload.sim.scheduler import Counters, Scheduler, Sequence
from specload.sim.serverlog import LlamaLog, ServerLog, llama_crash_lines

FINGERPRINT = "b0-unknown"
MAX_TOKENS_LIMIT = 2_147_483_647
_ID_CHARS = string.ascii_letters + string.digits


def new_id(rng: random.Random) -> str:
    return "chatcmpl-" + "".join(rng.choices(_ID_CHARS, k=32))


def error_body(status: int, message: str, type_: str, **extra: Any) -> bytes:
    # llama-server's key order: code, message, type, then the error's own fields
    return orjson.dumps({"error": {"code": status, "message": message, "type": type_, **extra}})


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def timings(seq: Sequence, spec_tokens: int) -> dict[str, Any]:
    """The ``timings`` object of a finished (or stopped) request, as the real server's numbers show it:
    ``prompt_ms`` from the slot's start (queueing excluded) to the first token, ``predicted_ms`` from
    there to the last; the generation's rates divide by ``predicted_n - 1`` (the first token came out
    of prompt processing); whole microseconds; a 0/0 ratio is JSON null, as nlohmann::json writes NaN."""
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


class LlamaFormatter:
    """The SSE events and whole bodies of one request, llama-server style, key order included: ids
    ``chatcmpl-`` + 32 letters/digits on both endpoints, ``system_fingerprint`` ``b0-unknown``; chat
    opens with ``"content": null``, then one chunk per token, a finish chunk, ``usage`` and ``timings``
    (on a ``choices: []`` chunk with ``include_usage``, else on the finish chunk); completions end with a
    ``"text": ""`` chunk carrying finish, usage (always) and timings; then ``[DONE]``.

    Same attribute interface as openai.py's formatter (``sent``, ``flushed``, ``accounted``,
    ``created``), so the streaming loop, fault injection and accounting need no flavour branches.
    """

    __slots__ = ("kind", "rid", "model", "seq", "spec_tokens", "include_usage", "top_logprobs", "created",
                 "sent", "flushed", "accounted", "_pre", "_post")

    def __init__(self, kind: str, rid: str, model: str, seq: Sequence, spec_tokens: int,
                 include_usage: bool, top_logprobs: int | None = None) -> None:
        self.kind = kind  # "chat" | "completions"
        self.top_logprobs = top_logprobs
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
        whole = sse(self._content(marker))
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

    def _content(self, text: str, logprobs: dict | None = None) -> dict[str, Any]:
        if self.kind == "chat":
            choice: dict[str, Any] = {"finish_reason": None, "index": 0, "delta": {"content": text}}
            if logprobs is not None:
                choice["logprobs"] = logprobs
            return self._chat([choice])
        return self._text([{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": None}])

    def head(self) -> bytes:
        if self.kind != "chat":
            return b""
        return sse(self._chat([{"finish_reason": None, "index": 0,
                                 "delta": {"role": "assistant", "content": None}}]))

    def step(self, d: StepDraw, seq: Sequence) -> bytes:
        self.sent += d.tokens
        if self.top_logprobs is not None and d.toks is not None:  # a chunk per token, each its logprobs
            top = self.top_logprobs
            return b"".join(sse(self._content(VOCAB[t[0]], {"content": content_entries([t], top, with_id=True)}))
                            for t in d.toks)
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
                out = sse(self._chat(fin)) + sse(self._chat([], usage=u, timings=t))
            else:
                out = sse(self._chat(fin, timings=t))
        else:
            fin = [{"text": "", "index": 0, "logprobs": None, "finish_reason": finish}]
            out = sse(self._text(fin, usage=u, timings=t))
        return out + DONE

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
    /metrics text, written by hand as llama.cpp does (``# HELP``/``# TYPE`` before each sample; the
    throughput gauges cover the time since the previous scrape, as the real one resets its bucket on
    each read). Engine-level counts (prompt evaluation, decode passes, drafts) come from ``Counters``."""

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


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = "llama.cpp"


class LlamaWire:
    """llama-server's side of a request: its rules, ids, tasks and slots, its bytes, its log lines and
    /metrics (the same methods as ``openai.OpenAIWire``)."""

    stream_headers = {"X-Accel-Buffering": "no"}

    def __init__(self, config: SimConfig, log: ServerLog, counters: Counters, seed: int,
                 live: set[Sequence]) -> None:
        self.config = config
        self.log = log
        self.counters = counters
        self.live = live  # the server's open requests: the busy slots are read from them
        self.scheduler: Scheduler | None = None
        self.llama_log = LlamaLog()
        self.metrics = LlamaMetrics(counters)
        self._id_rng = random.Random(seed ^ 0x11A3A)
        self._tasks = itertools.count(0)
        self._slot_last_us: dict[int, int] = {}

    def add_routes(self, app: web.Application, serve: Serve) -> None:
        """No ``/generate``; llama.cpp's ``/tokenize`` and ``/apply-template``, ``/v1/models``, ``/metrics``."""
        app.on_response_prepare.append(_server_header)
        if self.config.tokenize_endpoint:
            app.router.add_post("/tokenize", self._tokenize)
            app.router.add_post("/apply-template", self._apply_template)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/slots", self._slots)
        app.router.add_post("/slots/{id}", self._slot_action)
        app.router.add_get("/props", self._props)

    def bind(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        scheduler.on_admit = self.admitted

    async def _slots(self, request: web.Request) -> web.Response:
        busy = {s.slot for s in self.live}
        return json_response([{"id": i, "n_ctx": self.config.slot_context, "speculative": self.config.spec_tokens > 0,
                               "is_processing": i in busy} for i in range(self.config.max_batch)])

    async def _slot_action(self, request: web.Request) -> web.Response:
        """``POST /slots/ID?action=erase``: the slot's prompt cache forgotten (the real server needs
        ``--slot-save-path`` for it; the simulated one keeps no prompt cache, so nothing is erased)."""
        raw = request.match_info["id"]
        if request.query.get("action") != "erase" or not raw.isdigit() or int(raw) >= self.config.max_batch:
            return web.Response(body=error_body(400, "Invalid slot id or action", "invalid_request_error"),
                                status=400, content_type="application/json")
        return json_response({"id_slot": int(raw), "n_erased": 0})

    def parse(self, kind: str, body: Any) -> Req:
        """llama-server's request rules: ``max_tokens`` from -1 (no limit) to 2^31-1, anything too long
        stops when the slot's context is full; a prompt that does not fit the slot is refused."""
        cfg = self.config
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        if kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("'messages' is required")
            prompt_tokens = estimate_chat_tokens(messages)
        else:
            if "prompt" not in body:
                raise BadRequest("\"prompt\" must be provided")
            prompt_tokens = estimate_prompt_tokens(body["prompt"])
        name = "max_completion_tokens" if kind == "chat" and "max_completion_tokens" in body else "max_tokens"
        raw = body.get(name)
        if raw is None:
            raw = cfg.default_max_tokens  # the server's -n
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            kind_name = "string" if isinstance(raw, str) else type(raw).__name__
            raise BadRequest(
                f"Field '{name}': [json.exception.type_error.302] type must be number, but is {kind_name}"
            )
        raw = int(raw)
        if not (-1 <= raw <= MAX_TOKENS_LIMIT):
            raise BadRequest(
                f"Field '{name}': Value must be between -1 <= value <= {MAX_TOKENS_LIMIT}, but got {raw}"
            )
        n_ctx = cfg.slot_context
        if prompt_tokens >= n_ctx:
            raise BadRequest(
                f"request ({prompt_tokens} tokens) exceeds the available context size "
                f"({n_ctx} tokens), try increasing it",
                type_="exceed_context_size_error",
                n_prompt_tokens=prompt_tokens,
                n_ctx=n_ctx,
            )
        room = n_ctx - prompt_tokens
        # -1: until the context is full; 0 still yields one token here (the scheduler's unit)
        max_tokens = room if raw == -1 else max(1, min(raw, room))
        so = body.get("stream_options") or {}
        if not isinstance(so, dict):
            raise BadRequest("stream_options must be an object")
        greedy, top = sampling(kind, body)
        return Req(
            kind,
            new_id(self._id_rng),
            prompt_tokens,
            max_tokens,
            bool(body.get("ignore_eos", False)),
            bool(body.get("stream", False)),
            bool(so.get("include_usage", False)),
            False,  # no continuous usage stats in llama-server
            greedy=greedy,
            top_logprobs=top if self.config.logprobs else None,
        )

    def bad_json(self, e: Exception) -> tuple[int, str, str]:
        # llama-server answers a body it cannot parse with a 500
        return 500, f"[json.exception.parse_error.101] parse error: {e}", "server_error"

    def begin(self, req: Req, seq: Sequence) -> LlamaFormatter:
        self.metrics.prompt_tokens_cached += seq.cached_tokens
        seq.task = next(self._tasks)
        cfg = self.config
        return LlamaFormatter(req.kind, req.rid, cfg.model_name, seq, cfg.spec_tokens, req.include_usage,
                              req.top_logprobs)

    def admitted(self, seq: Sequence) -> None:
        """The request leaves the queue for a slot (the least recently used)."""
        # Busy slots are read from the live sequences, not kept in a free list: the scheduler admits
        # the next request the instant a sequence finishes, before that handler has run its cleanup.
        busy = {s.slot for s in self.live if s.slot >= 0 and s.finish_reason is None and not s.cancelled}
        free = [i for i in range(self.config.max_batch) if i not in busy]
        if free:
            # least recently used; among never-used slots the highest id, as llama-server picks 7, 6, ...
            seq.slot = min(free, key=lambda i: (self._slot_last_us.get(i, -1), -i))
        else:  # max-speed mode admits beyond max_batch: give it a slot of its own
            seq.slot = self.config.max_batch + len(busy)
        last = self._slot_last_us.get(seq.slot, -1)
        self.log.lines(self.llama_log.launch(seq.slot, seq.task, last))

    def released(self, seq: Sequence) -> None:
        if seq.slot >= 0:
            self._slot_last_us[seq.slot] = int((time.perf_counter() - self.llama_log.t0) * 1e6)

    def reject(self, status: int, message: str, type_: str, rid: str, extra: dict[str, Any]) -> web.Response:
        extra.pop("param", None)  # llama.cpp names the field in the message instead
        if type_ == "BadRequestError":
            type_ = "invalid_request_error"
        body = error_body(status, message, type_, **extra)
        if message.startswith("[json.exception.parse_error"):
            # the HTTP layer's exception handler, not a task
            self.log.line(self.llama_log.got_exception(body.decode()))
        elif type_ != "invalid_request_error":
            # errors of a task (context overflow, the injected 500) are logged; validation is not
            self.log.line(self.llama_log.send_error(next(self._tasks), message))
        return web.Response(
            body=body,
            status=status,
            content_type="application/json",
            charset="utf-8",
        )

    def account(self, seq: Sequence, fmt: LlamaFormatter, status: int, outcome: str, now: float) -> None:
        ll = self.llama_log
        n, p = seq.completion_tokens, seq.prompt_tokens
        n_tokens = p + max(0, n - 1)  # the last token is sampled but not yet in the KV cache
        if outcome in ("stop", "length"):
            self.metrics.finished(seq)
            t = timings(seq, self.config.spec_tokens)
            self.log.lines(
                ll.finished(
                    seq.slot,
                    seq.task,
                    prompt_ms=t["prompt_ms"],
                    prompt_n=p,
                    predicted_ms=t["predicted_ms"],
                    predicted_n=n,
                    steps=seq.verify_steps if self.config.spec_tokens else max(0, n - 1),
                    drafted=t.get("draft_n", 0),
                    accepted=t.get("draft_n_accepted", 0),
                    drafts=seq.verify_steps,
                    n_tokens=n_tokens,
                    # the slot's context filled up before max_tokens (or -1) was reached
                    truncated=outcome == "length" and p + n >= self.config.slot_context,
                )
            )
        elif outcome != "injected_stall":
            # the client is gone (or the injected drop looked like it): llama-server cancels the task
            self.metrics.seen(seq)
            lines = [ll.cancel(seq.task)]
            if seq.slot >= 0:
                lines.append(ll.release(seq.slot, seq.task, n_tokens, False))
            self.log.lines(lines)

    def whole_body(self, req: Req, seq: Sequence, fmt: LlamaFormatter, text: str, finish: str) -> dict[str, Any]:
        return fmt.whole(text, finish)

    def crash_lines(self) -> list[str]:
        return llama_crash_lines()

    def stop_lines(self) -> list[str]:
        return [self.llama_log.exiting()]

    def ticker(self) -> None:
        """llama-server logs per request only: no periodic line."""
        return None

    async def _tokenize(self, request: web.Request) -> web.Response:
        """``{"content", "with_pieces"?}`` -> ``{"tokens": [...]}``, and ``{"tokens": []}`` for a body
        without content."""
        body = await read_object(request)
        if isinstance(body, web.Response):
            return body
        content = body.get("content")
        if not isinstance(content, str):
            return json_response({"tokens": []})
        if body.get("with_pieces"):
            return json_response({"tokens": [{"id": i, "piece": p} for i, p in tokenizer.piece_list(content)]})
        # parse_special (llama.cpp's default): template markers are single special tokens
        special = body.get("parse_special", True)
        return json_response({"tokens": tokenizer.special_ids(content) if special else tokenizer.text_ids(content)})

    async def _apply_template(self, request: web.Request) -> web.Response:
        """``/apply-template``: ``{"messages"}`` -> ``{"prompt"}``, the chat as the model reads it."""
        try:
            body = orjson.loads(await request.read())
            messages = body.get("messages") if isinstance(body, dict) else None
            if not isinstance(messages, list):
                raise ValueError("'messages' is required")
            return json_response({"prompt": tokenizer.apply_template(messages)})
        except (orjson.JSONDecodeError, ValueError) as e:
            return json_response({"error": {"code": 400, "message": str(e), "type": "invalid_request_error"}}, 400)

    async def _models(self, request: web.Request) -> web.Response:
        return json_response(models_body(self.config.model_name, self.config.slot_context))

    async def _props(self, request: web.Request) -> web.Response:
        """llama-server's ``/props``: its slots, context and build (the fields a comparison reads)."""
        c = self.config
        return json_response({
            "default_generation_settings": {"n_ctx": c.slot_context, "params": {"speculative.n_max": c.spec_tokens}},
            "total_slots": c.max_batch, "model_path": f"/models/{c.model_name}.gguf", "build_info": SIM_VERSION,
        })

    async def _metrics(self, request: web.Request) -> web.Response:
        sched = self.scheduler
        assert sched is not None
        text = self.metrics.text(sched.running, sched.waiting, self.counters.accepted_per_pos)
        return web.Response(body=text, headers={"Content-Type": "text/plain; version=0.0.4"})
