"""HTTP/1.1 for the streaming client: its connections to one origin, one request at a time on each.

The load's hot path is the response body. Here it is read by an ``asyncio.Protocol`` whose
``data_received`` parses the head, de-chunks the body with ``bytes.find`` (chunked, Content-Length
or until close; gzip or deflate decoded when a server compresses anyway) and hands each socket
read's bytes, with one clock reading, to the request's sink synchronously: the request's coroutine
is woken once, when the response has ended, failed or been given up, not once per read (aiohttp
paid a Python call chain per HTTP chunk and a wake-up per read). ``Pool`` keeps idle connections
for keep-alive; plain ``http://`` and ``https://`` (TLS by the event loop) go the same way.

Failures are exceptions the client turns into records: ``ConnectFailed``/``ConnectTimeout`` (no
connection), ``Dropped`` (the connection ended before the response did; ``answered`` says whether
any response byte came, which tells a stale pooled connection from a drop mid-stream),
``BadResponse`` (not HTTP, or a head past bounds) and ``BadEncoding``. No redirect is followed and
no header is ever echoed in a message.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 << 10  # a response head past this is not one
MAX_SIZE_LINE = 1024  # a chunk-size line (with extensions) past this is broken framing
# a read whose first chunk is smaller than this is cut by _whole_chunks: scanning every byte of small
# chunks (an event each) costs less than a Python step per chunk; large ones the loop skips unread
SMALL_CHUNK = 512
MAX_INFLATE = 16 << 20  # one compressed read inflating past this is a bomb, not a stream
IDLE_KEEP_S = 15.0  # a pooled connection idle longer is closed, not reused (aiohttp's keep-alive time)
_HEX = b"0123456789abcdefABCDEF"
_IDLE, _HEAD, _BODY = 0, 1, 2
_CHUNKED, _LENGTH, _CLOSE = 0, 1, 2

# what the head's handler returns: a sink for each read's bytes (True: stop reading), the most bytes
# to collect (the future's result), or None (the body is not read)
Sink = Callable[[bytes, int], Any]
OnHead = Callable[[int, dict[str, str], int], "Sink | int | None"]


class ConnectFailed(Exception):
    """No connection could be made; ``os_error`` says why (refused, unreachable, TLS, descriptors)."""

    def __init__(self, os_error: OSError) -> None:
        super().__init__(str(os_error))
        self.os_error = os_error


class ConnectTimeout(TimeoutError):
    """No connection within the connect timeout."""


class Dropped(ConnectionError):
    """The connection ended before the response did; ``answered``: a response byte had come."""

    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class BadResponse(ValueError):
    """The server's bytes are not an HTTP/1.x response."""


class BadEncoding(BadResponse):
    """The body does not decode as its Content-Encoding says."""


