"""``--check-outputs`` on the wire: what a request asks for, what its answer was, and the cache reset.

The streaming client only appends each socket read to a list (``MAX_RAW_BYTES`` at most); when the
request ends, ``read_output`` decodes that stream once more and takes the generated text and, with
logprobs, each token, its logprob and its margin to the runner-up. The answer is bounded
(``MAX_OUTPUT_CHARS``, ``MAX_OUTPUT_TOKENS``) and says when it was cut.

Logprobs come in four shapes: OpenAI chat's ``logprobs.content`` entries (vLLM, SGLang,
llama-server, which adds token ids), OpenAI completions' four lists (vLLM) and SGLang's
``/generate`` ``meta_info`` triples. The server's text is hostile input: anything of another shape
ends the reading of logprobs, never the request.

``OutputSupport`` is found once before the load (``probe``): whether the server returns logprobs, and
which cache reset it offers (vLLM's ``POST /reset_prefix_cache``, SGLang's ``/flush_cache``,
llama-server's ``POST /slots/ID?action=erase`` per slot). ``reset`` runs it before each measured
level: prompts run again must not be served from the cache the last run or level left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from specload.datatypes import Noted, Output, RunEvent
from specload.engine.api import CHAT, GENERATE, LOGPROB_FIELDS, PATHS
from specload.engine.sse import DONE, SSEDecoder

MAX_RAW_BYTES = 1 << 20  # per request, the stream kept for reading its answer (llama-server: ~500 B/token)
MAX_OUTPUT_CHARS = 4096
MAX_OUTPUT_TOKENS = 1024


class _Answer:
    """An answer as its events are read: text pieces and token entries, within the caps."""

    __slots__ = ("pieces", "chars", "tokens", "logprobs", "margins", "token_count", "unscored", "bad",
                 "generate_lp")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.chars = 0
        self.tokens: list[str] = []
        self.logprobs: list[float | None] = []
        self.margins: list[float | None] = []
        self.token_count = 0
        # pieces of text that came without their tokens' logprobs (llama-server sends none for the
        # draft tokens speculation accepted), kept as one token each: the tokens still spell the text
        self.unscored = 0
        self.bad = False  # logprobs of a shape not understood: no more are read
        self.generate_lp: list = []  # SGLang's triples (cumulative or not)

    def text(self, t: object) -> None:
        if isinstance(t, str) and t:
            if self.chars < MAX_OUTPUT_CHARS:
                self.pieces.append(t)
            self.chars += len(t)

    def chunk(self, text: str, logprobs: object) -> None:
        """One event's text and its logprobs: tokens that spell the text, else the text as one token
        without a logprob (none came) or the text counted as not matching its tokens."""
        before = len(self.tokens)
        self.logprob_object(logprobs)
        if text and not self.bad and len(self.tokens) < MAX_OUTPUT_TOKENS:
            added = self.tokens[before:]
            if not added:
                self.token_count += 1
                self.unscored += 1
                self.tokens.append(text)
                self.logprobs.append(None)
                self.margins.append(None)
            elif "".join(added) != text:
                self.unscored += 1
        self.text(text)

    def token(self, tok: str, lp: object, others: list[tuple[str, object]]) -> None:
        self.token_count += 1
        if len(self.tokens) >= MAX_OUTPUT_TOKENS:
            return
        chosen = float(lp) if isinstance(lp, (int, float)) and _num(lp) else None
        rivals = [float(v) for k, v in others if k != tok and isinstance(v, (int, float)) and _num(v)]
        self.tokens.append(tok)
        self.logprobs.append(None if chosen is None else round(chosen, 3))
        self.margins.append(round(chosen - max(rivals), 3) if rivals and chosen is not None else None)

    def content_entries(self, entries: object) -> None:
        """OpenAI chat's ``logprobs.content`` (llama-server: also on completions), ids where given."""
        if not isinstance(entries, list):
            self.bad = True
            return
        for e in entries:
            if not isinstance(e, dict) or not isinstance(e.get("token"), str):
                self.bad = True
                return
            tops = e.get("top_logprobs") or []
            if not isinstance(tops, list):
                self.bad = True
                return
            others = [(_ident(x), x.get("logprob")) for x in tops if isinstance(x, dict)]
            self.token(_ident(e), e.get("logprob"), others)

    def legacy(self, lp: dict) -> None:
        """OpenAI completions' lists: tokens, token_logprobs, top_logprobs ({token: logprob})."""
        toks, lps, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
        if not isinstance(toks, list) or not isinstance(lps, list) or len(lps) != len(toks):
            self.bad = True
            return
        tops = tops if isinstance(tops, list) and len(tops) == len(toks) else [None] * len(toks)
        for tok, v, top in zip(toks, lps, tops, strict=True):
            if not isinstance(tok, str):
                self.bad = True
                return
            others = list(top.items()) if isinstance(top, dict) else []
            self.token(tok, v, others)

    def logprob_object(self, lp: object) -> None:
        if lp is None or self.bad:
            return
        if not isinstance(lp, dict):
            self.bad = True
        elif "content" in lp:
            if lp["content"] is not None:
                self.content_entries(lp["content"])
        else:
            self.legacy(lp)

    def output(self, capped: bool) -> Output:
        text = "".join(self.pieces)[:MAX_OUTPUT_CHARS]
        # tokens where a logprob came (else they are the stream's chunks, nothing to compare by)
        has = not self.bad and any(lp is not None for lp in self.logprobs)
        return Output(
            text=text,
            chars=self.chars,
            tokens=tuple(self.tokens) if has else None,
            logprobs=tuple(self.logprobs) if has else None,
            margins=tuple(self.margins) if has else None,
            token_count=self.token_count if has else 0,
            capped=capped or self.chars > len(text) or (has and self.token_count > len(self.tokens)),
            unscored=self.unscored if has else 0,
        )


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e6


