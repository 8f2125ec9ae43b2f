"""The OpenAI wire as vLLM and SGLang speak it: request rules, SSE chunks, whole bodies, error bodies,
``/tokenize``, ``/v1/models``, vLLM's /metrics and SGLang's log lines. ``server.py`` runs requests; a
wire decides how they look. Each shape is copied from a real server (shared/real-server/REPORT.md):
vLLM's role chunk, one chunk per decode step, finish and usage chunks, continuous usage; SGLang's
cumulative ``/generate`` chunks with the request's speculative counts in ``meta_info``;
``usage_in_last_chunk`` for llama-server's shape on this wire; with speculation on, the request's
acceptance on the last chunk and in whole bodies, as vLLM's ``--per-request-spec-decode-metrics``
(``metrics.speculative_decoding``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from specload.sim import tokenizer
from specload.sim.config import SimConfig
from specload.sim.greedy import Token
from specload.sim.model import (
    VOCAB,
    StepDraw,
    estimate_chat_tokens,
    estimate_prompt_tokens,
    estimate_text_tokens,
)
from specload.sim.prefix_cache import PrefixCache
from specload.sim.scheduler import Counters, Scheduler, Sequence
from specload.sim.serverlog import ServerLog, crash_lines, decode_batch_line, finish_line

DONE = b"data: [DONE]\n\n"
Serve = Callable[[web.Request, str], Awaitable[web.StreamResponse]]  # the server's generation handler


class BadRequest(Exception):
    def __init__(self, message: str, *, param: str | None = None, status: int = 400, **extra: Any):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.extra = extra


def error_body(status: int, message: str, type_: str, param: str | None = None, **extra: Any) -> bytes:
    err: dict[str, Any] = {"message": message, "type": type_, "code": status}
    if param is not None:
        err["param"] = param
    err.update(extra)
    return orjson.dumps({"error": err})


SIM_VERSION = "0.0.0-sim"  # what /version, /get_server_info and /props say


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def read_object(request: web.Request) -> dict | web.Response:
    """A helper endpoint's JSON object body, or the 400 to answer (both wires' ``/tokenize``)."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as e:
        return json_response({"error": {"message": f"malformed JSON body: {e}", "code": 400}}, 400)
    if not isinstance(body, dict):
        return json_response({"error": {"message": "request body must be a JSON object", "code": 400}}, 400)
    return body


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


@dataclass(slots=True)
class Req:
    """A validated generation request."""

    kind: str  # "completions" | "chat" | "generate"
    rid: str
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    cached_tokens: int | None = None  # prefix cache on: the prompt's tokens it served
    greedy: bool = False  # temperature 0: the text is the prompt's own (greedy.py)
    top_logprobs: int | None = None  # logprobs asked for, with this many alternatives (None: not asked)


def sampling(kind: str, body: dict) -> tuple[bool, int | None]:
    """(temperature 0, the alternatives asked for with logprobs or None) of a request body, as each
    API asks: chat ``logprobs: true`` + ``top_logprobs: K``, completions ``logprobs: K``, SGLang's
    ``/generate`` ``return_logprob`` + ``top_logprobs_num`` (its temperature in sampling_params)."""
    if kind == "generate":
        sp = body.get("sampling_params") or {}
        temperature = sp.get("temperature") if isinstance(sp, dict) else None
        top: Any = body.get("top_logprobs_num", 0) if body.get("return_logprob") else None
    else:
        temperature = body.get("temperature")
        lp = body.get("logprobs")
        if kind == "chat":
            top = body.get("top_logprobs") or 0 if lp is True else None
        else:
            top = None if lp is None or lp is False else lp
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20):
        raise BadRequest(f"top logprobs must be an integer from 0 to 20, got {top!r}", param="logprobs")
    greedy = isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0
    return greedy, top


