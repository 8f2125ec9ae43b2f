"""The streaming client against a hostile server (``tests/hostile.py``), one behaviour per test.

Each request ends as one record with the right diagnosis: its error kind says what happened, its
detail says how, and nothing the server does makes it hang, grow without bound or leak a header.
"""

from __future__ import annotations

import asyncio

import pytest

from specload.clock import FakeClock
from specload.datatypes import ErrorKind
from specload.engine.client import MAX_CHUNK_DETAIL, StreamingClient
from tests.conftest import make_client
from tests.hostile import chunk, self_signed_cert, start_tls, usage
from tests.waiting import until


def client(url: str, **kw) -> StreamingClient:
    kw.setdefault("max_tokens", 8)
    kw.setdefault("stall_timeout_s", 5.0)
    return make_client(url, **kw)


async def send(url: str, timeout: float = 20, **kw):  # a RequestRecord
    async with client(url, **kw) as c:
        return await asyncio.wait_for(c.send("x"), timeout)


async def test_a_wrong_shaped_chunk_is_malformed_with_its_reason_and_keeps_what_came_before(hostile) -> None:
    server = await hostile()
    server.mode, server.params = "events", {"events": [chunk("a"), chunk("b"), b'{"choices":[{"delta":"x"}]}']}
    r = await send(server.url)
    assert r.error_kind is ErrorKind.MALFORMED and r.http_status == 200
    assert r.error_detail.startswith("choices[0].delta is not an object")
    assert r.chunks == 2  # the text that did arrive is counted


@pytest.mark.parametrize("value", ["1e308", str(2**64 + 5), "-4", '"7"'])
async def test_an_out_of_range_usage_count_is_malformed_not_passed_on(hostile, value: str) -> None:
    server = await hostile()
    server.mode, server.params = "events", {"events": [chunk("a"), chunk("", finish="stop"), usage(value)]}
    r = await send(server.url)
    assert r.error_kind is ErrorKind.MALFORMED and "completion_tokens is not a token count" in r.error_detail
    assert r.output_tokens == 1 and r.tokens_estimated


async def test_an_oversize_event_is_its_own_error_kind(hostile) -> None:
    server = await hostile()
    server.mode, server.params = "giant_line", {"size": 64 << 20}
    r = await send(server.url, timeout=30)
    assert r.error_kind is ErrorKind.OVERSIZE, (r.error_kind, r.error_detail)
    assert "4 MiB" in r.error_detail


async def test_identity_encoding_is_asked_for_so_gzip_never_comes(hostile) -> None:
    # a server or proxy honouring aiohttp's default "gzip, deflate" sent a body specload did not
    # decompress: every request was malformed
    server = await hostile()
    server.mode = "gzip"
    r = await send(server.url)
    assert r.ok, r.error_detail
    assert server.seen_headers[-1]["Accept-Encoding"] == "identity"


async def test_a_stream_gzipped_anyway_is_decoded_piece_by_piece(hostile) -> None:
    # before: 48 of 48 requests were malformed ("stream ended without [DONE]") against such a server
    server = await hostile()
    server.mode, server.params = "gzip_always", {"n": 6, "gap_s": 0.02}
    r = await send(server.url)
    assert r.ok, r.error_detail
    assert server.seen_headers[-1]["Accept-Encoding"] == "identity"
    assert r.chunks == 6 and r.output_tokens == 6 and not r.tokens_estimated
    # each piece counted when it came, not the whole answer at its end
    assert r.ttft_ns is not None and r.e2e_ns is not None and r.e2e_ns - r.ttft_ns >= 4 * 0.02e9


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
async def test_a_stream_in_an_encoding_it_is_not_is_one_error_record(hostile, encoding: str) -> None:
    server = await hostile()
    server.mode, server.params = "gzip_always", {"encoding": encoding, "plain": True}
    r = await send(server.url)
    assert r.error_kind is ErrorKind.MALFORMED, (r.error_kind, r.error_detail)
    assert f"content-encoding: {encoding}" in r.error_detail  # br: the head says so (without Brotli installed)