def _ident(e: dict) -> str:
    """A token as it is compared: its text (every API gives it; ids only some)."""
    return str(e.get("token"))


def _read_generate(ans: _Answer, obj: dict) -> None:
    # SGLang: the whole text so far in each event; logprobs as (logprob, id, text) triples
    text = obj.get("text")
    if isinstance(text, str):
        ans.pieces, ans.chars = [text[:MAX_OUTPUT_CHARS]], len(text)
    meta = obj.get("meta_info")
    if not isinstance(meta, dict):
        return
    lps, tops = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
    if not isinstance(lps, list) or not lps:
        return
    tops = tops if isinstance(tops, list) and len(tops) == len(lps) else [None] * len(lps)
    rows = list(zip(lps, tops, strict=True))
    seen = ans.generate_lp
    # cumulative (the lists so far in every event) when the new list starts as the kept one did
    if seen and len(rows) >= len(seen) and rows[0] == seen[0]:
        ans.generate_lp = rows
    else:
        ans.generate_lp = seen + rows


def _triple_token(t: list) -> str:
    """SGLang's (logprob, id, text): the text where it is given (return_text_in_logprobs), else the id."""
    return t[2] if len(t) > 2 and isinstance(t[2], str) else f"#{t[1]}"


def _generate_tokens(ans: _Answer) -> None:
    for triple, top in ans.generate_lp:
        if not isinstance(triple, list) or len(triple) < 2:
            ans.bad = True
            return
        ident = _triple_token(triple)
        others = [(_triple_token(x), x[0]) for x in (top or []) if isinstance(x, list) and len(x) >= 2]
        ans.token(ident, triple[0], others)


def read_output(flavour: str, raw: Sequence[bytes], *, capped: bool = False) -> Output:
    """The answer in a stream's bytes (the reads as they came; ``capped``: not all were kept)."""
    ans = _Answer()
    dec = SSEDecoder()
    try:
        events = [*dec.feed(b"".join(raw)), *dec.finish()]
    except ValueError:  # an event over the cap: the client recorded the error already
        events = []
    for name, data in events:
        if data == DONE or name == "error":
            continue
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if flavour == GENERATE:
            _read_generate(ans, obj)
            continue
        choices = obj.get("choices")
        c0 = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        if c0 is None:
            continue
        if flavour == CHAT:
            delta = c0.get("delta")
            delta = delta if isinstance(delta, dict) else c0.get("message")
            delta = delta if isinstance(delta, dict) else {}
            text = "".join(t for t in (delta.get("reasoning_content") or delta.get("reasoning"),
                                       delta.get("content")) if isinstance(t, str))
        else:
            t = c0.get("text")
            text = t if isinstance(t, str) else ""
        ans.chunk(text, c0.get("logprobs"))
    if flavour == GENERATE:
        _generate_tokens(ans)
        if ans.tokens and not ans.bad and "".join(ans.tokens) != "".join(ans.pieces)[:sum(map(len, ans.tokens))]:
            ans.unscored += 1  # the tokens do not spell the text (ids without their text)
    return ans.output(capped)


# ------------------------------------------------------------------------------------ before the load


@dataclass(frozen=True, slots=True)
class OutputSupport:
    """What the server offers ``--check-outputs``: logprobs, and its cache reset (None: none found)."""

    logprobs: bool
    reset: str | None  # "vllm", "sglang", "llamacpp"
    slots: tuple[int, ...] = ()  # llama-server's slot ids
    detail: str = ""  # why the reset is missing, for the notice