def _int_param(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, got {value!r}.", param=name)
    if value < 1:
        raise BadRequest(f"{name} must be at least 1, got {value}.", param=name)
    return value


def spec_metrics(seq: Sequence, spec_tokens: int) -> dict | None:
    """vLLM's per-request ``metrics`` object with its ``speculative_decoding`` summary (None: no speculation)."""
    if not spec_tokens or not seq.verify_steps:
        return None
    steps, accepted = seq.verify_steps, seq.accepted
    return {"speculative_decoding": {
        "mean_acceptance_length": 1.0 + accepted / steps, "draft_acceptance_rate": accepted / (steps * spec_tokens),
        "num_spec_steps": steps, "num_accepted_draft_tokens": accepted, "num_draft_tokens": steps * spec_tokens,
        "num_spec_tokens": spec_tokens}}


def last_chunk_timings(seq: Sequence) -> dict | None:
    """llama.cpp's non-standard ``timings`` object, as ``usage_in_last_chunk`` sends it."""
    if seq.first_token_at is None or seq.last_token_at is None:
        return None
    prompt_ms = (seq.first_token_at - seq.arrival) * 1000.0
    n = seq.completion_tokens
    pred_ms = (seq.last_token_at - seq.first_token_at) * 1000.0
    p = seq.prompt_tokens
    return {
        "cache_n": 0,
        "prompt_n": p,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / p, 3) if p else 0.0,
        "prompt_per_second": round(p * 1000.0 / prompt_ms, 2) if prompt_ms > 0 else 0.0,
        "predicted_n": n,
        "predicted_ms": round(pred_ms, 3),
        "predicted_per_token_ms": round(pred_ms / n, 3) if n else 0.0,
        "predicted_per_second": round(n * 1000.0 / pred_ms, 2) if pred_ms > 0 else 0.0,
    }


def _ranked(t: Token) -> list[tuple[int, float]]:
    """A token's candidates, the most likely first: the chosen one and the runner-up."""
    pair = [(t[0], t[1]), (t[2], t[3])]
    return pair if t[1] >= t[3] else pair[::-1]


def content_entries(toks: list[Token], top: int, *, with_id: bool) -> list[dict[str, Any]]:
    """Tokens as OpenAI chat logprobs (``logprobs.content``): each with its logprob and ``top``
    alternatives; llama-server adds each token's ``id``."""
    def one(i: int, lp: float) -> dict[str, Any]:
        word = VOCAB[i]
        d: dict[str, Any] = {"id": i} if with_id else {}
        d.update(token=word, bytes=list(word.encode()), logprob=lp)
        return d

    out = []
    for t in toks:
        e = one(t[0], t[1])
        e["top_logprobs"] = [one(i, lp) for i, lp in _ranked(t)[:top]]
        out.append(e)
    return out