def _decoder(encoding: str) -> Any:
    """A decompressor for a body the server compressed though asked for identity."""
    if encoding in ("gzip", "x-gzip"):
        return _Deflate(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return _Deflate()
    # br is not decoded: Brotli's decompressor takes no output bound, so one read could be a bomb
    raise BadEncoding(f"cannot decode content-encoding: {encoding[:40]}")


class _Deflate:
    """gzip, or deflate as servers send it: zlib-wrapped or raw (the first bytes tell); one read
    inflates to at most MAX_INFLATE bytes (a bomb stops there)."""

    def __init__(self, wbits: int | None = None) -> None:
        self._z: Any = None if wbits is None else zlib.decompressobj(wbits)
        self.unconsumed_tail = b""

    def decompress(self, data: bytes) -> bytes:
        if self._z is None:
            wrapped = len(data) >= 2 and (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        out: bytes = self._z.decompress(data, MAX_INFLATE)
        self.unconsumed_tail = self._z.unconsumed_tail
        return out

    def flush(self) -> bytes:
        return self._z.flush() if self._z is not None else b""


class _HexOf(dict):
    """A length's chunk-size line as a server writes it (``b"1a"``), kept for lengths under 64 KiB."""

    def __missing__(self, n: int) -> bytes:
        line = b"%x" % n
        if n < 65536:
            self[n] = line
        return line


_HEX_OF = _HexOf()


def _small_first(data: bytes) -> bool:
    """The read starts with a chunk of under SMALL_CHUNK bytes."""
    j = data.find(b"\r\n", 0, 5)
    if not 0 < j < 4:
        return False
    try:
        return int(data[:j], 16) < SMALL_CHUNK
    except ValueError:
        return False


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip(b" \t")
    if not size or len(size) > 16 or size.strip(_HEX):
        raise Dropped(f"broken chunked encoding: chunk size {line[:40]!r}", True)
    return int(size, 16)


class Conn(asyncio.Protocol):
    """One connection: a request written, its response read into the request's sink or a buffer."""

    __slots__ = ("pool", "clock", "transport", "closed", "keep", "idle_since", "fut", "phase", "on_head",
                 "answered", "head", "sink", "parts", "limit", "size", "framing", "left", "rest", "crlf", "last",
                 "mid", "decomp", "coding", "reusable")

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.clock = pool.clock_ns
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep = pool.keepalive  # may serve another request after this one
        self.idle_since = 0.0
        self.fut: asyncio.Future | None = None
        self.phase = _IDLE
        self._begin(None)

    def _begin(self, on_head: OnHead | None) -> None:
        self.on_head = on_head
        self.answered = False
        self.head = b""
        self.sink: Sink | None = None
        self.parts: list[bytes] | None = None  # collected body (a whole answer, an error's body)
        self.limit = 0
        self.size = 0
        self.framing = _CLOSE
        self.left = 0  # bytes left in the chunk being read, or of the Content-Length
        self.rest = b""  # an unfinished chunk-size or trailer line
        self.crlf = 0  # bytes of the CRLF after a chunk's data still to come
        self.last = False  # the last (empty) chunk came: trailers until a blank line
        self.mid = False  # any of left, crlf, rest, last: a read does not start at a chunk's start
        self.decomp: Any = None
        self.coding = ""
        self.reusable = False

    # -------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.pool.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.conns.discard(self)
        if self.phase == _IDLE:
            return
        if self.phase == _BODY and self.framing == _CLOSE and exc is None:
            self._safely(self._end, self.clock())  # a body delimited by the close has ended
            return
        why = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        if not self.answered:
            self._fail(Dropped(f"the connection closed before any response byte{why}", False))
        else:
            self._fail(Dropped(f"the connection closed mid-response{why}", True))

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost ends the response

    def data_received(self, data: bytes) -> None:
        now = self.clock()
        if self.phase != _BODY:
            if self.phase == _HEAD:
                self.answered = True
                self._safely(self._read_head, data, now)
            else:
                self.close()  # bytes nobody asked for: this connection serves nothing more
            return
        try:  # the hot path, inlined: a read that is one whole chunk is cut without _dechunk
            if self.framing == _CHUNKED:
                piece = None
                if not self.mid and data[-2:] == b"\r\n":
                    j = data.find(b"\r\n")
                    try:
                        size = int(data[:j], 16)
                        if size and len(data) - j - 4 == size:  # (not the last chunk, "0")
                            piece, done = data[j + 2:-2], False
                    except ValueError:
                        pass  # an extension, or no size: _dechunk says which
                if piece is None:
                    piece, done = self._dechunk(data)
            else:
                piece, done = self._unchunked(data)
            if self.decomp is not None and piece:
                piece = self._decode(piece)
            if piece:
                sink = self.sink
                if sink is not None:
                    if sink(piece, now):
                        self.reusable = False
                        self._done(None)
                        return
                elif self._collect(piece):
                    return
            if done:
                self._end(now)
        except Exception as e:  # noqa: BLE001 (the request fails with it; raised in a callback it would hang)
            self._fail(e)

    # -------------------------------------------------------------- the exchange

    def request(self, data: bytes, on_head: OnHead) -> asyncio.Future:
        """Write a request; the future ends with the response (the collected body, or None) or fails."""
        fut = self.fut = asyncio.get_running_loop().create_future()
        self._begin(on_head)
        self.phase = _HEAD
        t = self.transport
        if t is None or self.closed or t.is_closing():
            self._fail(Dropped("the connection closed before any response byte", False))
        else:
            t.write(data)
        return fut

    def close(self) -> None:
        self.keep = False
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """The request was given up (cancelled): the rest of its response is never read."""
        self.keep = False
        self.phase = _IDLE
        if self.transport is not None:
            self.transport.abort()

    def _safely(self, f: Callable[[bytes, int], None] | Callable[[int], None], *args: Any) -> None:
        try:
            f(*args)
        except Exception as e:  # noqa: BLE001 (the request fails with it; raised in a callback it would hang)
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        self.phase = _IDLE
        self.close()
        if self.fut is not None and not self.fut.done():
            self.fut.set_exception(e)

    def _done(self, result: bytes | None) -> None:
        self.phase = _IDLE
        if not self.reusable:
            self.close()
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(result)

    def _read_head(self, data: bytes, now: int) -> None:
        buf = self.head + data if self.head else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise BadResponse(f"a response head over {MAX_HEAD_BYTES >> 10} KiB")
            self.head = buf
            return
        self.head = b""
        lines = buf[:end].split(b"\r\n")
        first = lines[0]
        parts = first.split(None, 2)
        if len(parts) < 2 or not first.startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise BadResponse(f"not an HTTP/1.x status line: {first[:60]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise BadResponse(f"a malformed header line: {line[:60]!r}")
            key = name.lower().decode("latin-1")
            v = value.strip(b" \t").decode("latin-1")
            headers[key] = headers[key] + ", " + v if key in headers else v
        rest = buf[end + 4:]
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            if rest:
                self._read_head(rest, now)
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.framing = _CHUNKED
        elif "content-length" in headers:
            cl = headers["content-length"]
            if not cl.isdigit():
                raise BadResponse(f"Content-Length {cl[:40]!r}")
            self.framing, self.left = _LENGTH, int(cl)
        self.reusable = (self.keep and first.startswith(b"HTTP/1.1") and self.framing != _CLOSE
                         and "close" not in headers.get("connection", "").lower())
        coding = headers.get("content-encoding", "").strip().lower()
        if coding and coding != "identity":
            self.coding = coding[:40]
            self.decomp = _decoder(coding)
        assert self.on_head is not None
        handler = self.on_head(status, headers, now)
        self.phase = _BODY
        if handler is None:
            self.reusable = False
            self._done(None)
            return
        if isinstance(handler, int):
            self.parts, self.limit = [], handler
        else:
            self.sink = handler
        if self.framing == _LENGTH and not self.left:
            self._end(now)
        elif rest:
            self._rest_of_read(rest, now)

    def _rest_of_read(self, data: bytes, now: int) -> None:
        """The body's bytes that came in the head's read."""
        piece, done = self._dechunk(data) if self.framing == _CHUNKED else self._unchunked(data)
        if self.decomp is not None and piece:
            piece = self._decode(piece)
        if piece and self._deliver(piece, now):
            return
        if done:
            self._end(now)

    def _unchunked(self, data: bytes) -> tuple[bytes, bool]:
        """A body framed by its Content-Length or by the close: this read's part, and whether it ended."""
        if self.framing == _CLOSE:
            return data, False
        left = self.left
        if len(data) < left:
            self.left = left - len(data)
            return data, False
        if len(data) > left:
            self.reusable = False  # bytes past the body: the connection is out of step
            data = data[:left]
        self.left = 0
        return data, True

    def _decode(self, data: bytes) -> bytes:
        try:
            out: bytes = self.decomp.decompress(data)
        except Exception as e:  # noqa: BLE001 (zlib.error)
            raise BadEncoding(f"cannot decode content-encoding: {self.coding} ({e})") from None
        if self.decomp.unconsumed_tail:
            raise BadEncoding(f"content-encoding: {self.coding}: one read inflates past {MAX_INFLATE >> 20} MiB")
        return out

    def _collect(self, data: bytes) -> bool:
        """A collected body's bytes; True when it reached its bound (the response is over then)."""
        assert self.parts is not None
        self.parts.append(data)
        self.size += len(data)
        if self.size >= self.limit:
            self.reusable = False
            self._done(b"".join(self.parts)[:self.limit])
            return True
        return False

    def _deliver(self, data: bytes, now: int) -> bool:
        """Bytes to the sink or the buffer, off the hot path; True when the response is over now."""
        sink = self.sink
        if sink is None:
            return self._collect(data)
        if sink(data, now):
            self.reusable = False
            self._done(None)
            return True
        return False

    def _end(self, now: int) -> None:
        if self.decomp is not None:
            try:
                tail = self.decomp.flush()
            except Exception as e:  # noqa: BLE001 (zlib.error)
                raise BadEncoding(f"cannot decode content-encoding: {self.coding} ({e})") from None
            if tail and self._deliver(tail, now):
                return
        if self.sink is not None:
            if self.sink(b"", now):  # the end of the stream, for the sink's last events
                self.reusable = False
            self._done(None)
        else:
            self._done(b"".join(self.parts or ()))

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """Chunked transfer encoding: the data of the chunks in ``data``, and whether the last came.

        A read usually holds whole chunks (one per event, or a whole response for a client that is
        behind): those are cut with one ``find`` and one ``int`` each; a chunk split between reads,
        its size line or its CRLF, is carried over in ``left``, ``rest`` and ``crlf``."""
        if not (self.rest or self.left or self.crlf or self.last) and data[-2:] == b"\r\n" and _small_first(data):
            whole = self._whole_chunks(data)
            if whole is not None:
                return whole
        buf = self.rest + data if self.rest else data
        self.rest = b""
        pos, n = 0, len(buf)
        out: list[bytes] = []
        append = out.append
        find = buf.find
        while pos < n:
            left = self.left
            if left:  # inside a chunk's data
                end = pos + left
                if end > n:
                    append(buf[pos:] if pos else buf)
                    self.left = end - n
                    break
                append(buf[pos:end])
                self.left, pos = 0, end
                self.crlf = 2
            if self.crlf:  # the CRLF after a chunk's data
                need = self.crlf
                got = buf[pos:pos + need]
                if got != b"\r\n"[2 - need:2 - need + len(got)]:
                    raise Dropped(f"broken chunked encoding: {got!r} after a chunk's data", True)
                pos += len(got)
                self.crlf = need - len(got)
                continue
            j = find(b"\r\n", pos)
            if j < 0:
                if n - pos > MAX_SIZE_LINE:
                    raise Dropped("broken chunked encoding: a chunk-size line without its end", True)
                self.rest = buf[pos:]
                break
            if self.last:
                if j == pos:  # the blank line after the trailers: the body has ended
                    if j + 2 < n:
                        self.reusable = False
                    self.mid = True
                    return (out[0] if len(out) == 1 else b"".join(out)), True
                pos = j + 2
                continue  # a trailer, ignored
            line = buf[pos:j]
            try:
                size = int(line, 16)
            except ValueError:
                size = -1
            if size <= 0:  # the last chunk, an extension (int refuses it), or no size at all
                size = _chunk_size(line)
            start = j + 2
            if not size:
                self.last = True
                pos = start
                continue
            end = start + size
            if end + 2 <= n and buf[end:end + 2] == b"\r\n":  # a whole chunk with its CRLF
                append(buf[start:end])
                pos = end + 2
            else:
                self.left, pos = size, start
        self.mid = bool(self.left or self.crlf or self.rest or self.last)
        return (out[0] if len(out) == 1 else b"".join(out)), False

    def _whole_chunks(self, buf: bytes) -> tuple[bytes, bool] | None:
        """A read of whole chunks (the last one perhaps the body's end, ``0`` and a blank line),
        each with its size in lowercase hex and no CRLF in its data, cut with one ``split`` and a
        comparison of lists, no Python step per chunk (a client that is behind reads hundreds of
        chunks at once); None for anything else, which the general loop reads. Sound: read from its
        start, a run of chunks that splits this way parses only this way."""
        parts = buf.split(b"\r\n")
        if parts[-1] or not len(parts) & 1:
            return None
        datas = parts[1::2]
        if parts[0:-1:2] != list(map(_HEX_OF.__getitem__, map(len, datas))):
            return None
        try:
            end = datas.index(b"")  # the last chunk, size 0: it must be the read's last
        except ValueError:
            self.mid = False
            return (datas[0] if len(datas) == 1 else b"".join(datas)), False
        if end != len(datas) - 1:
            return None
        self.mid = True
        datas.pop()
        return b"".join(datas), True


class Pool:
    """The connections to one origin (``scheme://host:port``): idle ones kept for the next request."""

    def __init__(self, url: str, *, keepalive: bool, connect_timeout_s: float, clock_ns: Callable[[], int]) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.tls = u.scheme == "https"
        self.path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = (443 if self.tls else 80) == self.port
        self.authority = host if default else f"{host}:{self.port}"
        self.keepalive = keepalive
        self.connect_timeout_s = connect_timeout_s
        self.clock_ns = clock_ns
        self.idle: list[Conn] = []
        self.conns: set[Conn] = set()
        self._ssl: ssl.SSLContext | None = None

    def head(self, headers: dict[str, str], *, close: bool) -> bytes:
        """A POST's head up to its Content-Length value (the caller adds the length and the body)."""
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {self.authority}"]
        for k, v in headers.items():
            if any(c in k + v for c in "\r\n\0"):
                raise ValueError(f"header {k!r} holds a line break")
            lines.append(f"{k}: {v}")
        if close:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def take(self, fresh: bool = False) -> tuple[Conn, bool]:
        """A connection for one request, and whether it is a pooled one (it may be stale). ``fresh``:
        a new connection, closed after its response."""
        if not fresh and self.keepalive:
            idle = self.idle
            now = time.monotonic()
            while idle:
                c = idle.pop()
                if c.closed or c.transport is None or c.transport.is_closing():
                    continue
                if now - c.idle_since > IDLE_KEEP_S:
                    c.close()
                    continue
                return c, True
        loop = asyncio.get_running_loop()
        if self.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Conn(self), self.host, self.port, ssl=self._ssl if self.tls else None),
                self.connect_timeout_s or None)
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {self.authority} within {self.connect_timeout_s:g} s") from None
        except OSError as e:
            raise ConnectFailed(e) from None
        conn.keep = self.keepalive and not fresh
        return conn, False

    def give_back(self, conn: Conn) -> None:
        """A connection whose response has ended: kept for the next request when it can serve one."""
        if conn.keep and conn.reusable and not conn.closed and conn.phase == _IDLE:
            conn.idle_since = time.monotonic()
            self.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        self.idle.clear()
        for c in list(self.conns):
            c.close()