async def _post(session: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, bytes]:
    try:
        async with session.post(url, allow_redirects=False, **kw) as r:
            return r.status, await r.content.read(1 << 16)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return 0, str(e).encode()


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    try:
        async with session.get(url, allow_redirects=False) as r:
            return r.status, await r.content.read(1 << 20)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return 0, str(e).encode()


async def probe(url: str, flavour: str, body: dict[str, Any], headers: dict[str, str], *,
                timeout_s: float = 30.0, sent: list[dict] | None = None) -> OutputSupport:
    """Ask the server once: a two-token request with logprobs (``body``, already built), and the
    cache resets in turn. ``sent`` gets each generation request sent (the server counts them)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as s:
        body = {**body, **LOGPROB_FIELDS[flavour], "stream": True}
        if flavour == GENERATE:
            body["sampling_params"] = {**body.get("sampling_params", {}), "max_new_tokens": 2}
        else:
            body["max_tokens"] = 2
        status, data = await _post(s, url + PATHS[flavour], data=orjson.dumps(body),
                                   headers={"Content-Type": "application/json", "Accept-Encoding": "identity"})
        if sent is not None:
            sent.append({"path": PATHS[flavour], "purpose": "logprobs", "status": status})
        logprobs = status == 200 and read_output(flavour, [data]).tokens is not None
        reset, slots, detail = await _find_reset(s, url)
    return OutputSupport(logprobs, reset, slots, detail)


async def _find_reset(s: aiohttp.ClientSession, url: str) -> tuple[str | None, tuple[int, ...], str]:
    status, _ = await _post(s, url + "/reset_prefix_cache")
    if status == 200:
        return "vllm", (), ""
    status, _ = await _post(s, url + "/flush_cache")
    if status == 200:
        return "sglang", (), ""
    status, data = await _get(s, url + "/slots")
    slots: tuple[int, ...] = ()
    if status == 200:
        try:
            listed = orjson.loads(data)
        except orjson.JSONDecodeError:
            listed = None
        if isinstance(listed, list):
            slots = tuple(x["id"] for x in listed[:1024] if isinstance(x, dict) and type(x.get("id")) is int)
    if slots:
        status, data = await _post(s, f"{url}/slots/{slots[0]}?action=erase")
        if status == 200:
            return "llamacpp", slots, ""
        return None, (), ("llama-server erases its slots' prompt cache only when started with --slot-save-path DIR"
                          if status == 501 else f"llama-server's slot erase answered HTTP {status}")
    return None, (), "no /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1), /flush_cache (SGLang) or /slots"


async def reset(url: str, support: OutputSupport, headers: dict[str, str], *, timeout_s: float = 30.0) -> str | None:
    """Reset the server's prefix cache; None when it did, else why not (one line)."""
    paths = {"vllm": ["/reset_prefix_cache"], "sglang": ["/flush_cache"],
             "llamacpp": [f"/slots/{i}?action=erase" for i in support.slots]}.get(support.reset or "")
    if paths is None:
        return support.detail or "no cache reset"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as s:
        answers = await asyncio.gather(*(_post(s, url + path) for path in paths))
    bad = [(st, body) for st, body in answers if st != 200]
    if not bad:
        return None
    st, body = bad[0]
    return f"HTTP {st}: {body.decode('utf-8', 'replace').strip()[:200]}" if st else body.decode()[:200]


RESET_CALLS = {"vllm": "POST /reset_prefix_cache", "sglang": "POST /flush_cache",
               "llamacpp": "POST /slots/ID?action=erase for each slot", None: "none"}


class OutputCheck:
    """Before each measured level: the prompts begin again and the server's prefix cache is reset,
    each reset a ``cache_reset`` event (and a failed one a notice, once)."""

    def __init__(self, url: str, headers: dict[str, str], support: OutputSupport, prompts: Any, *,
                 on_event: Callable[[RunEvent], None], on_notice: Callable[[str], None],
                 now_ns: Callable[[], int]) -> None:
        self.url, self.headers, self.support, self.prompts = url, headers, support, prompts
        self.on_event, self.on_notice, self.now_ns = on_event, on_notice, now_ns
        self._warned = False

    async def before_level(self, index: int) -> None:
        self.prompts.restart()
        if self.support.reset is None:
            return
        error = await reset(self.url, self.support, self.headers)
        self.on_event(Noted(self.now_ns(), "cache_reset", {"level_index": index, "method": self.support.reset,
                                                               "error": error}))
        if error is not None and not self._warned:
            self._warned = True
            self.on_notice(f"the cache reset before level {index} failed ({error}): its prompts may be served "
                           "from the cache earlier levels left (a reset fails while requests run: --drain)")
