"""The streaming HTTP client: one call sends one request and returns its ``RequestRecord``.

The hot path: the connection (``engine/http1.py``) hands each socket read's body, with one clock
reading, to the request's sink synchronously; the SSE decoder counts the runs of plain text chunks in
it (``feed_runs``) and classifies the other events (role, finish, usage, errors) by byte search or one
JSON parse. No coroutine wakes until the response has ended; percentiles, summaries and records
happen afterwards, in the sinks. With ``--check-outputs`` or ``reply=True`` (a conversation's turn)
the reads are also kept and the answer read from them once the request has ended.

Errors are data: every failure (HTTP status, refused connection, stall, drop, malformed stream,
cancellation) becomes a record with an ``ErrorKind``; only programming errors raise. A request
cancelled by specload is recorded as cancelled before the cancellation goes on; the request timeout
and the stall watchdog cancel with a message of their own, so their records say why.

``send`` sends a request (its state: one ``_Progress``) on a pooled connection (``_exchange``). A
pooled connection the server had closed (llama-server closes after every stream) is met by sending
again on a new one, timed from that attempt; after ``FRESH_AFTER_STALE`` in a row every request gets
a new connection (a notice and a record event).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import orjson

from specload.clock import SYSTEM_CLOCK, Clock
from specload.config import RequestConfig, TargetConfig
from specload.datatypes import ErrorKind, Noted, RequestRecord, RunEvent
from specload.engine import http1
from specload.engine.answers import MAX_RAW_BYTES, read_output
from specload.engine.api import (
    CHAT,
    COMPLETIONS,
    GENERATE,
    PATHS,
    ChunkReader,
    MalformedChunk,
    build_body,
    error_message,
    read_full_response,
    reply_text,
)
from specload.engine.sse import DONE, MAX_EVENT_BYTES, ONE_PLAIN, EventTemplate, SSEDecoder, SSEEventTooLarge
from specload.neterrors import connect_reason, is_client_side
from specload.secrets import Scrubber
from specload.stats.client_load import loop_late_s

# Stale pooled connections (a server that closes after each stream, as llama-server does) fail
# before any response byte; such a request never reached the server's handler and is sent again.
MAX_STALE_RETRIES = 2

# After this many stale pooled connections in a row (no pooled connection answered in between), the
# server is one that closes after every stream (llama-server, though it announces keep-alive): every
# request then goes on a new connection of its own for the rest of the run, rather than being sent on
# a dead connection, reset and sent again. A server that only closes idle connections now and then
# (a keep-alive timeout) answers on pooled connections in between and keeps its pool: a new connection
# per request costs a connect (a round trip to a remote server) in each TTFT.
FRESH_AFTER_STALE = 3

# Per request, the arrival time of at most this many text chunks is kept (the first ones); beyond it
# chunks are counted, the last arrival kept for E2E, and the record says the detail was capped.
# Four endless fast streams reached 938 MB in 40 s when every offset was kept.
MAX_CHUNK_DETAIL = 16_384

# With reply=True, the answer's bytes of at most this many socket reads are kept for its text (an
# endless stream must not grow memory for a conversation's history)
MAX_REPLY_READS = 4096

TokenCallback = Callable[[int, float], None]

# per flavour: the bytes that start a non-empty text field, and the bytes of an empty one
_FAST_KEYS: dict[str, tuple[bytes, bytes]] = {
    CHAT: (b'"content":"', b'"content":""'),
    COMPLETIONS: (b'"text":"', b'"text":""'),
}


def _noop_tokens(now_ns: int, n: float) -> None:
    return None


def local_timeline(*, workers: bool = False) -> dict:
    """The record header's timeline when every time is read from this machine's CLOCK_MONOTONIC."""
    return {"clock": "CLOCK_MONOTONIC of this machine" + (", shared by the worker processes" if workers else ""),
            "alignment": "none needed"}


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
        # identity: "gzip, deflate" (aiohttp's default) invites a server or proxy to compress the
        # stream; one that compresses anyway is decoded as the pieces come (engine/http1.py)
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                         "Accept-Encoding": "identity"}
        if headers:
            self._headers.update(headers)
        self._clock = clock
        self.stall_timeout_s = target.stall_timeout_s
        self.connect_timeout_s = target.connect_timeout_s
        self.request_timeout_s = target.request_timeout_s
        self._keepalive = target.keepalive
        self._pool: http1.Pool | None = None
        self._head_keep = self._head_close = b""
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
        # requests in flight -> [their task, clock time of their last byte]: the stall watchdog
        self._inflight: dict[int, list] = {}
        self._watchdog: asyncio.Task | None = None
        # stale pooled connections: in a row (reset when a pooled connection answers) and in all; once
        # FRESH_AFTER_STALE in a row, every request goes on a new connection (fresh_only)
        self.stale_in_row = 0
        self.stale_total = 0
        self.fresh_only = False
        # what the switch to new connections tells the run: a record event and a notice (set by the
        # session; a worker process sends them to the main process)
        self.on_event: Callable[[RunEvent], None] = lambda ev: None
        self.on_notice: Callable[[str], None] = lambda text: None

    @property
    def worker_loads(self) -> list[tuple[float | None, float | None, float | None]]:
        """The load workers' CPU and loop lag: none, this process streams the load itself."""
        return []

    @property
    def timeline(self) -> dict:
        return local_timeline()

    async def start(self) -> None:
        if self._pool is None:
            self._pool = pool = http1.Pool(self.url, keepalive=self._keepalive,
                                           connect_timeout_s=self.connect_timeout_s, clock_ns=self._clock.now_ns)
            self._head_keep = pool.head(self._headers, close=False)
            self._head_close = pool.head(self._headers, close=True)
        if self._watchdog is None and self.stall_timeout_s:
            self._watchdog = asyncio.ensure_future(self._watch_stalls())

    async def _watch_stalls(self) -> None:
        """The stall timeout: a request with no byte (of its response, or of its connection being
        made) for the stall timeout, plus one tick, is cancelled as a stall."""
        limit_ns = int(self.stall_timeout_s * 1e9)
        tick = min(1.0, self.stall_timeout_s / 4)
        now_ns = self._clock.now_ns
        while True:
            await asyncio.sleep(tick)
            now = now_ns()
            for state in list(self._inflight.values()):
                if now - state[1] > limit_ns and not state[0].done():
                    state[0].cancel(_STALL)

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    async def __aenter__(self) -> StreamingClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _learn(self, data: bytes) -> EventTemplate | None:
        """The template of this stream's plain text events, from one event that parses as one."""
        key = _FAST_KEYS[self.flavour][0]
        tpl = EventTemplate.around(data, key)
        if tpl is None:
            return None
        probe = ChunkReader(self.flavour)
        try:
            probe.read(orjson.loads(data))
        except (ValueError, TypeError, AttributeError, KeyError, IndexError):  # MalformedChunk too
            return None
        if (
            probe.has_text and probe.tokens is None and probe.error is None and probe.finish_reason is None
            and probe.completion_tokens is None and probe.prompt_tokens is None and probe.timings is None
        ):
            return tpl
        return None

    def _payload(self, prompt: str | list[dict], max_tokens: int | None) -> bytes:
        body = build_body(self.flavour, prompt, self.request, self.model)
        if max_tokens is not None:  # drawn for this request (an output-length distribution)
            if self.flavour == GENERATE:
                body["sampling_params"]["max_new_tokens"] = max_tokens
            else:
                body["max_tokens"] = max_tokens
        return orjson.dumps(body)

    async def send(
        self, prompt: str | list[dict], *, request_id: int = 0, level: int = 0, level_index: int = 0,
        warmup: bool = False, max_tokens: int | None = None, prompt_tokens_requested: int | None = None,
        reply: bool = False,
    ) -> RequestRecord:
        """Send one request (a prompt, or a chat's messages) and return its record; every failure is a
        record with an error kind. A request cancelled by specload is handed to ``on_cancelled`` and the
        cancellation goes on, except the stall watchdog's and the request timeout's own, which come back
        as a stall or a timeout like any other error. ``reply``: the record carries the answer's text."""
        assert self._pool is not None, "StreamingClient.start() not called"
        payload = self._payload(prompt, max_tokens)
        task = asyncio.current_task()
        p = _Progress(self.flavour, request_id, level, level_index, warmup, (prompt_tokens_requested, max_tokens),
                      self._clock.now_ns(), task)
        p.reply = reply
        if reply or self.request.check_outputs:
            p.raw = []
        key = id(p.state)
        self._inflight[key] = p.state
        timer = (asyncio.get_running_loop().call_later(self.request_timeout_s, task.cancel, _TIMEOUT)
                 if self.request_timeout_s and task is not None else None)
        try:
            await self._exchange(p, payload)
            if p.stream and p.error is None and not p.got_done and p.reader.finish_reason is None:
                p.error = (ErrorKind.MALFORMED, "stream ended without [DONE] or a finish_reason")
        except asyncio.CancelledError as e:
            self._inflight.pop(key, None)
            why = e.args[0] if e.args and isinstance(e.args[0], str) else None
            now = self._clock.now_ns()
            p.error = self._cancelled(p, why, now)
            rec = self._finish_record(p, now)
            if why in (_STALL, _TIMEOUT):
                if task is not None:
                    task.uncancel()
                e.__traceback__ = None  # (as for a failure below)
                return rec  # the client's own cancel: a stall or a timeout, handed back like any other error
            self.on_cancelled(rec)
            raise
        except (_FreshReset, http1.ConnectFailed, http1.ConnectTimeout, http1.Dropped, http1.BadResponse,
                UnicodeDecodeError) as e:
            p.error = self._failure(p, e)
            # its traceback holds the frames that hold the future that holds it: a cycle, left to the
            # collector (and frozen with the load's objects), for every failed request
            e.__traceback__ = None
        finally:
            if timer is not None:
                timer.cancel()
        end = self._clock.now_ns()
        self._inflight.pop(key, None)
        return self._finish_record(p, end)

    async def _exchange(self, p: _Progress, payload: bytes) -> None:
        """The request sent and its response read into ``p``. A request that meets a pooled connection
        the server had closed (stale) is sent again on a new one."""
        pool = self._pool
        assert pool is not None
        body = b"%d\r\n\r\n%s" % (len(payload), payload)
        while True:
            fresh = self.fresh_only or p.retries > 0
            conn, reused = await pool.take(fresh)
            fut = conn.request((self._head_close if fresh or not self._keepalive else self._head_keep) + body,
                               functools.partial(self._on_head, p))
            try:
                got = await fut
            except http1.Dropped as e:
                if e.answered or p.retries >= MAX_STALE_RETRIES:
                    raise
                if not reused:
                    # a brand-new connection reset before any response byte is the server's
                    # answer, not a stale pooled connection: sending again would triple the load
                    # (144 requests reached the server for 48 records)
                    raise _FreshReset(e) from None
                p.retries += 1
                # The pool may hold several dead connections (one per finished stream of a
                # server that closes after each): the retry goes on a connection of its own.
                self._stale_connection()
                # the request is sent anew: timed from the attempt the server answers; the time the
                # stale attempts cost is kept apart (retry_ns)
                p.start = self._clock.now_ns()
                continue
            finally:
                if p.keep is not None:
                    p.keep()  # the stream's state, also when a read failed (a drop, a cancel)
                    # and the cycle p -> keep -> its cells -> p broken: the request is freed when it
                    # ends, not by the collector, whose full passes over 10,000 streams held the loop
                    # for 250 ms
                    p.keep = None
                if not fut.done():
                    conn.abort()  # cancelled: the rest of the response is never read
            if reused:
                self.stale_in_row = 0  # a pooled connection answered: the server keeps them
            pool.give_back(conn)
            if got is not None:
                self._read_body(p, got)
            return

    def _on_head(self, p: _Progress, status: int, headers: dict[str, str], now: int) -> http1.Sink | int | None:
        """The response by its status and content type (called by the connection, at the head): an error
        body or a whole JSON answer is collected (its bound), a redirect is not followed (None), a
        stream is read into its sink."""
        p.status = status
        p.state[1] = now
        if status >= 400:
            return 64 << 10  # an error body is read, within bounds
        if 300 <= status < 400:
            # not followed: a redirect to another origin would carry the credentials there
            # (X-Api-Key went with a 307), and a load test must hit the server it names
            where = headers.get("location", "(no Location)")[:200]
            p.error = (ErrorKind.REDIRECT, f"HTTP {status} redirect to {where}: not followed; "
                                           "give specload the final URL")
            return None
        if "event-stream" not in headers.get("content-type", "event-stream"):
            return MAX_EVENT_BYTES + 1  # a plain JSON answer although a stream was asked for
        p.stream = True
        return self._stream_sink(p)

    def _read_body(self, p: _Progress, body: bytes) -> None:
        """A collected body: an error's message, or a non-streamed answer as one text chunk."""
        if p.status is not None and p.status >= 400:
            p.error = (ErrorKind.HTTP, f"HTTP {p.status}: {_body_message(body)}")
            return
        now = self._clock.now_ns()
        try:
            if len(body) > MAX_EVENT_BYTES:
                raise SSEEventTooLarge(f"a non-streamed answer over {MAX_EVENT_BYTES >> 20} MiB")
            has_text, ct, pt, fr = read_full_response(self.flavour, orjson.loads(body))
            if p.raw is not None:  # its answer is read as a stream of one event would be
                p.raw.append(b"data: " + body.replace(b"\n", b" ") + b"\n\n")
        except orjson.JSONDecodeError:
            p.error = (ErrorKind.MALFORMED, f"non-SSE response is not JSON: {body[:200]!r}")
        except MalformedChunk as e:
            p.error = (ErrorKind.MALFORMED, str(e))
        except SSEEventTooLarge as e:
            p.error = (ErrorKind.OVERSIZE, str(e))
        else:
            if has_text:
                p.offsets.append(now - p.start)
                p.ktoks.append(ct or 1)
            reader = p.reader
            reader.completion_tokens, reader.prompt_tokens, reader.finish_reason = ct, pt, fr
            p.got_done = True

    def _stream_sink(self, p: _Progress) -> http1.Sink:
        """The SSE stream's sink: called by the connection with each socket read's bytes and its clock
        reading (b"" at the end), it returns True to stop reading (an error). The hot path: its state
        lives in the closure's cells while it runs (an attribute per chunk would cost on every token)
        and goes back to ``p`` through ``p.keep`` when the exchange ends, also when it failed."""
        on_tokens = self.on_tokens
        start, state, offsets, ktoks, reader = p.start, p.state, p.offsets, p.ktoks, p.reader
        raw = p.raw  # the reads kept for the answer (reply, --check-outputs), else None
        raw_kept = 0
        per_chunk_known = True
        streamed = 0.0
        error: tuple[ErrorKind, str] | None = None
        got_done = False
        extra_chunks = 0  # text chunks beyond MAX_CHUNK_DETAIL: counted, their times not kept
        extra_tokens = 0
        last_offset = 0
        fast = _FAST_KEYS.get(self.flavour)
        text_key, empty_text = (fast[0], fast[1]) if fast is not None else (None, b"")
        decoder = SSEDecoder(learn=self._learn if text_key is not None else None)
        feed = decoder.feed_runs
        read_event = reader.read
        loads = orjson.loads

        def keep() -> None:
            p.per_chunk_known, p.streamed, p.error, p.got_done = per_chunk_known, streamed, error, got_done
            p.extra_chunks, p.extra_tokens, p.last_offset = extra_chunks, extra_tokens, last_offset

        p.keep = keep

        def sink(data: bytes, now: int) -> bool:
            nonlocal raw, raw_kept, per_chunk_known, streamed, error, got_done, extra_chunks, extra_tokens
            nonlocal last_offset
            state[1] = now
            if raw is not None:
                raw.append(data)
                raw_kept += len(data)
                if raw_kept >= MAX_RAW_BYTES or len(raw) >= MAX_REPLY_READS:
                    raw, p.raw_cut = None, True
            try:
                events = feed(data) if data else decoder.finish()
            except SSEEventTooLarge as e:
                error = (ErrorKind.OVERSIZE, str(e))
                return True
            if events is ONE_PLAIN and len(offsets) < MAX_CHUNK_DETAIL:
                # the usual read of a server writing one token per event: one plain text chunk
                offsets.append(now - start)
                per_chunk_known = False
                add = self._tokens_per_chunk
                streamed += add
                on_tokens(now, add)
                return False
            batch = 0
            unknown = 0
            for name, ev in events:
                if isinstance(ev, int):
                    # a run of plain text events the decoder counted (feed_runs)
                    if ev == 1:
                        offsets.append(now - start)
                    else:
                        offsets.extend([now - start] * ev)
                    per_chunk_known = False
                    unknown += ev
                    continue
                # Fast path: a compact plain delta chunk (no usage, no finish, no error)
                # is classified by byte search, without a JSON parse. Servers serialise
                # compactly (vLLM, SGLang, llama.cpp, TGI); anything else is parsed.
                if (
                    text_key is not None
                    and name is None
                    and ev.find(b'"finish_reason":null') >= 0
                    and ev.find(b'"usage":{') < 0
                    and ev.find(b'"error"') < 0
                    and ev.find(b"reasoning") < 0
                ):
                    if ev.find(text_key) >= 0 and ev.find(empty_text) < 0:
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
                except MalformedChunk as e:  # valid JSON of the wrong shape
                    error = (ErrorKind.MALFORMED, str(e))
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
                if len(offsets) > MAX_CHUNK_DETAIL:
                    # bounded detail: keep the first chunks' times, count the rest
                    last_offset = offsets[-1]
                    extra_chunks += len(offsets) - MAX_CHUNK_DETAIL
                    del offsets[MAX_CHUNK_DETAIL:]
                    if len(ktoks) > MAX_CHUNK_DETAIL:
                        extra_tokens += sum(ktoks[MAX_CHUNK_DETAIL:])
                        del ktoks[MAX_CHUNK_DETAIL:]
            return error is not None

        return sink

    def _cancelled(self, p: _Progress, why: str | None, now: int) -> tuple[ErrorKind, str]:
        """The error of a request cancelled with reason ``why`` (the cancel's message)."""
        if why == _STALL:
            return (ErrorKind.STALL, f"{'no response' if p.status is None else 'no data'} for "
                                     f"{self.stall_timeout_s:g} s")
        if why == _TIMEOUT:
            return (ErrorKind.TIMEOUT, f"request took over {self.request_timeout_s:g} s")
        silent_s = (now - p.state[1]) / 1e9
        if why is not None and silent_s >= 1.0:
            # stopped by specload for a reason of the server's (down, crashed) while the stream had
            # been silent: a stall (a SIGSTOPped server), not a request specload chose to drop
            return (ErrorKind.STALL, f"no data for {silent_s:.1f} s; cancelled: {why}")
        return (ErrorKind.CANCELLED, "cancelled by specload" + (f": {why}" if why else ""))

    def _failure(self, p: _Progress, e: BaseException) -> tuple[ErrorKind, str]:
        """The error of a request that failed with ``e`` (subclasses first: BadEncoding is a BadResponse)."""
        if isinstance(e, _FreshReset):
            return (ErrorKind.DISCONNECT, f"connection reset before any response byte (a new connection, "
                                          f"not retried): {_oneline(e.cause)}")
        if isinstance(e, http1.ConnectTimeout):
            late = loop_late_s()
            if late >= self.connect_timeout_s / 4:
                # the loop that should have seen the connection made was seconds late: specload's
                # own backlog (too many streams for its CPU), not the server's
                return (ErrorKind.CLIENT, f"connect timeout while specload's own event loop was {late:.1f} s "
                                          "late: specload was the limit, not the server")
            return (ErrorKind.CONNECT, f"connect timeout: {e}")
        if isinstance(e, http1.ConnectFailed):
            if is_client_side(e.os_error):
                # specload's own limit (file descriptors): not the server's fault, never "server down"
                return (ErrorKind.CLIENT, connect_reason(e.os_error))
            if p.retries:
                # the first attempt was dropped before any response byte and the retry was refused:
                # not a stale connection but a server that died while this request was in it
                return (ErrorKind.DISCONNECT, f"connection dropped before the response; reconnect: "
                                              f"{connect_reason(e.os_error)}")
            return (ErrorKind.CONNECT, connect_reason(e.os_error))
        if isinstance(e, http1.BadEncoding):  # compressed anyway, and not as it says
            return (ErrorKind.MALFORMED, f"the stream does not decode as its Content-Encoding says: {e}")
        if isinstance(e, http1.BadResponse):
            return (ErrorKind.MALFORMED, f"bad HTTP response: {e}")
        if isinstance(e, UnicodeDecodeError):
            return (ErrorKind.MALFORMED, _oneline(e))
        return (ErrorKind.DISCONNECT, str(e))  # http1.Dropped

    def _finish_record(self, p: _Progress, end: int) -> RequestRecord:
        """The record of a request that ended at ``end``; settles the live token counter with the
        server's count and learns the tokens per chunk from a complete answer."""
        offsets, ktoks, reader, per_chunk_known, error = p.offsets, p.ktoks, p.reader, p.per_chunk_known, p.error
        kept = len(offsets)
        chunks = kept + p.extra_chunks  # every text chunk that came, also those past the detail kept
        if reader.completion_tokens is not None:
            out_tokens, estimated = reader.completion_tokens, False
        else:
            out_tokens, estimated = (sum(ktoks) + p.extra_tokens if per_chunk_known and ktoks else chunks), True
        if out_tokens != p.streamed and chunks:
            # the live counter estimated; settle it with the server's count
            self.on_tokens(end, out_tokens - p.streamed)
        if error is None and not estimated and chunks > 1 and not per_chunk_known:
            self._ratio_tokens += out_tokens
            self._ratio_chunks += chunks
            self._tokens_per_chunk = self._ratio_tokens / self._ratio_chunks
        kind, detail = (error if error is not None else (None, None))
        if detail is not None and self._scrub:
            detail = self._scrub(detail)
        e2e = offsets[-1] if kept else None
        if p.extra_chunks:  # the detail was capped: the last chunk's time is kept apart
            e2e = max(p.last_offset, e2e or 0)
        output = (read_output(self.flavour, p.raw, capped=p.raw_cut)
                  if self.request.check_outputs and p.raw is not None and error is None else None)
        return RequestRecord(
            request_id=p.request_id,
            level=p.level,
            level_index=p.level_index,
            warmup=p.warmup,
            start_ns=p.start,
            end_ns=end,
            ttft_ns=offsets[0] if kept else None,
            e2e_ns=e2e,
            output_tokens=out_tokens,
            tokens_estimated=estimated,
            prompt_tokens=reader.prompt_tokens,
            chunks=chunks,
            chunk_offsets_ns=tuple(offsets),
            chunk_tokens=tuple(ktoks) if per_chunk_known and len(ktoks) == kept and kept else None,
            error_kind=kind,
            error_detail=detail,
            http_status=p.status,
            retries=p.retries,
            retry_ns=p.start - p.first,
            spec_verify_ct=reader.spec_verify_ct,
            spec_accepted=reader.spec_accepted,
            spec_drafted=reader.spec_drafted,
            server_timings=reader.timings,
            finish_reason=reader.finish_reason,
            chunk_detail_capped=bool(p.extra_chunks),
            prompt_tokens_requested=p.asked[0],
            max_tokens=p.asked[1],
            prompt_tokens_cached=reader.cached_tokens,
            reply=reply_text(self.flavour, b"".join(p.raw)) if p.reply and p.raw is not None else None,
            output=output,
        )

    def _stale_connection(self) -> None:
        """A pooled connection the server had closed: counted; the third in a row turns the run over to
        a new connection per request, said once (a record event and a notice)."""
        self.stale_in_row += 1
        self.stale_total += 1
        if self.fresh_only or self.stale_in_row < FRESH_AFTER_STALE:
            return
        self.fresh_only = True
        self.on_event(Noted(self._clock.now_ns(), "fresh_connections", {"stale_closes": self.stale_in_row}))
        self.on_notice(f"the server closed {self.stale_in_row} pooled connections in a row under requests (it "
                       "closes after each stream, as llama-server does): every request now goes on a new "
                       "connection of its own")


