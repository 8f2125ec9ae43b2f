"""Learning how the server counts a synthetic prompt's tokens, before the load starts.

Prompt length drives prefill time and KV use, so "128 tokens" must mean 128 in the server's own
``usage.prompt_tokens``. Two ways, best first:

1. The server's tokenizer endpoint (``Tokenizer``: vLLM's and SGLang's ``/tokenize``, llama.cpp's).
   Each vocabulary word is counted with its leading space, which is exact for tokenizers that split
   words at their leading space; a whole prompt is counted too, and when the sum of its words
   disagrees with it the words fall back to a fitted mean.
2. Without an endpoint: two small non-streamed requests (``max_tokens`` 1) with prompts of two
   lengths; their ``usage.prompt_tokens`` give tokens per word and the overhead by a straight line.

The overhead the server adds around the text (chat template, BOS) comes from the endpoint where it
can apply the template, else from one generation request. Each generation request is reported
(``sent``) for the record, as the API probe's are. Nothing here fails the run: whatever cannot be
learned leaves the 1.3 tokens-a-word guess, with the reason, within the run's own timeouts.
"""

from __future__ import annotations

import asyncio
import random

import aiohttp
import orjson

from specload.engine.api import CHAT, PATHS, build_body, read_full_response
from specload.engine.datasets import TOKENS_PER_WORD
from specload.engine.words import OPENING, VOCABULARY, TokenModel, synthetic_text

_PARALLEL = 8  # tokenize requests in flight at once


# An answer to a calibration request is a few kB (a token list, a one-token completion); a server
# that sends more (a hostile or broken one streamed 100 MB lines) is not read further.
MAX_ANSWER_BYTES = 1 << 20


async def _post_json(s: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> tuple[int, object]:
    """(status, the JSON answer or None when it is not JSON or larger than ``MAX_ANSWER_BYTES``)."""
    # no redirect followed (the API key would go where it points); no compression asked for
    async with s.post(url, data=orjson.dumps(body), allow_redirects=False,
                      headers={**headers, "Content-Type": "application/json", "Accept-Encoding": "identity"}) as r:
        raw = bytearray()
        async for chunk in r.content.iter_chunked(64 << 10):
            raw += chunk
            if len(raw) > MAX_ANSWER_BYTES:
                return r.status, None
        try:
            return r.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return r.status, None


class Tokenizer:
    """The server's tokenizer endpoint: ``count(text)`` (the text alone, no special tokens) and
    ``count_as_sent(flavour, text)`` (what the server will count for a request with this text:
    template and BOS included; None when the endpoint cannot tell). vLLM and SGLang (also at
    ``/v1/tokenize``) take ``{"model", "prompt", "add_special_tokens"}`` (vLLM also ``messages``) and
    answer ``{"count", "tokens"}``; llama-server takes ``{"content", "add_special"}``, answers
    ``{"tokens": [...]}`` and applies a chat template at ``/apply-template``."""

    def __init__(self, s: aiohttp.ClientSession, base_url: str, model: str | None, headers: dict, kind: str,
                 path: str) -> None:
        self.s, self.base_url, self.model, self.headers = s, base_url, model, headers
        self.kind, self.path = kind, path

    @property
    def where(self) -> str:
        return f"POST {self.path} ({'llama.cpp' if self.kind == 'llama' else 'vLLM/SGLang'})"

    async def _openai(self, body: dict) -> int | None:
        if self.model:
            body["model"] = self.model
        status, obj = await _post_json(self.s, self.base_url + self.path, body, self.headers)
        if status == 200 and isinstance(obj, dict):
            count = obj.get("count")
            if isinstance(count, int) and not isinstance(count, bool):
                return count
            tokens = obj.get("tokens")
            if isinstance(tokens, list):
                return len(tokens)
        return None

    async def _llama(self, content: str, special: bool) -> int | None:
        body = {"content": content, "add_special": special, "parse_special": special}
        status, obj = await _post_json(self.s, self.base_url + "/tokenize", body, self.headers)
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("tokens"), list):
            return len(obj["tokens"])
        return None

    async def count(self, text: str) -> int | None:
        if self.kind == "llama":
            return await self._llama(text, False)
        return await self._openai({"prompt": text, "add_special_tokens": False})

    async def count_as_sent(self, flavour: str, text: str) -> int | None:
        messages = [{"role": "user", "content": text}]
        if self.kind == "llama":
            if flavour != CHAT:
                return await self._llama(text, True)
            status, obj = await _post_json(self.s, self.base_url + "/apply-template", {"messages": messages},
                                           self.headers)
            if status != 200 or not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                return None
            return await self._llama(obj["prompt"], True)
        if flavour == CHAT:  # vLLM applies the chat template; SGLang's endpoint takes no messages
            return await self._openai({"messages": messages, "add_generation_prompt": True})
        return await self._openai({"prompt": text, "add_special_tokens": True})


async def find_tokenizer(s: aiohttp.ClientSession, base_url: str, model: str | None, headers: dict) -> Tokenizer | None:
    """The server's tokenizer endpoint, or None when it has none."""
    probe = OPENING + " the quick brown fox"
    for kind, path in (("openai", "/tokenize"), ("openai", "/v1/tokenize"), ("llama", "/tokenize")):
        tok = Tokenizer(s, base_url, model, headers, kind, path)
        try:
            n = await tok.count(probe)
        except aiohttp.ClientError:
            n = None
        if n:  # 0 for llama.cpp asked the vLLM way: it answers {"tokens": []} to a body without content
            return tok
    return None