class Formatter:
    """Builds the SSE events of one streamed response. One instance per request."""

    __slots__ = (
        "req",
        "model",
        "created",
        "usage_last",
        "seq",
        "spec_tokens",
        "sent",
        "flushed",
        "text_so_far",
        "text_len",
        "lp_so_far",
        "top_so_far",
        "accounted",
        "_pre",
        "_post",
    )

    def __init__(self, req: Req, model: str, usage_last: bool, seq: Sequence, spec_tokens: int) -> None:
        self.req = req
        self.seq = seq
        self.spec_tokens = spec_tokens
        self.model = model
        self.created = int(time.time())
        self.usage_last = usage_last
        self.sent = 0  # tokens put into chunks so far
        self.flushed = 0  # of those, tokens handed to the transport
        self.accounted = False  # the request's log line is written
        self.text_so_far = ""  # SGLang sends the cumulative text
        self.text_len = 0  # completions' logprobs: the text_offset of the next token
        self.lp_so_far: list = []  # SGLang's logprobs: cumulative too
        self.top_so_far: list = []
        # Plain content chunks differ only in their text: serialise one with a marker text once and
        # splice later texts in. Vocabulary words need no JSON escaping; this is the max-speed hot path.
        self._pre = self._post = b""
        if req.kind != "generate" and not req.continuous_usage:
            marker = "\x00SPLICE\x00"
            whole = sse(self._base([self._choice(marker, None)]))
            self._pre, _, self._post = whole.partition(orjson.dumps(marker))

    def _base(self, choices: list) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.req.kind == "chat" else "text_completion"
        return {
            "id": self.req.rid,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def usage(self) -> dict[str, Any]:
        p = self.req.prompt_tokens
        u: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": self.sent, "total_tokens": p + self.sent}
        if self.req.cached_tokens is not None:  # with a prefix cache, as vLLM with prompt token details
            u["prompt_tokens_details"] = {"cached_tokens": self.req.cached_tokens}
        return u

    def _choice(self, text: str | None, finish: str | None, logprobs: dict | None = None) -> dict[str, Any]:
        if self.req.kind == "chat":
            delta: dict[str, Any] = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {
            "index": 0,
            "text": text or "",
            "logprobs": logprobs,
            "finish_reason": finish,
            "stop_reason": None,
        }

    def _logprobs(self, d: StepDraw) -> dict | None:
        """A step's tokens as vLLM sends them: chat ``content`` entries, completions' four lists."""
        top, toks = self.req.top_logprobs, d.toks
        if top is None or toks is None:
            return None
        if self.req.kind == "chat":
            return {"content": content_entries(toks, top, with_id=False)}
        offsets, tokens, lps, tops = [], [], [], []
        for t in toks:
            word = VOCAB[t[0]]
            offsets.append(self.text_len)
            self.text_len += len(word)
            tokens.append(word)
            lps.append(t[1])
            tops.append({VOCAB[i]: lp for i, lp in _ranked(t)[:top]})
        return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}

    def head(self) -> bytes:
        if self.req.kind != "chat":
            return b""
        ev = self._base(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )
        if self.req.continuous_usage:
            ev["usage"] = self.usage()
        return sse(ev)

    def step(self, d: StepDraw, seq: Sequence) -> bytes:
        self.sent += d.tokens
        last = d.finish_reason is not None
        if self.req.kind == "generate":
            self.text_so_far += d.text
            meta = self.meta_info(seq, d.finish_reason)
            if self.req.top_logprobs is not None and d.toks is not None:
                # SGLang: the logprobs so far, as (logprob, id, text) triples
                top = self.req.top_logprobs
                self.lp_so_far += [[t[1], t[0], VOCAB[t[0]]] for t in d.toks]
                self.top_so_far += [[[lp, i, VOCAB[i]] for i, lp in _ranked(t)[:top]] for t in d.toks]
                meta["output_token_logprobs"] = self.lp_so_far
                meta["output_top_logprobs"] = self.top_so_far
            return sse({"text": self.text_so_far, "meta_info": meta})
        lp = self._logprobs(d)
        if last and self.usage_last:
            ev = self._base([self._choice(d.text, d.finish_reason, lp)])
            ev["usage"] = self.usage()
            timings = last_chunk_timings(seq)
            if timings is not None:
                ev["timings"] = timings
            self.add_spec_metrics(ev)
            return sse(ev)
        if self._pre and lp is None:
            return b"".join((self._pre, b'"', d.text.encode(), b'"', self._post))
        ev = self._base([self._choice(d.text, None, lp)])
        if self.req.continuous_usage:
            ev["usage"] = self.usage()
        return sse(ev)

    def tail(self, finish: str) -> bytes:
        if self.req.kind == "generate" or self.usage_last:
            return DONE
        ev = self._base([self._choice(None, finish)])
        if self.req.continuous_usage:
            ev["usage"] = self.usage()
        out = sse(ev)
        if self.req.include_usage:
            u = self._base([])
            u["usage"] = self.usage()
            self.add_spec_metrics(u)
            out += sse(u)
        return out + DONE

    def add_spec_metrics(self, ev: dict[str, Any]) -> None:
        m = spec_metrics(self.seq, self.spec_tokens)
        if m is not None:
            ev["metrics"] = m

    def meta_info(self, seq: Sequence, finish: str | None) -> dict[str, Any]:
        fr: dict[str, Any] | None = None
        if finish == "length":
            fr = {"type": "length", "length": seq.max_tokens}
        elif finish == "stop":
            fr = {"type": "stop", "matched": 2}  # the EOS token id
        return {
            "id": self.req.rid,
            "finish_reason": fr,
            "prompt_tokens": self.req.prompt_tokens,
            "completion_tokens": self.sent,
            "cached_tokens": self.req.cached_tokens or 0,
            "spec_verify_ct": seq.verify_steps,
            "spec_num_correct_drafts": seq.accepted,
            "spec_num_proposed_drafts": seq.verify_steps * self.spec_tokens,
        }


