"""API flavours: how a request body is built and how one streamed event is read.

Three wire formats are spoken: OpenAI chat completions, OpenAI completions and SGLang's native
``/generate``. Each flavour turns a prompt into (path, body) and reads one decoded JSON event into a
small ``ChunkInfo``. The reading runs once per streamed chunk, so it touches only the keys it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHAT = "chat"
COMPLETIONS = "completions"
GENERATE = "generate"
FLAVOURS = (CHAT, COMPLETIONS, GENERATE)

PATHS = {
    CHAT: "/v1/chat/completions",
    COMPLETIONS: "/v1/completions",
    GENERATE: "/generate",
}


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What every request of a run asks for, apart from its prompt."""

    model: str | None
    max_tokens: int
    ignore_eos: bool = False
    continuous_usage: bool = False
    temperature: float | None = None
    extra_body: tuple[tuple[str, Any], ...] = ()


def build_body(flavour: str, prompt: str, opts: RequestOptions) -> dict[str, Any]:
    if flavour == GENERATE:
        sampling: dict[str, Any] = {"max_new_tokens": opts.max_tokens}
        if opts.ignore_eos:
            sampling["ignore_eos"] = True
        if opts.temperature is not None:
            sampling["temperature"] = opts.temperature
        body: dict[str, Any] = {"text": prompt, "sampling_params": sampling, "stream": True}
    else:
        body = {"stream": True, "max_tokens": opts.max_tokens}
        if opts.model:
            body["model"] = opts.model
        if flavour == CHAT:
            body["messages"] = [{"role": "user", "content": prompt}]
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
    for key, value in opts.extra_body:
        body[key] = value
    return body


class ChunkReader:
    """Reads the events of one streamed response. One instance per request (it keeps state).

    Attributes after each ``read`` call: ``has_text`` (this event carried generated text),
    ``tokens`` (tokens this event carried when the server says so, else None), and the running
    ``completion_tokens``/``prompt_tokens`` from the server's usage, ``finish_reason``,
    ``spec_verify_ct``, ``timings`` and ``error``.
    """

    __slots__ = (
        "flavour",
        "has_text",
        "tokens",
        "completion_tokens",
        "prompt_tokens",
        "finish_reason",
        "spec_verify_ct",
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
        self.finish_reason: str | None = None
        self.spec_verify_ct: int | None = None
        self.timings: dict | None = None
        self.error: str | None = None
        self._text_len = 0
        self._cum = 0  # cumulative completion tokens at the previous text event

    def read(self, obj: Any) -> None:
        self.has_text = False
        self.tokens = None
        if not isinstance(obj, dict):
            self.error = f"event is not a JSON object: {str(obj)[:200]}"
            return
        if self.flavour == GENERATE:
            self._read_generate(obj)
            return
        err = obj.get("error")
        if err is not None:
            self.error = error_message(err)
            return
        choices = obj.get("choices")
        if choices:
            c0 = choices[0]
            if self.flavour == CHAT:
                delta = c0.get("delta") or c0.get("message")
                if delta:
                    # reasoning models stream their thinking first; it is generated text too
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    if text:
                        self.has_text = True
            else:
                if c0.get("text"):
                    self.has_text = True
            fr = c0.get("finish_reason")
            if fr:
                self.finish_reason = fr
        usage = obj.get("usage")
        if usage:
            self._counts(usage)
        timings = obj.get("timings")
        if timings is not None:
            self.timings = timings

    def _counts(self, d: dict) -> None:
        """Token counts of OpenAI ``usage`` or SGLang ``meta_info`` (both cumulative)."""
        ct = d.get("completion_tokens")
        if ct is not None:
            self.completion_tokens = ct
            if self.has_text:
                # a cumulative count on a text chunk tells how many tokens this chunk held
                self.tokens = ct - self._cum
                self._cum = ct
        pt = d.get("prompt_tokens")
        if pt is not None:
            self.prompt_tokens = pt

    def _read_generate(self, obj: dict) -> None:
        # SGLang streams the whole text so far in every event, with cumulative meta_info.
        text = obj.get("text")
        if text is not None:
            n = len(text)
            if n > self._text_len:
                self.has_text = True
                self._text_len = n
        meta = obj.get("meta_info")
        if meta:
            self._counts(meta)
            sv = meta.get("spec_verify_ct")
            if sv is not None:
                self.spec_verify_ct = sv
            fr = meta.get("finish_reason")
            if fr:
                self.finish_reason = fr.get("type") if isinstance(fr, dict) else str(fr)
        err = obj.get("error")
        if err is not None:
            self.error = error_message(err)


def error_message(err: Any) -> str:
    """The human message inside an error body: OpenAI, vLLM, llama.cpp, TGI and FastAPI shapes."""
    if isinstance(err, dict):
        for key in ("error", "message", "detail", "msg"):
            v = err.get(key)
            if v:
                return error_message(v) if isinstance(v, dict | list) else str(v)
        return str(err)
    if isinstance(err, list) and err:
        return "; ".join(error_message(e) for e in err[:3])
    return str(err)


def read_full_response(flavour: str, obj: Any) -> tuple[bool, int | None, int | None, str | None]:
    """A non-streamed JSON answer: (has_text, completion_tokens, prompt_tokens, finish_reason)."""
    if not isinstance(obj, dict):
        return False, None, None, None
    if flavour == GENERATE:
        meta = obj.get("meta_info") or {}
        fr = meta.get("finish_reason")
        return (
            bool(obj.get("text")),
            meta.get("completion_tokens"),
            meta.get("prompt_tokens"),
            fr.get("type") if isinstance(fr, dict) else fr,
        )
    choices = obj.get("choices") or [{}]
    c0 = choices[0]
    text = (c0.get("message") or {}).get("content") if flavour == CHAT else c0.get("text")
    usage = obj.get("usage") or {}
    return bool(text), usage.get("completion_tokens"), usage.get("prompt_tokens"), c0.get("finish_reason")
