"""The streaming client's HTTP/1.1 response reader (``engine/http1.py``), fed the bytes of a response
split at arbitrary points, as socket reads may split it: the body reaches the sink whole and in order,
each read's part with that read's clock reading, the end is seen exactly once, and broken framing is
an error, never a hang. (The same reader over real sockets: tests/integration/test_client_*.py.)"""

from __future__ import annotations

import asyncio
import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specload.engine import http1


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _exchange(reads: list[bytes], *, collect: int | None = None) -> tuple[asyncio.Future, list, list]:
    """A request on a fresh Conn, the reads fed in with clock readings 1, 2, ...; returns (the
    future, the sink's (bytes, now) calls, the heads seen)."""
    loop = asyncio.new_event_loop()
    clock = iter(range(1, 10**6))
    pool = http1.Pool("http://127.0.0.1:9", keepalive=True, connect_timeout_s=1.0, clock_ns=lambda: next(clock))
    conn = http1.Conn(pool)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    got: list[tuple[bytes, int]] = []
    heads: list[tuple[int, dict]] = []

    def on_head(status: int, headers: dict, now: int) -> http1.Sink | int:
        heads.append((status, headers))
        if collect is not None:
            return collect
        return lambda data, now: got.append((data, now))

    async def run() -> asyncio.Future:
        fut = conn.request(b"POST / HTTP/1.1\r\n\r\n", on_head)
        for r in reads:
            conn.data_received(r)
        return fut

    try:
        fut = loop.run_until_complete(run())
    finally:
        loop.close()
    return fut, got, heads


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=8), cuts=st.lists(st.integers(0, 10**4), max_size=8),
       ext=st.booleans(), trailer=st.booleans())
def test_a_chunked_body_split_anywhere_reaches_the_sink_whole_and_ends_once(pieces, cuts, ext, trailer) -> None:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";a=b" if ext else b"", p) for p in pieces)
    body += b"0\r\n" + (b"X-Trailer: 1\r\n" if trailer else b"") + b"\r\n"
    reads = _split(HEAD + body, cuts)
    fut, got, heads = _exchange(reads)
    assert fut.done() and fut.result() is None
    assert heads == [(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})]
    assert b"".join(d for d, _ in got) == b"".join(pieces)
    assert got[-1][0] == b""  # the end, said once, after the data
    assert [d for d, _ in got].count(b"") == 1
    # each part carries the clock reading of the read it came in, in order
    assert [n for _, n in got] == sorted(n for _, n in got) and max(n for _, n in got) <= len(reads)


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.sampled_from([b"data: x\n\n", b"a\r\nb", b"\r\n", b"0", b"z" * 300, b"y" * 600]) | st.binary(min_size=1, max_size=30),
                       max_size=12),
       sizes=st.lists(st.sampled_from([b"%x", b"%X", b"0%x"]), min_size=12, max_size=12),
       groups=st.lists(st.integers(1, 4), max_size=12))
def test_reads_of_whole_chunks_are_cut_as_the_general_reader_cuts_them(pieces, sizes, groups) -> None:
    # reads that hold whole chunks take the one-split path when each size is lowercase hex and no
    # data holds a CRLF, the general loop otherwise: the same bytes reach the sink either way
    chunks = [(fmt % len(p)) + b"\r\n" + p + b"\r\n" for p, fmt in zip(pieces, sizes, strict=False)]
    chunks.append(b"0\r\n\r\n")
    reads, i = [HEAD], 0
    for g in groups + [len(chunks)]:
        if i < len(chunks):
            reads.append(b"".join(chunks[i:i + g]))
            i += g
    fut, got, _ = _exchange(reads)
    assert fut.done() and fut.result() is None
    assert b"".join(d for d, _ in got) == b"".join(pieces)
    assert [d for d, _ in got].count(b"") == 1 and got[-1][0] == b""


def test_chunks_after_the_last_chunk_in_one_read_are_not_data() -> None:
    fut, got, _ = _exchange([HEAD, b"3\r\nabc\r\n0\r\n\r\n3\r\nxyz\r\n3\r\nuvw\r\n"])
    assert fut.done() and [d for d, _ in got] == [b"abc", b""]


def test_the_last_chunk_in_a_read_of_its_own_ends_the_body() -> None:
    # a read of just "0\r\n\r\n" once looked like one whole empty chunk: the stream never ended
    fut, got, _ = _exchange([HEAD + b"3\r\nabc\r\n", b"0\r\n\r\n"])
    assert fut.done() and [d for d, _ in got] == [b"abc", b""]


@pytest.mark.parametrize("body", [b"zz\r\nabc\r\n", b"3\r\nabcXY", b"-3\r\nabc\r\n", b"9" * 2000])
def test_broken_chunk_framing_is_a_drop_not_a_hang(body: bytes) -> None:
    fut, _, _ = _exchange([HEAD, body])
    assert fut.done()
    with pytest.raises(http1.Dropped, match="broken chunked encoding"):
        fut.result()


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(0, 10**4), max_size=6))
def test_content_length_and_gzip_bodies_are_collected_within_their_bound(cuts) -> None:
    text = b'{"choices":[{"message":{"content":"hello"}}]}' * 20
    packed = gzip.compress(text)
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
    fut, _, heads = _exchange(_split(head + packed, cuts), collect=1 << 20)
    assert fut.result() == text and heads[0][0] == 200
    fut, _, _ = _exchange([head + packed], collect=100)  # the bound: collected up to it, then over
    assert len(fut.result()) == 100


@pytest.mark.parametrize("reads", [[b"SSH-2.0-OpenSSH\r\n\r\n"], [b"HTTP/1.1 2x0 OK\r\n\r\n"],
                                   [b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"], [b"HTTP/1.1 200 OK\r\n" + b"a" * 70000]])
def test_what_is_not_an_http_response_is_a_bad_response(reads: list[bytes]) -> None:
    fut, _, _ = _exchange(reads)
    with pytest.raises(http1.BadResponse):
        fut.result()


def test_an_interim_100_continue_is_skipped() -> None:
    fut, got, heads = _exchange([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
                                collect=100)
    assert fut.result() == b"ok" and [s for s, _ in heads] == [200]


def test_a_gzip_bomb_stops_at_the_inflate_bound() -> None:
    packed = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
    fut, _, _ = _exchange([head + packed])
    with pytest.raises(http1.BadEncoding, match="inflates past"):
        fut.result()