class OpenAIWire:
    """vLLM's and SGLang's side of a request: its rules, its bytes, its log line, and /metrics."""

    stream_headers: dict[str, str] = {}

    def __init__(self, config: SimConfig, log: ServerLog, counters: Counters, seed: int,
                 prefix: PrefixCache | None) -> None:
        self.config = config
        self.log = log
        self.counters = counters
        self.seed = seed
        self.prefix = prefix
        self.scheduler: Scheduler | None = None
        self._ids = itertools.count(1)
        self._finish_reasons: dict[str, int] = {}

    def add_routes(self, app: web.Application, serve: Serve) -> None:
        """Beside the two OpenAI endpoints the server adds: SGLang's ``/generate``, ``/tokenize``,
        ``/v1/models`` and ``/metrics``."""

        async def generate(request: web.Request) -> web.StreamResponse:
            return await serve(request, "generate")

        app.router.add_post("/generate", generate)
        if self.config.tokenize_endpoint:
            app.router.add_post("/tokenize", self._tokenize)
            app.router.add_post("/v1/tokenize", self._tokenize)  # SGLang's second path
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/version", self._version)  # vLLM's
        app.router.add_get("/get_server_info", self._server_info)  # SGLang's: its server args
        # the cache resets a client asks for before measuring: vLLM's and SGLang's
        app.router.add_post("/reset_prefix_cache", self._reset_cache)
        app.router.add_route("*", "/flush_cache", self._reset_cache)

    async def _reset_cache(self, request: web.Request) -> web.Response:
        if self.prefix is not None:
            self.prefix.clear()
        if request.path == "/flush_cache":  # SGLang answers in words
            return web.Response(text="Cache flushed.\nPlease check backend logs for more details. ")
        return web.Response()

    def bind(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def parse(self, kind: str, body: Any) -> Req:
        cfg = self.config
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        n = next(self._ids)
        sp: dict[str, Any] = {}
        if kind == "generate":
            sp = body.get("sampling_params") or {}
            if not isinstance(sp, dict):
                raise BadRequest("sampling_params must be an object", param="sampling_params")
            if "input_ids" in body and body["input_ids"] is not None:
                prompt_tokens = estimate_prompt_tokens(body["input_ids"])
            elif isinstance(body.get("text"), str):
                prompt_tokens = estimate_text_tokens(body["text"])
            else:
                raise BadRequest("either text or input_ids must be given", param="text")
            raw_max = sp.get("max_new_tokens", cfg.default_max_tokens)
            max_name = "max_new_tokens"
            ignore_eos = bool(sp.get("ignore_eos", False))
            rid = f"{self.seed & 0xFFFFFFFF:08x}{n:024x}"
        else:
            if kind == "chat":
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    raise BadRequest("messages must be a non-empty list", param="messages")
                prompt_tokens = estimate_chat_tokens(messages)
                max_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
                rid = f"chatcmpl-sim-{n}"
            else:
                if "prompt" not in body:
                    raise BadRequest("prompt is required", param="prompt")
                prompt_tokens = estimate_prompt_tokens(body["prompt"])
                max_name = "max_tokens"
                rid = f"cmpl-sim-{n}"
            raw_max = body.get(max_name)
            if raw_max is None:
                raw_max = cfg.default_max_tokens
            ignore_eos = bool(body.get("ignore_eos", False))
        max_tokens = _int_param(raw_max, max_name)
        if prompt_tokens > cfg.context_size:
            raise BadRequest(
                f"request ({prompt_tokens} tokens) exceeds the available context size "
                f"({cfg.context_size} tokens), try increasing it",
                type_="exceed_context_size_error",
                n_prompt_tokens=prompt_tokens,
                n_ctx=cfg.context_size,
            )
        # like llama-server: generate until the context is full rather than refuse
        max_tokens = min(max_tokens, cfg.context_size - prompt_tokens) or 1
        stream = bool(body.get("stream", False))
        so = body.get("stream_options") or {}
        if not isinstance(so, dict):
            raise BadRequest("stream_options must be an object", param="stream_options")
        continuous = bool(so.get("continuous_usage_stats", False))
        include_usage = bool(so.get("include_usage", False)) or continuous
        greedy, top = sampling(kind, body)
        return Req(kind, rid, prompt_tokens, max_tokens, ignore_eos, stream, include_usage, continuous,
                   greedy=greedy, top_logprobs=top if cfg.logprobs else None)

    def bad_json(self, e: Exception) -> tuple[int, str, str]:
        return 400, f"malformed JSON body: {e}", "BadRequestError"

    def begin(self, req: Req, seq: Sequence) -> Formatter:
        return Formatter(req, self.config.model_name, self.config.usage_in_last_chunk, seq, self.config.spec_tokens)

    def admitted(self, seq: Sequence) -> None:
        """A max-speed request skips the queue: nothing to say about it here."""

    def released(self, seq: Sequence) -> None:
        """The request's handler is done: nothing to keep here."""

    def reject(self, status: int, message: str, type_: str, rid: str, extra: dict[str, Any]) -> web.Response:
        self.log.line(
            finish_line(
                rid=rid,
                status=status,
                outcome=type_,
                prompt_tokens=0,
                completion_tokens=0,
                ttft_s=None,
                tpot_s=None,
                e2e_s=None,
                spec_verify_ct=0,
            )
        )
        return web.Response(
            body=error_body(status, message, type_, **extra), status=status, content_type="application/json"
        )

    def account(self, seq: Sequence, fmt: Formatter, status: int, outcome: str, now: float) -> None:
        if outcome in ("stop", "length"):
            self._finish_reasons[outcome] = self._finish_reasons.get(outcome, 0) + 1
        ttft = None if seq.first_token_at is None else seq.first_token_at - seq.arrival
        tpot = None
        if seq.first_token_at is not None and seq.last_token_at is not None and seq.completion_tokens > 1:
            tpot = (seq.last_token_at - seq.first_token_at) / (seq.completion_tokens - 1)
        self.log.line(
            finish_line(
                rid=seq.rid,
                status=status,
                outcome=outcome,
                prompt_tokens=seq.prompt_tokens,
                completion_tokens=fmt.flushed,
                ttft_s=ttft,
                tpot_s=tpot,
                e2e_s=now - seq.arrival,
                spec_verify_ct=seq.verify_steps,
            )
        )

    def whole_body(self, req: Req, seq: Sequence, fmt: Formatter, text: str, finish: str) -> dict[str, Any]:
        model = self.config.model_name
        usage = fmt.usage()
        if req.kind == "generate":
            meta = fmt.meta_info(seq, finish)
            meta["e2e_latency"] = time.perf_counter() - seq.arrival
            return {"text": text, "meta_info": meta}
        if req.kind == "chat":
            body: dict[str, Any] = {
                "id": req.rid,
                "object": "chat.completion",
                "created": fmt.created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                "usage": usage,
            }
        else:
            body = {
                "id": req.rid,
                "object": "text_completion",
                "created": fmt.created,
                "model": model,
                "choices": [
                    {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
                ],
                "usage": usage,
            }
        timings = last_chunk_timings(seq) if self.config.usage_in_last_chunk else None
        if timings is not None:
            body["timings"] = timings
        fmt.add_spec_metrics(body)
        return body

    def crash_lines(self) -> list[str]:
        return crash_lines()

    def stop_lines(self) -> list[str]:
        return []

    def ticker(self) -> Coroutine[Any, Any, None] | None:
        """SGLang's periodic decode line while anything runs (a coroutine for the server to run)."""
        return self._decode_log_loop()

    async def _tokenize(self, request: web.Request) -> web.Response:
        """``{"prompt": str | [str], "messages"?}`` -> ``{"count", "tokens", "max_model_len"}`` (a list
        of prompts gives lists, as SGLang does)."""
        body = await read_object(request)
        if isinstance(body, web.Response):
            return body
        ctx = self.config.context_size
        try:
            if "messages" in body:
                ids = tokenizer.chat_ids(body["messages"]) if isinstance(body["messages"], list) else None
                if ids is None:
                    raise ValueError("messages must be a list")
                return json_response({"count": len(ids), "max_model_len": ctx, "tokens": ids})
            prompt = body.get("prompt")
            if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
                lists = [tokenizer.text_ids(p) for p in prompt]
                return json_response({"count": [len(x) for x in lists], "max_model_len": ctx, "tokens": lists})
            if not isinstance(prompt, str):
                raise ValueError("prompt must be a string or a list of strings")
        except ValueError as e:
            return json_response({"error": {"message": str(e), "type": "BadRequestError", "code": 400}}, 400)
        ids = tokenizer.text_ids(prompt)
        return json_response({"count": len(ids), "max_model_len": ctx, "tokens": ids})

    async def _models(self, request: web.Request) -> web.Response:
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "specload-sim",
                        "max_model_len": self.config.context_size,
                    }
                ],
            }
        )

    async def _version(self, request: web.Request) -> web.Response:
        return json_response({"version": SIM_VERSION})

    async def _server_info(self, request: web.Request) -> web.Response:
        c = self.config
        return json_response({
            "model_path": c.model_name, "max_running_requests": c.max_batch, "context_length": c.context_size,
            "speculative_algorithm": "EAGLE3" if c.spec_tokens else None,
            "speculative_num_draft_tokens": c.spec_tokens or None, "version": SIM_VERSION,
        })

    async def _metrics(self, request: web.Request) -> web.Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_MetricsCollector(self))
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _decode_log_loop(self) -> None:
        loop = asyncio.get_running_loop()
        c = self.counters
        last_t = loop.time()
        last_gen, last_verify, last_acc = c.generation_tokens, c.verify_steps, c.accepted_tokens
        while True:
            await asyncio.sleep(self.config.log_interval)
            now = loop.time()
            sched = self.scheduler
            assert sched is not None
            d_gen = c.generation_tokens - last_gen
            d_verify = c.verify_steps - last_verify
            d_acc = c.accepted_tokens - last_acc
            dt = max(now - last_t, 1e-9)
            last_t, last_gen, last_verify, last_acc = (
                now,
                c.generation_tokens,
                c.verify_steps,
                c.accepted_tokens,
            )
            if sched.running == 0 and sched.waiting == 0 and d_gen == 0:
                continue  # like SGLang: no decode line while idle
            kv = sched.kv_tokens()
            accept = None
            if self.config.spec_tokens:
                accept = (d_verify + d_acc) / d_verify if d_verify else 0.0
            self.log.line(
                decode_batch_line(
                    running=sched.running,
                    tokens=kv,
                    token_usage=kv / self.config.kv_capacity_tokens,
                    accept_len=accept,
                    gen_tok_s=d_gen / dt,
                    queued=sched.waiting,
                )
            )


class _MetricsCollector:
    """vLLM-named metrics, computed at scrape time from the live counters."""

    def __init__(self, wire: OpenAIWire) -> None:
        self.w = wire

    def collect(self):
        w = self.w
        c = w.counters
        sched = w.scheduler
        labels = ["engine", "model_name"]
        lv = ["0", w.config.model_name]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(lv, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            m = CounterMetricFamily(name, doc, labels=labels)
            m.add_metric(lv, value)
            return m

        running = sched.running if sched else 0
        waiting = sched.waiting if sched else 0
        kv = sched.kv_tokens() if sched else 0
        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            min(1.0, kv / w.config.kv_capacity_tokens),
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens)
        succ = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*labels, "finished_reason"],
        )
        for reason in ("stop", "length"):
            succ.add_metric([*lv, reason], w._finish_reasons.get(reason, 0))
        yield succ
        if w.prefix is not None:
            yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", w.prefix.queries)
            yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", w.prefix.hits)
        yield counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", c.drafts)
        yield counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", c.draft_tokens)
        yield counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", c.accepted_tokens)
        per = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=[*labels, "position"],
        )
        for i, v in enumerate(c.accepted_per_pos):
            per.add_metric([*lv, str(i)], v)
        yield per
