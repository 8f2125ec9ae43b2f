"""The streaming HTTP client: one call sends one request and returns its ``RequestRecord``.

This is the hot path. Per socket read it takes one clock reading; per SSE event it does one JSON
parse and a few dict look-ups; per text chunk one list append and one counter call. Everything else
(percentiles, summaries, records) happens after the request ends, in the sinks.

Errors are data: every failure (HTTP status, refused connection, stall, drop, malformed stream,
cancellation) becomes a record with an ``ErrorKind``; only programming errors raise. A request
cancelled by specload itself is recorded as cancelled before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import orjson

from specload.clock import SYSTEM_CLOCK, Clock
from specload.config import RequestConfig, TargetConfig
from specload.engine.api import (
    CHAT,
    COMPLETIONS,
    PATHS,
    ChunkReader,
    build_body,
    error_message,
    read_full_response,
)
from specload.engine.sse import DONE, SSEDecoder
from specload.records import ErrorKind, RequestRecord
from specload.secrets import Scrubber

# Stale pooled connections (a server that closes after each stream, as llama-server does) fail
# before any response byte; such a request never reached the server's handler and is sent again.
MAX_STALE_RETRIES = 2

TokenCallback = Callable[[int, float], None]

# per flavour: the bytes that start a non-empty text field, and the bytes of an empty one
_FAST_KEYS: dict[str, tuple[bytes, bytes]] = {
    CHAT: (b'"content":"', b'"content":""'),
    COMPLETIONS: (b'"text":"', b'"text":""'),
}


def _noop_tokens(now_ns: int, n: int) -> None:
    return None


class StreamingClient:
    def __init__(
        self,
        base_url: str,
        flavour: str,
        *,
        model: str | None = None,
        target: TargetConfig | None = None,
        request: RequestConfig | None = None,
        headers: dict[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_tokens: TokenCallback | None = None,
        on_cancelled: Callable[[RequestRecord], None] | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.flavour = flavour
        self.model = model
        target = target or TargetConfig()
        self.request = request or RequestConfig()
        self.url = self.base_url + PATHS[flavour]
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if headers:
            self._headers.update(headers)
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(
            total=target.request_timeout_s or None,
            sock_connect=target.connect_timeout_s,
            sock_read=target.stall_timeout_s or None,
        )
        self.stall_timeout_s = target.stall_timeout_s
        self.request_timeout_s = target.request_timeout_s
        self._keepalive = target.keepalive
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None
        # tokens per chunk over the finished requests (speculative decoding: often 2-4), for the
        # live counter of chunks whose size the server does not tell
        self._tokens_per_chunk = 1.0
        self._ratio_tokens = 0
        self._ratio_chunks = 0
        self.on_tokens: TokenCallback = on_tokens or _noop_tokens
        # a cancelled request cannot return its record, so it is handed here before cancelling on
        self.on_cancelled: Callable[[RequestRecord], None] = on_cancelled or (lambda rec: None)
        # a server error may echo a request header back: error details are scrubbed like log lines
        self._scrub = scrubber or Scrubber()

    async def start(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, force_close=not self._keepalive, enable_cleanup_closed=False)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, auto_decompress=False, skip_auto_headers=("User-Agent",)
            )

    async def _fresh(self) -> aiohttp.ClientSession:
        """A session that opens a new connection per request, for retries after a stale one."""
        if self._fresh_session is None:
            self._fresh_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                timeout=self._timeout, auto_decompress=False, skip_auto_headers=("User-Agent",),
            )
        return self._fresh_session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._fresh_session is not None:
            await self._fresh_session.close()
            self._fresh_session = None

    async def __aenter__(self) -> StreamingClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(
        self, prompt: str, *, request_id: int = 0, level: int = 0, level_index: int = 0, warmup: bool = False
    ) -> RequestRecord:
        assert self._session is not None, "StreamingClient.start() not called"
        payload = orjson.dumps(build_body(self.flavour, prompt, self.request, self.model))
        clock_ns = self._clock.now_ns
        on_tokens = self.on_tokens
        offsets: list[int] = []
        ktoks: list[int] = []
        per_chunk_known = True
        streamed = 0.0
        reader = ChunkReader(self.flavour)
        retries = 0
        status: int | None = None
        error: tuple[ErrorKind, str] | None = None
        got_done = False
        start = clock_ns()
        try:
            session = self._session
            while True:
                try:
                    resp_cm = session.post(self.url, data=payload, headers=self._headers)
                    resp = await resp_cm.__aenter__()
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                    if isinstance(e, aiohttp.ClientConnectorError) or retries >= MAX_STALE_RETRIES:
                        raise
                    retries += 1
                    # The pool may hold several dead connections (one per finished stream of a
                    # server that closes after each): the retry goes on a connection of its own.
                    session = await self._fresh()
                    start = clock_ns()  # the request is sent anew: time it from the retry
                    continue
                break
            try:
                status = resp.status
                if status >= 400:
                    body = await resp.read()
                    error = (ErrorKind.HTTP, f"HTTP {status}: {_body_message(body)}")
                elif "event-stream" not in resp.headers.get("Content-Type", "event-stream"):
                    # a plain JSON answer although a stream was asked for: read it whole
                    body = await resp.read()
                    now = clock_ns()
                    try:
                        has_text, ct, pt, fr = read_full_response(self.flavour, orjson.loads(body))
                    except orjson.JSONDecodeError:
                        error = (ErrorKind.MALFORMED, f"non-SSE response is not JSON: {body[:200]!r}")
                    else:
                        if has_text:
                            offsets.append(now - start)
                            ktoks.append(ct or 1)
                        reader.completion_tokens, reader.prompt_tokens, reader.finish_reason = ct, pt, fr
                        got_done = True
                else:
                    decoder = SSEDecoder()
                    feed = decoder.feed
                    read_event = reader.read
                    loads = orjson.loads
                    content = resp.content
                    text_key, empty_text = _FAST_KEYS.get(self.flavour, (None, None))
                    while True:
                        data = await content.readany()
                        if not data:
                            events = decoder.finish()
                            now = clock_ns()
                        else:
                            now = clock_ns()
                            events = feed(data)
                        batch = 0
                        unknown = 0
                        for name, ev in events:
                            # Fast path: a compact plain delta chunk (no usage, no finish, no error)
                            # is classified by byte search, without a JSON parse. Servers serialise
                            # compactly (vLLM, SGLang, llama.cpp, TGI); anything else is parsed.
                            if (
                                text_key is not None
                                and name is None
                                and b'"finish_reason":null' in ev
                                and b'"usage":{' not in ev
                                and b'"error"' not in ev
                                and b"reasoning" not in ev
                            ):
                                if text_key in ev and empty_text not in ev:
                                    offsets.append(now - start)
                                    per_chunk_known = False
                                    unknown += 1
                                continue
                            if ev == DONE:
                                got_done = True
                                continue
                            if name == "error":
                                error = (ErrorKind.STREAM_ERROR, ev.decode("utf-8", "replace")[:500])
                                break
                            try:
                                read_event(loads(ev))
                            except orjson.JSONDecodeError:
                                error = (ErrorKind.MALFORMED, f"event is not JSON: {ev[:200]!r}")
                                break
                            if reader.error is not None:
                                error = (ErrorKind.STREAM_ERROR, reader.error[:500])
                                break
                            if reader.has_text:
                                offsets.append(now - start)
                                k = reader.tokens
                                if k is None:
                                    per_chunk_known = False
                                    unknown += 1
                                else:
                                    ktoks.append(k)
                                    batch += k
                        if batch or unknown:
                            # chunks of unknown size count as the recent tokens-per-chunk, so the
                            # live rate is right under speculative decoding, not settled in a lump
                            add = batch + unknown * self._tokens_per_chunk
                            streamed += add
                            on_tokens(now, add)
                        if error is not None or not data:
                            break
                    if error is None and not got_done and reader.finish_reason is None:
                        error = (ErrorKind.MALFORMED, "stream ended without [DONE] or a finish_reason")
            finally:
                await resp_cm.__aexit__(None, None, None)
        except asyncio.CancelledError:
            rec = self._record(
                request_id, level, level_index, warmup, start, clock_ns(), offsets, ktoks, per_chunk_known,
                reader, retries, status, (ErrorKind.CANCELLED, "cancelled by specload"), streamed,
            )
            self.on_cancelled(rec)
            raise
        except aiohttp.ConnectionTimeoutError as e:
            error = (ErrorKind.CONNECT, f"connect timeout: {e}")
        except aiohttp.SocketTimeoutError:
            where = "no response" if status is None else "no data"
            error = (ErrorKind.STALL, f"{where} for {self.stall_timeout_s:g} s")
        except aiohttp.ClientConnectorError as e:
            if retries:
                # the first attempt was dropped before any response byte and the retry was refused:
                # not a stale connection but a server that died while this request was in it
                error = (ErrorKind.DISCONNECT, f"connection dropped before the response; reconnect: {_oneline(e)}")
            else:
                error = (ErrorKind.CONNECT, _oneline(e))
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            error = (ErrorKind.DISCONNECT, _oneline(e))
        except aiohttp.ClientResponseError as e:
            error = (ErrorKind.MALFORMED, f"bad HTTP response: {_oneline(e)}")
        except TimeoutError:
            error = (ErrorKind.TIMEOUT, f"request took over {self.request_timeout_s:g} s")
        except aiohttp.ClientError as e:
            error = (ErrorKind.DISCONNECT, _oneline(e))
        except UnicodeDecodeError as e:
            error = (ErrorKind.MALFORMED, _oneline(e))
        end = clock_ns()
        return self._record(
            request_id, level, level_index, warmup, start, end, offsets, ktoks, per_chunk_known,
            reader, retries, status, error, streamed,
        )

    def _record(
        self,
        request_id: int,
        level: int,
        level_index: int,
        warmup: bool,
        start: int,
        end: int,
        offsets: list[int],
        ktoks: list[int],
        per_chunk_known: bool,
        reader: ChunkReader,
        retries: int,
        status: int | None,
        error: tuple[ErrorKind, str] | None,
        streamed: float,
    ) -> RequestRecord:
        chunks = len(offsets)
        if reader.completion_tokens is not None:
            out_tokens, estimated = reader.completion_tokens, False
        else:
            out_tokens, estimated = (sum(ktoks) if per_chunk_known and ktoks else chunks), True
        if out_tokens != streamed and chunks:
            # the live counter estimated; settle it with the server's count
            self.on_tokens(end, out_tokens - streamed)
        if error is None and not estimated and chunks > 1 and not per_chunk_known:
            self._ratio_tokens += out_tokens
            self._ratio_chunks += chunks
            self._tokens_per_chunk = self._ratio_tokens / self._ratio_chunks
        kind, detail = (error if error is not None else (None, None))
        if detail is not None and self._scrub:
            detail = self._scrub(detail)
        return RequestRecord(
            request_id=request_id,
            level=level,
            level_index=level_index,
            warmup=warmup,
            start_ns=start,
            end_ns=end,
            ttft_ns=offsets[0] if chunks else None,
            e2e_ns=offsets[-1] if chunks else None,
            output_tokens=out_tokens,
            tokens_estimated=estimated,
            prompt_tokens=reader.prompt_tokens,
            chunks=chunks,
            chunk_offsets_ns=tuple(offsets),
            chunk_tokens=tuple(ktoks) if per_chunk_known and len(ktoks) == chunks and chunks else None,
            error_kind=kind,
            error_detail=detail,
            http_status=status,
            retries=retries,
            spec_verify_ct=reader.spec_verify_ct,
            server_timings=reader.timings,
            finish_reason=reader.finish_reason,
        )


def _oneline(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}".replace("\n", " ")[:300]


def _body_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip().replace("\n", " ")[:300] or "(empty body)"
    return error_message(obj)[:300]
