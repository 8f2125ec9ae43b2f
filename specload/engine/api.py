"""API flavours: how a request body is built and how one streamed event is read.

Three wire formats are spoken: OpenAI chat completions, OpenAI completions and SGLang's native
``/generate``. Each flavour turns a prompt into (path, body) and reads one decoded JSON event into a
small ``ChunkInfo``. The reading runs once per streamed chunk, so it touches only the keys it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specload.config import RequestConfig

CHAT = "chat"
COMPLETIONS = "completions"
GENERATE = "generate"
FLAVOURS = (CHAT, COMPLETIONS, GENERATE)

PATHS = {
    CHAT: "/v1/chat/completions",
    COMPLETIONS: "/v1/completions",
    GENERATE: "/generate",
}


TOP_LOGPROBS = 2  # the chosen token and the runner-up: what a margin needs (--check-outputs)
# what a request adds to ask for each token's logprob and the runner-up's, per flavour
LOGPROB_FIELDS: dict[str, dict[str, Any]] = {
    CHAT: {"logprobs": True, "top_logprobs": TOP_LOGPROBS},
    COMPLETIONS: {"logprobs": TOP_LOGPROBS},
    GENERATE: {"return_logprob": True, "top_logprobs_num": TOP_LOGPROBS},
}


def build_body(flavour: str, prompt: str | list[dict], opts: RequestConfig, model: str | None) -> dict[str, Any]:
    """The JSON body of one request: the prompt (a text, or a chat's messages: a system message, a
    conversation's history), the run's request options and the model."""
    if isinstance(prompt, list) and flavour != CHAT:
        prompt = transcript(prompt)
    if flavour == GENERATE:
        sampling: dict[str, Any] = {"max_new_tokens": opts.max_tokens}
        if opts.ignore_eos:
            sampling["ignore_eos"] = True
        if opts.temperature is not None:
            sampling["temperature"] = opts.temperature
        body: dict[str, Any] = {"text": prompt, "sampling_params": sampling, "stream": True}
    else:
        body = {"stream": True, "max_tokens": opts.max_tokens}
        if model:
            body["model"] = model
        if flavour == CHAT:
            body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        stream_options: dict[str, Any] = {"include_usage": True}
        if opts.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
        if opts.ignore_eos:
            body["ignore_eos"] = True
        if opts.temperature is not None:
            body["temperature"] = opts.temperature
    if opts.check_outputs and opts.logprobs:
        body.update(LOGPROB_FIELDS[flavour])
    for key, value in opts.extra_body:
        body[key] = value
    return body


def transcript(messages: list[dict]) -> str:
    """A chat as plain text for the completions and ``/generate`` APIs, which have no template."""
    lines = [f"{str(m.get('role', 'user')).capitalize()}: {m.get('content', '')}" for m in messages]
    return "\n\n".join([*lines, "Assistant:"])


def reply_text(flavour: str, raw: bytes) -> str:
    """The generated text of one answer, from its SSE stream's bytes or its whole JSON body: a
    conversation's history needs the server's reply. Read once, after the answer ended (never per
    chunk); what does not parse is left out."""
    import orjson

    raw = raw.strip()
    events = [raw] if raw.startswith(b"{") else [x[5:].strip() for x in raw.splitlines() if x.startswith(b"data:")]
    parts: list[str] = []
    for ev in events:
        try:
            obj = orjson.loads(ev)
        except orjson.JSONDecodeError:
            continue  # [DONE], an event of another kind
        if not isinstance(obj, dict):
            continue
        if flavour == GENERATE:  # SGLang streams the whole text so far
            if isinstance(obj.get("text"), str):
                parts = [obj["text"]]
            continue
        choices = obj.get("choices")
        c0 = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        part = c0.get("text")
        if flavour == CHAT:
            d = c0.get("delta") or c0.get("message")
            part = d.get("content") if isinstance(d, dict) else None
        if isinstance(part, str):
            parts.append(part)
    return "".join(parts)


# The largest token count taken from a server: above it (1e308, 2^64, a 400-digit integer) the
# number is not a count and must not reach the statistics or the record (where it overflowed the
# level summaries and orjson's 64-bit integers).
MAX_TOKEN_COUNT = 1 << 31


class MalformedChunk(ValueError):
    """A streamed event (or a whole answer) of the wrong shape: valid JSON, but not what the API
    says (``{"choices":"abc"}``, ``"usage":5``, ``"completion_tokens":"7"`` or 1e308). The message
    is one line for the record's error detail."""


def _short(v: Any) -> str:
    try:
        text = repr(v)
    except RecursionError:  # a value nested a thousand deep
        return f"a {type(v).__name__} nested too deep"
    return text if len(text) <= 60 else text[:57] + "..."


def token_count(v: Any, what: str) -> int | None:
    """A server's token count, checked at the edge: None stays None; anything that is not a sane
    non-negative integer raises MalformedChunk naming the field and the value."""
    if v is None:
        return None
    if type(v) is not int or not 0 <= v <= MAX_TOKEN_COUNT:
        raise MalformedChunk(f"{what} is not a token count: {_short(v)}")
    return v


def _obj(v: Any, what: str) -> dict | None:
    if v is None or isinstance(v, dict):
        return v
    raise MalformedChunk(f"{what} is not an object: {_short(v)}")


def _text(v: Any, what: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise MalformedChunk(f"{what} is not a string: {_short(v)}")


def _first_choice(obj: dict) -> dict | None:
    choices = obj.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        raise MalformedChunk(f"choices is not a list: {_short(choices)}")
    if not choices:
        return None
    c0 = choices[0]
    if not isinstance(c0, dict):
        raise MalformedChunk(f"choices[0] is not an object: {_short(c0)}")
    return c0


def _timings(v: Any) -> dict | None:
    """llama.cpp's ``timings``, kept for the record: only finite numbers of sane size survive."""
    if not isinstance(v, dict):
        return None
    out = {}
    for k, x in list(v.items())[:32]:
        if isinstance(k, str) and type(x) in (int, float) and abs(x) < 1e15 and x == x:
            out[k[:64]] = x
    return out


def json_problem(obj: Any) -> str | None:
    """Why ``obj`` cannot be written as JSON (None: it can)."""
    import orjson

    try:
        orjson.dumps(obj)
    except (TypeError, ValueError) as e:  # orjson.JSONEncodeError is a TypeError
        reason = str(e).replace("\n", " ")[:120]
        return f"the request body cannot be written as JSON ({reason})"
    return None


def check_body(opts: RequestConfig, model: str | None) -> str | None:
    """Why the request bodies of these options cannot be sent (None: they can). Checked before the
    run starts, so that ``--max-tokens 99999999999999999999999`` (past JSON's 64-bit integers) or an
    ``--extra-body`` nested 300 deep is a one-line usage error, not a run of failed requests."""
    for flavour in FLAVOURS:
        if problem := json_problem(build_body(flavour, "x", opts, model)):
            return problem
    return None


class ChunkReader:
    """Reads the events of one streamed response. One instance per request (it keeps state).

    Attributes after each ``read`` call: ``has_text`` (this event carried generated text),
    ``tokens`` (tokens this event carried when the server says so, else None), and the running
    ``completion_tokens``/``prompt_tokens`` from the server's usage, ``finish_reason``,
    ``timings``, ``error`` (an error object the server sent in the stream) and the request's own
    speculative counts where the server gives them (``SPEC_SOURCES``): ``spec_verify_ct`` (verify
    steps), ``spec_accepted`` and ``spec_drafted`` (draft tokens accepted, proposed). Those are read
    from the final chunk only (the one with the finish reason or the usage), never per token.

    The event comes from the server, so its shape is checked here, at the edge: anything that is
    not what the API says raises ``MalformedChunk`` with a one-line reason, and no value of the
    wrong type or range gets past this class.
    """

    __slots__ = (
        "flavour",
        "has_text",
        "tokens",
        "completion_tokens",
        "prompt_tokens",
        "cached_tokens",
        "finish_reason",
        "spec_verify_ct",
        "spec_accepted",
        "spec_drafted",
        "timings",
        "error",
        "_text_len",
        "_cum",
    )

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.has_text = False
        self.tokens: int | None = None
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.finish_reason: str | None = None
        self.spec_verify_ct: int | None = None
        self.spec_accepted: int | None = None
        self.spec_drafted: int | None = None
        self.timings: dict | None = None
        self.error: str | None = None
        self._text_len = 0
        self._cum = 0  # cumulative completion tokens at the previous text event

    def read(self, obj: Any) -> None:
        self.has_text = False
        self.tokens = None
        if not isinstance(obj, dict):
            raise MalformedChunk(f"event is not a JSON object: {_short(obj)}")
        if self.flavour == GENERATE:
            self._read_generate(obj)
            return
        err = obj.get("error")
        if err is not None:
            self.error = error_message(err)
            return
        c0 = _first_choice(obj)
        if c0 is not None:
            if self.flavour == CHAT:
                delta = c0.get("delta")
                if delta is None:
                    delta = c0.get("message")
                delta = _obj(delta, "choices[0].delta")
                if delta:
                    # reasoning models stream their thinking first; it is generated text too
                    if (
                        _text(delta.get("content"), "delta.content")
                        or _text(delta.get("reasoning_content"), "delta.reasoning_content")
                        or _text(delta.get("reasoning"), "delta.reasoning")
                    ):
                        self.has_text = True
            elif _text(c0.get("text"), "choices[0].text"):
                self.has_text = True
            fr = _text(c0.get("finish_reason"), "finish_reason")
            if fr:
                self.finish_reason = fr[:64]
        else:
            fr = None
        usage = _obj(obj.get("usage"), "usage")
        if usage:
            self._counts(usage, "usage")
        if usage or fr:  # the final chunk(s): the request's speculative counts ride on them
            timings = obj.get("timings")
            if timings is not None:
                self.timings = _timings(timings)
            self._spec(obj, usage)

    def _counts(self, d: dict, where: str) -> None:
        """Token counts of OpenAI ``usage`` or SGLang ``meta_info`` (both cumulative)."""
        ct = token_count(d.get("completion_tokens"), where + ".completion_tokens")
        if ct is not None:
            self.completion_tokens = ct
            if self.has_text and ct >= self._cum:
                # a cumulative count on a text chunk tells how many tokens this chunk held (a count
                # going backwards tells nothing: the chunk's size stays unknown)
                self.tokens = ct - self._cum
                self._cum = ct
        pt = token_count(d.get("prompt_tokens"), where + ".prompt_tokens")
        if pt is not None:
            self.prompt_tokens = pt
            # prompt tokens a prefix cache served: OpenAI/vLLM/llama.cpp usage details, SGLang meta_info
            details = d.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else d.get("cached_tokens")
            if cached is not None:
                self.cached_tokens = token_count(cached, where + ".cached_tokens")

    def _read_generate(self, obj: dict) -> None:
        # SGLang streams the whole text so far in every event, with cumulative meta_info.
        text = _text(obj.get("text"), "text")
        if text is not None:
            n = len(text)
            if n > self._text_len:
                self.has_text = True
                self._text_len = n
        meta = _obj(obj.get("meta_info"), "meta_info")
        if meta:
            self._counts(meta, "meta_info")
            fr = meta.get("finish_reason")
            if fr:
                self.finish_reason = _finish_type(fr)
                self._spec_from(meta, _SGLANG_META)
        err = obj.get("error")
        if err is not None:
            self.error = error_message(err)


    def _spec(self, obj: dict, usage: dict | None) -> None:
        """The request's speculative counts on an OpenAI-shaped final chunk, from whichever server
        sent them (``SPEC_SOURCES``)."""
        for path, keys in SPEC_SOURCES:
            d: Any = obj
            for k in path:
                d = d.get(k) if isinstance(d, dict) else None
            if isinstance(d, dict):
                self._spec_from(d, keys)
        if usage and self.spec_accepted is None:  # SGLang's usage: accepted and rejected prediction tokens
            det = usage.get("completion_tokens_details")
            if isinstance(det, dict):
                acc, rej = _count(det.get("accepted_prediction_tokens")), _count(det.get("rejected_prediction_tokens"))
                if acc is not None and rej is not None:
                    self.spec_accepted, self.spec_drafted = acc, acc + rej

    def _spec_from(self, d: dict, keys: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]) -> None:
        for attr, names in zip(("spec_verify_ct", "spec_accepted", "spec_drafted"), keys, strict=True):
            for name in names:
                v = _count(d.get(name))
                if v is not None:
                    setattr(self, attr, v)
                    break


# Where servers put one request's speculative counts, as (verify steps, accepted, drafted) key names.
# A value that is not a sane count is left out: these figures are optional, never a malformed answer.
_SGLANG_META = (("spec_verify_ct",), ("spec_num_correct_drafts", "spec_accept_token_num"),
                ("spec_num_proposed_drafts", "spec_draft_token_num"))
SPEC_SOURCES: tuple[tuple[tuple[str, ...], tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]], ...] = (
    # vLLM >= 0.32 with --per-request-spec-decode-metrics summary|detailed
    (("metrics", "speculative_decoding"), (("num_spec_steps",), ("num_accepted_draft_tokens",), ("num_draft_tokens",))),
    # SGLang's OpenAI responses with "return_spec_tokens_details": true
    (("sglext", "spec_tokens_details"), _SGLANG_META),
    # llama.cpp's timings (speculative: --spec-type, a draft model)
    (("timings",), ((), ("draft_n_accepted",), ("draft_n",))),
)


