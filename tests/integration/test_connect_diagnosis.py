"""A connection that fails gets the right diagnosis: a TLS port addressed with http://, a certificate
that is not trusted, a refused port. Before, the first read as "server down" and the second as
"connection refused or unreachable"."""

from __future__ import annotations

import asyncio
import socket

import pytest

from specload.engine.probe import TargetError, discover
from tests.hostile import self_signed_cert, start_tls


@pytest.fixture
async def tls_url(hostile, tmp_path) -> str:
    pair = self_signed_cert(str(tmp_path))
    if pair is None:
        pytest.skip("no openssl command to make a test certificate")
    server = await hostile()
    return await start_tls(server, *pair)


async def test_plain_http_to_a_tls_port_says_use_https(tls_url: str) -> None:
    plain = tls_url.replace("https://", "http://")
    with pytest.raises(TargetError, match="answers with TLS, not plain HTTP: use https://127.0.0.1"):
        await asyncio.wait_for(discover(plain, api="chat"), 20)


async def test_an_untrusted_certificate_is_named_as_such(tls_url: str) -> None:
    with pytest.raises(TargetError, match="TLS certificate verification failed .*not trusted") as e:
        await asyncio.wait_for(discover(tls_url), 20)
    assert "refused" not in str(e.value)


async def test_a_refused_port_is_named_as_such() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(TargetError, match="connection refused"):
        await asyncio.wait_for(discover(f"http://127.0.0.1:{port}"), 20)
