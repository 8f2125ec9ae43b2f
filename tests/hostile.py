"""A hostile OpenAI-compatible server for tests: real HTTP on 127.0.0.1 port 0, misbehaving on demand.

The built-in simulator plays a well-behaved server with realistic faults; this one plays a broken
or malicious server or proxy, so that every way a server can answer wrongly is tested against the
real client over a real socket. Its behaviour is switched by setting ``mode`` (and ``params``)
between requests:

=================  ==============================================================================
``ok``             a normal stream: role chunk, ``n`` text chunks, finish chunk, usage, ``[DONE]``
``events``         ``params["events"]``: raw payloads sent as ``data: <payload>`` events (any bytes,
                   so JSON of the wrong shape, ``NaN`` and 400-digit integers go out verbatim),
                   then ``[DONE]`` unless ``params["done"]`` is false
``endless``        text chunks as fast as the socket takes them, until the client leaves (bounded
                   by ``params["max_s"]``, 60 s by default, so a failing test cannot run away)
``giant_line``     ``data: `` then ``params["size"]`` bytes without a newline, in 64 KiB writes
``gzip``           the normal stream, gzip-compressed whenever ``Accept-Encoding`` allows it
``redirect``       307 to ``params["location"]`` (another origin); with ``params["everywhere"]``,
                   every path (``/v1/models``, ``/tokenize``, ``/metrics``, ``/health`` too) is
                   redirected to the same path under ``params["location"]`` (but those in
                   ``params["but"]``)
``html``           200 ``text/html``: a web page (a UI or a proxy's login page) on every path
``gzip_always``    the normal stream, gzip-compressed whatever ``Accept-Encoding`` says, one flushed
                   piece per event (as a compressing proxy streams it), ``params["gap_s"]`` apart;
                   with ``params["plain"]``, plain bytes that claim ``params["encoding"]`` (gzip)
``reset``          the connection is reset (RST) before any response byte
``chunked_error``  200 with chunked transfer encoding, one good chunk, then broken chunk framing
``json``           a non-streamed JSON answer, as a server does for ``"stream": false``
``status``         ``params["status"]`` with ``params["body"]``
``stall``          headers and one chunk, then silence (until the client leaves, bounded)
``echo``           HTTP 500 whose message echoes the request's credentials: the Authorization
                   header, its Basic user:password decoded, and ``X-Api-Key``
=================  ==============================================================================

``/v1/models`` answers ``models_body`` (raw bytes; ``{"data":[{"id":"hostile"}]}`` by default) and
``/health`` answers 200. Every request to a completion path is counted in ``requests``, with its
headers kept in ``seen_headers``; ``hits`` counts every request to any path, ``connections`` TCP
connections accepted.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import socket
import struct
import time
import zlib

import orjson
from aiohttp import web

from tests import processes


def chunk(text: str = "tok", *, finish: str | None = None) -> bytes:
    return orjson.dumps(
        {"id": "x", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}]}
    )


def usage(completion_tokens: object, prompt_tokens: object = 3) -> bytes:
    # built as text so that values orjson refuses to write (NaN, 400 digits) go out as given
    return (b'{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":'
            + str(prompt_tokens).encode() + b',"completion_tokens":' + str(completion_tokens).encode() + b"}}")


def normal_stream(n: int = 4) -> list[bytes]:
    role = orjson.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
    return [role, *(chunk(f"t{i}") for i in range(n)), chunk("", finish="stop"), usage(n)]


HTML_PAGE = "<!DOCTYPE html><html><head><title>Sign in</title></head><body><form>login</form></body></html>"


def sse(payloads: list[bytes], done: bool = True) -> bytes:
    body = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    return body + (b"data: [DONE]\n\n" if done else b"")


class HostileServer:
    def __init__(self) -> None:
        self.mode = "ok"
        self.params: dict = {}
        self.models_body: bytes = b'{"object":"list","data":[{"id":"hostile","object":"model"}]}'
        self.requests = 0
        self.hits = 0
        self.connections = 0
        self.seen_headers: list[dict[str, str]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._stopping = False

    async def start(self) -> HostileServer:
        app = web.Application(middlewares=[self._every_path])
        for path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            app.router.add_post(path, self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        # aiohttp's own objects: it has no public hook for a connection accepted
        server = site._server  # type: ignore[attr-defined]
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        # count connections: wrap the protocol factory of the listening server
        factory = server._protocol_factory  # type: ignore[attr-defined]

        def counting():
            self.connections += 1
            return factory()

        server._protocol_factory = counting  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        self._stopping = True
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ handlers

    @web.middleware
    async def _every_path(self, request: web.Request, handler) -> web.StreamResponse:  # type: ignore[no-untyped-def]
        self.hits += 1
        if self.mode == "redirect" and self.params.get("everywhere") and request.path not in self.params.get("but", ()):
            raise web.HTTPTemporaryRedirect(self.params["location"] + request.path)
        if self.mode == "html":
            return web.Response(text=HTML_PAGE, content_type="text/html")
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        return web.Response(body=self.models_body, content_type="application/json")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.seen_headers.append(dict(request.headers))
        await request.read()
        handler = getattr(self, "_mode_" + self.mode)
        return await handler(request)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    async def _mode_ok(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        await resp.write(sse(normal_stream(self.params.get("n", 4))))
        await resp.write_eof()
        return resp

    async def _mode_events(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        await resp.write(sse(list(self.params["events"]), done=self.params.get("done", True)))
        await resp.write_eof()
        return resp

    async def _mode_endless(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        block = sse([chunk("e")] * 4096, done=False)  # large writes: the client, not this server, is the limit
        deadline = time.monotonic() + self.params.get("max_s", 60.0)
        try:
            while time.monotonic() < deadline and not self._stopping:
                await resp.write(block)
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        return resp

    async def _mode_giant_line(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        size = self.params.get("size", 8 << 20)
        piece = b"x" * (64 << 10)
        try:
            await resp.write(b"data: ")
            sent = 0
            while sent < size:
                await resp.write(piece)
                sent += len(piece)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp

    async def _mode_gzip(self, request: web.Request) -> web.StreamResponse:
        body = sse(normal_stream(self.params.get("n", 4)))
        headers = {"Content-Type": "text/event-stream"}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def _mode_gzip_always(self, request: web.Request) -> web.StreamResponse:
        encoding = self.params.get("encoding", "gzip")
        plain = self.params.get("plain", False)  # plain bytes that claim to be compressed
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": encoding})
        await resp.prepare(request)
        z = zlib.compressobj(wbits=31)  # gzip framing
        try:
            for event in [*normal_stream(self.params.get("n", 4)), b"[DONE]"]:
                raw = b"data: " + event + b"\n\n"
                await resp.write(raw if plain else z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH))
                await asyncio.sleep(self.params.get("gap_s", 0.0))
            await resp.write(b"" if plain else z.flush())
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away (it could not decode the stream)
        return resp

    async def _mode_redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect(self.params["location"])

    async def _mode_reset(self, request: web.Request) -> web.StreamResponse:
        _reset(request)
        raise asyncio.CancelledError  # aiohttp drops the request: nothing is written

    async def _mode_chunked_error(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        resp.enable_chunked_encoding()
        await resp.write(b"data: " + chunk("a") + b"\n\n")
        await asyncio.sleep(0.01)
        transport = request.transport
        assert transport is not None
        transport.write(b"zz-not-a-chunk-size\r\n\r\n")  # below aiohttp's framing: broken chunking
        await asyncio.sleep(0.05)
        transport.close()
        return resp

    async def _mode_json(self, request: web.Request) -> web.StreamResponse:
        n = self.params.get("n", 8)
        return web.json_response({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "t " * n}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3},
        })

    async def _mode_status(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=self.params.get("status", 500), body=self.params.get("body", b"{}"),
                            content_type="application/json")

    async def _mode_echo(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        basic = ""
        if auth.startswith("Basic "):
            basic = base64.b64decode(auth[6:]).decode(errors="replace")
        message = f"denied: auth={auth} user:password={basic} key={request.headers.get('X-Api-Key', '')}"
        return web.json_response({"error": {"message": message}}, status=500)

    async def _mode_stall(self, request: web.Request) -> web.StreamResponse:
        resp = await self._stream(request)
        await resp.write(b"data: " + chunk("a") + b"\n\n")
        await self._until_gone(request, self.params.get("max_s", 60.0))
        return resp

    async def _until_gone(self, request: web.Request, max_s: float) -> None:
        """Hold the connection open, silent, until the client leaves, the server stops or max_s."""
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline and not self._stopping:
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            await asyncio.sleep(0.02)


def _reset(request: web.Request) -> None:
    """Close the request's connection with a TCP RST (SO_LINGER 0), before any response byte."""
    transport = request.transport
    assert transport is not None
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()



def self_signed_cert(directory: str) -> tuple[str, str] | None:
    """A throwaway self-signed certificate for 127.0.0.1 made with the openssl command: (cert, key),
    or None when openssl is not installed."""
    import shutil
    from pathlib import Path

    if shutil.which("openssl") is None:
        return None
    cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
    processes.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-days", "1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return str(cert), str(key)


async def start_tls(server: HostileServer, cert: str, key: str) -> str:
    """Serve ``server``'s app over TLS as well; returns that port's https URL."""
    import ssl

    assert server._runner is not None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    site = web.TCPSite(server._runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = server._runner.addresses[-1][1]  # (the plain site is the first)
    return f"https://127.0.0.1:{port}"