def _count(v: Any) -> int | None:
    return v if type(v) is int and 0 <= v <= MAX_TOKEN_COUNT else None


def _finish_type(fr: Any) -> str | None:
    """SGLang's finish_reason: ``{"type": "length", ...}`` or a plain string."""
    if isinstance(fr, dict):
        fr = fr.get("type")
    if fr is None:
        return None
    return (fr if isinstance(fr, str) else _short(fr))[:64]


def error_message(err: Any, _depth: int = 0) -> str:
    """The human message inside an error body: OpenAI, vLLM, llama.cpp, TGI and FastAPI shapes.
    Bounded in depth and length: the body comes from the server and may be nested 1000 deep."""
    if _depth > 8:
        return _short(err)
    if isinstance(err, dict):
        for key in ("error", "message", "detail", "msg"):
            v = err.get(key)
            if v:
                return error_message(v, _depth + 1) if isinstance(v, dict | list) else str(v)[:500]
        return _short(err)
    if isinstance(err, list) and err:
        return "; ".join(error_message(e, _depth + 1) for e in err[:3])
    return str(err)[:500]


def read_full_response(flavour: str, obj: Any) -> tuple[bool, int | None, int | None, str | None]:
    """A non-streamed JSON answer: (has_text, completion_tokens, prompt_tokens, finish_reason).
    Checked like a streamed event: a wrong shape raises ``MalformedChunk``."""
    if not isinstance(obj, dict):
        raise MalformedChunk(f"answer is not a JSON object: {_short(obj)}")
    if flavour == GENERATE:
        meta = _obj(obj.get("meta_info"), "meta_info") or {}
        return (
            bool(_text(obj.get("text"), "text")),
            token_count(meta.get("completion_tokens"), "meta_info.completion_tokens"),
            token_count(meta.get("prompt_tokens"), "meta_info.prompt_tokens"),
            _finish_type(meta.get("finish_reason")),
        )
    c0 = _first_choice(obj) or {}
    if flavour == CHAT:
        text = _text((_obj(c0.get("message"), "choices[0].message") or {}).get("content"), "message.content")
    else:
        text = _text(c0.get("text"), "choices[0].text")
    usage = _obj(obj.get("usage"), "usage") or {}
    return (
        bool(text),
        token_count(usage.get("completion_tokens"), "usage.completion_tokens"),
        token_count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        _finish_type(c0.get("finish_reason")),
    )