async def _prompt_tokens(
    s: aiohttp.ClientSession, base_url: str, flavour: str, model: str | None, headers: dict, text: str, sent: list
) -> int | None:
    """``usage.prompt_tokens`` of one non-streamed request with ``max_tokens`` 1."""
    from specload.config import RequestConfig

    body = build_body(flavour, text, RequestConfig(max_tokens=1), model)
    body["stream"] = False
    body.pop("stream_options", None)
    path = PATHS[flavour]
    try:
        status, obj = await _post_json(s, base_url + path, body, headers)
    except (aiohttp.ClientError, TimeoutError) as e:
        sent.append({"path": path, "error": type(e).__name__})
        if isinstance(e, TimeoutError):
            raise
        return None
    entry: dict = {"path": path, "status": status, "purpose": "prompt calibration"}
    sent.append(entry)
    if status != 200 or obj is None:
        return None
    try:
        _, completion_tokens, prompt_tokens, _ = read_full_response(flavour, obj)
    except ValueError:
        return None
    # what the server counted for it, so its counters can be reconciled with the record
    entry["prompt_tokens"], entry["completion_tokens"] = prompt_tokens, completion_tokens
    return prompt_tokens


async def calibrate(
    base_url: str,
    flavour: str,
    model: str | None,
    *,
    headers: dict | None = None,
    timeout_s: float = 15.0,
    connect_timeout_s: float | None = None,
    budget_s: float | None = None,
    sent: list[dict] | None = None,
    seed: int = 0,
) -> TokenModel:
    """What the server counts for synthetic prompts; generation requests sent go to ``sent``. Each
    call is bounded by ``timeout_s``, the whole by ``budget_s``; the first call the server does not
    answer in time ends it (a server that did not answer one will not answer the next)."""
    sent = [] if sent is None else sent
    hdrs = dict(headers or {})
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
    t0 = asyncio.get_running_loop().time()
    try:
        async with asyncio.timeout(budget_s):
            async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(force_close=True)) as s:
                return await _calibrate(s, base_url, flavour, model, hdrs, sent, random.Random(f"{seed}:calibration"))
    except TimeoutError:
        waited = asyncio.get_running_loop().time() - t0
        return TokenModel(detail=f"calibration stopped after {waited:.0f} s (the server did not answer in time): "
                                 f"lengths are a guess of {TOKENS_PER_WORD} tokens a word")
    except (aiohttp.ClientError, OSError) as e:
        return TokenModel(detail=f"calibration failed ({type(e).__name__}): lengths are a guess of "
                                 f"{TOKENS_PER_WORD} tokens a word")


async def _calibrate(
    s: aiohttp.ClientSession, base_url: str, flavour: str, model: str | None, headers: dict, sent: list,
    rng: random.Random,
) -> TokenModel:
    tok = await find_tokenizer(s, base_url, model, headers)
    if tok is not None:
        where, count = tok.where, tok.count
        sem = asyncio.Semaphore(_PARALLEL)

        async def one(text: str) -> int | None:
            async with sem:
                return await count(text)

        texts = [OPENING] + [" " + w for w in VOCABULARY]
        counts = await asyncio.gather(*(one(t) for t in texts))
        known = [c for c in counts if c is not None and c > 0]
        if len(known) == len(counts):  # every text counted
            opening = known[0]
            words = dict(zip(VOCABULARY, known[1:], strict=True))
            per_word = sum(words.values()) / len(words)
            exact = TokenModel("tokenize", per_word, 0.0, opening, words, where)
            # the whole text as the endpoint counts it: is the sum of the words exact?
            text = synthetic_text(200, exact, rng)
            whole = await count(text)
            predicted = opening + sum(words[w] for w in text.split()[1:])
            if whole is None:
                return TokenModel(detail=f"{where} stopped answering: lengths are a guess")
            model_ = exact
            if whole != predicted:
                n_words = len(text.split()) - 1
                model_ = TokenModel("tokenize", (whole - opening) / max(1, n_words), 0.0, opening, None,
                                    f"{where}; words do not add up ({predicted} vs {whole}): mean per word")
            # what the server adds around the text: from the endpoint when it can apply the template
            # (vLLM, llama.cpp), else from one request's usage (SGLang's endpoint takes no chat)
            try:
                served = await tok.count_as_sent(flavour, text)
            except aiohttp.ClientError:
                served = None
            if served is None:
                served = await _prompt_tokens(s, base_url, flavour, model, headers, text, sent)
            if served is None:
                return TokenModel(model_.method, model_.per_word, 0.0, model_.opening, model_.word_tokens,
                                  model_.detail + "; no usage.prompt_tokens: template overhead unknown")
            return TokenModel(model_.method, model_.per_word, float(served - whole), model_.opening,
                              model_.word_tokens, model_.detail)
    # no tokenizer endpoint: two lengths, a straight line through their usage.prompt_tokens
    guess = TokenModel()
    short, long_ = synthetic_text(48, guess, rng), synthetic_text(240, guess, rng)
    p1 = await _prompt_tokens(s, base_url, flavour, model, headers, short, sent)
    p2 = await _prompt_tokens(s, base_url, flavour, model, headers, long_, sent) if p1 is not None else None
    w1, w2 = len(short.split()), len(long_.split())
    if p1 is None or p2 is None or w2 <= w1 or p2 <= p1:
        return TokenModel(detail="no tokenizer endpoint and no usage.prompt_tokens: lengths are a guess of "
                                 f"{TOKENS_PER_WORD} tokens a word")
    per_word = (p2 - p1) / (w2 - w1)
    # text = opening + (w - 1) words: the opening is counted as one word, the rest is overhead
    overhead = p1 - per_word * w1
    return TokenModel("usage", per_word, overhead, per_word, None,
                      f"no tokenizer endpoint: fitted from usage.prompt_tokens of 2 requests ({p1}, {p2})")