def _oneline(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}".replace("\n", " ")[:300]


def _body_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip().replace("\n", " ")[:300] or "(empty body)"
    return error_message(obj)[:300]


class _Progress:
    """One request as it goes, what its record is made of: the reads add chunk times and tokens, a
    failure sets the error. ``state`` is the stall watchdog's view: [the request's task, the clock
    time of its last byte]."""

    __slots__ = ("request_id", "level", "level_index", "warmup", "asked", "first", "start", "state", "offsets",
                 "ktoks", "per_chunk_known", "streamed", "reader", "retries", "status", "error", "got_done",
                 "extra_chunks", "extra_tokens", "last_offset", "raw", "raw_cut", "reply", "stream", "keep")

    def __init__(self, flavour: str, request_id: int, level: int, level_index: int, warmup: bool,
                 asked: tuple[int | None, int | None], start: int, task: asyncio.Task | None) -> None:
        self.request_id, self.level, self.level_index, self.warmup, self.asked = (
            request_id, level, level_index, warmup, asked)
        self.first = start  # the first attempt's send; ``start`` moves to a retry's (retry_ns between)
        self.start = start
        self.state: list = [task, start]
        self.offsets: list[int] = []  # arrival of each text chunk kept, ns after start
        self.ktoks: list[int] = []  # tokens of each chunk, when every chunk so far said
        self.per_chunk_known = True
        self.streamed = 0.0  # tokens handed to the live counter so far (estimated per chunk)
        self.reader = ChunkReader(flavour)
        self.retries = 0
        self.status: int | None = None
        self.error: tuple[ErrorKind, str] | None = None
        self.got_done = False
        self.extra_chunks = 0  # text chunks beyond MAX_CHUNK_DETAIL: counted, their times not kept
        self.extra_tokens = 0
        self.last_offset = 0  # the last chunk's time when the detail was capped
        # the stream's reads, for the answer's text (reply=True) or --check-outputs (engine/answers.py)
        self.raw: list[bytes] | None = None
        self.raw_cut = False  # they passed MAX_RAW_BYTES or MAX_REPLY_READS: the answer is the output's start
        self.reply = False  # the record carries the answer's text
        self.stream = False  # the answer is an event stream
        self.keep: Callable[[], None] | None = None  # the stream's state into these fields (_stream_sink)


_STALL = "stall: no data for the stall timeout"  # the cancel message of the stall watchdog
_TIMEOUT = "timeout: the request timeout"  # the cancel message of a request's timer


class _FreshReset(Exception):
    """A new connection reset before any response byte: the server's doing, not a stale pool."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause
