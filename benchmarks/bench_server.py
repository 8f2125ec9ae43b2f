"""A max-speed OpenAI-compatible streaming server for the client ceiling benchmark, and nothing else.

    python benchmarks/bench_server.py [--port 0] [--procs 1] [--burst 32] [--itl-ms 100:200 --ttft-ms 0]

Why not the built-in simulator: ``specload sim --max-speed`` is a real aiohttp application with a
scheduler, per-token JSON splicing and a request log; at the ceiling it used a whole core for the
lean reference client, so the benchmark measured the simulator, not the clients. This server does
the least a streaming server can do per token: every response is rendered once per shape (API,
max_tokens, usage options) and cached as bytes, already cut into HTTP chunks of ``--burst`` SSE
events, and a request is served by writing those pre-rendered chunks, one per event-loop turn so
that concurrent streams interleave as they do on a real server. The HTTP layer is a bare
``asyncio.Protocol`` (uvloop) that understands exactly what the two clients send: one request at a
time per connection (keep-alive or ``Connection: close``), ``Content-Length`` bodies.

``--itl-ms A:B`` paces the streams as a real server does: after ``--ttft-ms``, one chunk every A to
B ms (drawn once per request, uniform), so many slow streams (C=10000 at 100-200 ms per token) can
be held open; all of them share one timer heap (one callback per tick, not one timer per stream),
so the server's cost per token stays a write.

``--procs N`` runs N processes on one port with SO_REUSEPORT (the kernel spreads connections),
should one process not be enough; ``benchmarks/ceiling.py`` measures each one's CPU share.

The event bytes are the same as the simulator's completions/chat chunks (compact JSON, one token per
event, a finish chunk, a usage chunk when ``stream_options.include_usage`` is set, ``[DONE]``), so
specload's classification runs exactly as against vLLM or SGLang. Only 127.0.0.1 is served.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import os
import random
import signal
import socket
import sys

import orjson

WORDS = [b" the", b" quick", b" brown", b" fox", b" jumps", b" over", b" lazy", b" dog", b" and", b" runs"]
MODEL = "sim-llm"
_MODELS = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]})


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (chunked transfer encoding)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _events(kind: str, max_tokens: int, usage: bool, continuous: bool) -> list[bytes]:
    """The SSE events of one response, as the simulator writes them (compact JSON)."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    head = b'data: {"id":"cmpl-bench","object":"%s","created":1,"model":"%s","choices":[' % (
        obj.encode(), MODEL.encode())
    out: list[bytes] = []
    if kind == "chat":
        out.append(head + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                          b'"finish_reason":null}]}\n\n')
    for i in range(max_tokens):
        w = WORDS[i % len(WORDS)]
        if kind == "chat":
            choice = b'{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}' % w
        else:
            choice = b'{"index":0,"text":"%s","logprobs":null,"finish_reason":null,"stop_reason":null}' % w
        tail = b"]}\n\n"
        if continuous:
            tail = b'],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (i + 1, i + 9)
        out.append(head + choice + tail)
    if kind == "chat":
        fin = b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}'
    else:
        fin = b'{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}'
    out.append(head + fin + b"]}\n\n")
    if usage:
        out.append(head + b'],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\n'
                   % (max_tokens, max_tokens + 8))
    out.append(b"data: [DONE]\n\n")
    return out


class Responses:
    """Pre-rendered streamed responses, one list of HTTP chunks per request shape."""

    def __init__(self, burst: int) -> None:
        self.burst = burst
        self._cache: dict[tuple, list[bytes]] = {}

    def stream(self, kind: str, max_tokens: int, usage: bool, continuous: bool, close: bool) -> list[bytes]:
        key = (kind, max_tokens, usage, continuous, close)
        parts = self._cache.get(key)
        if parts is None:
            evs = _events(kind, max_tokens, usage, continuous)
            head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                    b"Transfer-Encoding: chunked\r\n" + (b"Connection: close\r\n" if close else b"") + b"\r\n")
            b = self.burst
            parts = [_chunk(b"".join(evs[i:i + b])) for i in range(0, len(evs), b)]
            parts[0] = head + parts[0]
            parts[-1] += b"0\r\n\r\n"
            self._cache[key] = parts
        return parts


def _plain(status: bytes, body: bytes, ctype: bytes = b"application/json", close: bool = False) -> bytes:
    return (b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s"
            % (status, ctype, len(body), b"Connection: close\r\n" if close else b"", body))


class Pacer:
    """Paced streams: every stream's next write on one heap of due times, served by one timer."""

    TICK_S = 0.001  # writes due within a tick go out together

    def __init__(self, itl_s: tuple[float, float], ttft_s: float) -> None:
        self.itl_s, self.ttft_s = itl_s, ttft_s
        self.heap: list[tuple[float, int, BenchProtocol, list[bytes], int, float, bool]] = []
        self.seq = 0
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due = 0.0  # when it fires (uvloop's handles have no when())
        self.rng = random.Random(0)

    def add(self, proto: BenchProtocol, parts: list[bytes], close: bool) -> None:
        loop = asyncio.get_running_loop()
        itl = self.rng.uniform(*self.itl_s)
        self._push(loop.time() + self.ttft_s, proto, parts, 0, itl, close)

    def _push(self, due: float, proto: BenchProtocol, parts: list[bytes], i: int, itl: float, close: bool) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, proto, parts, i, itl, close))
        if self.timer is None or due < self.timer_due:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_due = asyncio.get_running_loop().call_at(due, self._tick), due

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer = None
        heap = self.heap
        now = loop.time() + self.TICK_S
        while heap and heap[0][0] <= now:
            due, _, proto, parts, i, itl, close = heapq.heappop(heap)
            t = proto.transport
            if t is None:
                continue
            t.write(parts[i])
            if i + 1 < len(parts):
                self.seq += 1
                heapq.heappush(heap, (due + itl, self.seq, proto, parts, i + 1, itl, close))
            else:
                proto.done(close)
        if heap:
            self.timer, self.timer_due = loop.call_at(heap[0][0], self._tick), heap[0][0]


class BenchProtocol(asyncio.Protocol):
    def __init__(self, responses: Responses, pacer: Pacer | None = None) -> None:
        self.responses = responses
        self.pacer = pacer
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False  # one request at a time per connection
        self.can_write: asyncio.Event | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.can_write = asyncio.Event()
        self.can_write.set()

    def pause_writing(self) -> None:
        assert self.can_write is not None
        self.can_write.clear()

    def resume_writing(self) -> None:
        assert self.can_write is not None
        self.can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.can_write is not None:
            self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1")
        lines = head.split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        if len(self.buf) < end + 4 + length:
            return
        body = self.buf[end + 4:end + 4 + length]
        self.buf = self.buf[end + 4 + length:]
        self.busy = True
        asyncio.ensure_future(self._serve(method, path, body, close))

    async def _serve(self, method: str, path: str, body: bytes, close: bool) -> None:
        t = self.transport
        if t is None:
            return
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            req = orjson.loads(body)
            so = req.get("stream_options") or {}
            parts = self.responses.stream(
                "chat" if "chat" in path else "completions", int(req.get("max_tokens") or 16),
                bool(so.get("include_usage")), bool(so.get("continuous_usage_stats")), close)
            if self.pacer is not None:
                self.pacer.add(self, parts, close)
                return
            can_write = self.can_write
            assert can_write is not None
            for p in parts:
                if self.transport is None:
                    return
                self.transport.write(p)
                if not can_write.is_set():
                    await can_write.wait()
                else:
                    await asyncio.sleep(0)  # interleave the streams, as a real server does
        elif method == "GET" and path == "/v1/models":
            t.write(_plain(b"200 OK", _MODELS, close=close))
        elif method == "GET" and path == "/health":
            t.write(_plain(b"200 OK", b"", close=close))
        else:
            t.write(_plain(b"404 Not Found", b'{"error":"not found"}', close=close))
        self.done(close)

    def done(self, close: bool) -> None:
        """The response is written: the connection closes or serves its next request."""
        if self.transport is None:
            return
        if close:
            self.transport.close()
            return
        self.busy = False
        if self.buf:
            self._next()


async def serve(sock: socket.socket, burst: int, itl_s: tuple[float, float] | None = None, ttft_s: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    responses = Responses(burst)
    pacer = Pacer(itl_s, ttft_s) if itl_s is not None else None
    server = await loop.create_server(lambda: BenchProtocol(responses, pacer), sock=sock)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def _socket(port: int, backlog: int = 1024) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(backlog)
    s.setblocking(False)
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--procs", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT)")
    ap.add_argument("--burst", type=int, default=32, help="SSE events per HTTP chunk (one write each)")
    ap.add_argument("--itl-ms", default=None, metavar="A[:B]",
                    help="pace the streams: one chunk every A to B ms (drawn per request)")
    ap.add_argument("--ttft-ms", type=float, default=0.0, help="with --itl-ms: before the first chunk")
    ap.add_argument("--backlog", type=int, default=1024, help="the listening socket's backlog")
    a = ap.parse_args()
    itl = None
    if a.itl_ms is not None:
        lo, _, hi = a.itl_ms.partition(":")
        itl = (float(lo) / 1e3, float(hi or lo) / 1e3)
    ttft = a.ttft_ms / 1e3
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    first = _socket(a.port, a.backlog)
    port = first.getsockname()[1]
    children: list[int] = []
    for _ in range(a.procs - 1):
        pid = os.fork()
        if pid == 0:
            sock = _socket(port, a.backlog)
            first.close()
            asyncio.run(serve(sock, a.burst, itl, ttft))
            os._exit(0)
        children.append(pid)
    # one line the benchmark reads: the URL and the pids of every serving process
    print(f"listening on http://127.0.0.1:{port} pids {' '.join(str(p) for p in [os.getpid(), *children])}",
          flush=True)
    try:
        asyncio.run(serve(first, a.burst, itl, ttft))
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


if __name__ == "__main__":
    sys.exit(main())