async def test_a_redirect_to_another_origin_is_not_followed_and_credentials_stay(hostile) -> None:
    server, other = await hostile(), await hostile()
    server.mode, server.params = "redirect", {"location": other.url + "/v1/chat/completions"}
    r = await send(server.url, headers={"X-Api-Key": "sk-redirect-secret"})
    assert r.error_kind is ErrorKind.REDIRECT and r.http_status == 307
    assert other.url in r.error_detail and "not followed" in r.error_detail
    assert other.requests == 0  # the key never went to the other origin


async def test_a_reset_on_a_fresh_connection_is_not_retried(hostile) -> None:
    # before: each request went out 3 times (144 requests reached the server for 48 records)
    server = await hostile()
    server.mode = "reset"
    r = await send(server.url)
    assert r.error_kind is ErrorKind.DISCONNECT and r.retries == 0
    assert server.requests == 1
    assert "before any response" in r.error_detail


async def test_a_chunked_encoding_error_after_a_200_keeps_its_status_and_does_not_hang(hostile) -> None:
    # aiohttp's C parser never wakes a reader after a broken chunk size, and its read timeout does not
    # fire either: the request hung until the request timeout (600 s by default)
    server = await hostile()
    server.mode = "chunked_error"
    r = await send(server.url, stall_timeout_s=1.0, timeout=15)
    assert r.error_kind in (ErrorKind.DISCONNECT, ErrorKind.STALL), (r.error_kind, r.error_detail)
    assert r.http_status == 200 and r.chunks == 1


async def test_a_silent_server_is_a_stall_even_when_cancelled_for_server_down(hostile) -> None:
    # a SIGSTOPped server: its streams go silent; specload stops the run when the server is down,
    # and the requests stuck in it are stalls, not requests specload cancelled for its own reasons
    server = await hostile()
    server.mode, server.params = "stall", {"max_s": 30.0}
    clock = FakeClock()
    seen, tokens = [], []
    async with client(server.url, stall_timeout_s=60.0, clock=clock, on_cancelled=seen.append,
                      on_tokens=lambda t, n: tokens.append(n)) as c:
        for why, silent_s, kind in (("server down for 30 s", 5.0, ErrorKind.STALL), (None, 5.0, ErrorKind.CANCELLED),
                                    ("server down for 30 s", 0.0, ErrorKind.CANCELLED)):
            tokens.clear()
            task = asyncio.ensure_future(c.send("x"))
            await until(lambda: tokens)  # the one chunk the server sends before going silent
            clock.advance(silent_s)
            task.cancel(why)
            with pytest.raises(asyncio.CancelledError):
                await task
            assert seen[-1].error_kind is kind, (why, silent_s, seen[-1].error_detail)
    assert "no data for 5.0 s; cancelled: server down for 30 s" in seen[0].error_detail


async def test_endless_fast_streams_keep_bounded_chunk_detail(hostile) -> None:
    server = await hostile()
    server.mode, server.params = "endless", {"max_s": 30.0}
    r = await send(server.url, request_timeout_s=3.0, timeout=20)
    assert r.error_kind is ErrorKind.TIMEOUT
    assert r.chunks > MAX_CHUNK_DETAIL  # the count is exact...
    assert len(r.chunk_offsets_ns) == MAX_CHUNK_DETAIL and r.chunk_detail_capped  # ...the detail bounded
    assert r.e2e_ns >= r.chunk_offsets_ns[-1]


async def test_https_is_read_by_the_same_client_and_an_untrusted_certificate_is_named(
        hostile, tmp_path, monkeypatch) -> None:
    pair = self_signed_cert(str(tmp_path))
    if pair is None:
        pytest.skip("no openssl command to make a test certificate")
    server = await hostile()
    url = await start_tls(server, *pair)
    r = await send(url)
    assert r.error_kind is ErrorKind.CONNECT and "TLS certificate verification failed" in r.error_detail
    assert server.requests == 0
    monkeypatch.setenv("SSL_CERT_FILE", pair[0])  # trusted now: the stream comes over TLS
    r = await send(url)
    assert r.ok, r.error_detail
    assert r.chunks == 4 and r.output_tokens == 4 and server.requests == 1
