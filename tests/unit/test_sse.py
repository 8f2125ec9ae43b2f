"""The SSE decoder on whole, split, CRLF and malformed input."""

from __future__ import annotations

import random

import pytest

from specload.engine.sse import DONE, SSEDecoder

STREAM = (
    b'data: {"a":1}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"b":2}\n\n'
    b"event: error\ndata: {\"error\":\"boom\"}\n\n"
    b"id: 7\nretry: 100\ndata: line1\ndata: line2\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    (None, b'{"a":1}'),
    (None, b'{"b":2}'),
    ("error", b'{"error":"boom"}'),
    (None, b"line1\nline2"),
    (None, DONE),
]


def decode_all(chunks: list[bytes]) -> list[tuple[str | None, bytes]]:
    d = SSEDecoder()
    out = []
    for c in chunks:
        out.extend(d.feed(c))
    out.extend(d.finish())
    return out


def test_whole_stream() -> None:
    assert decode_all([STREAM]) == EXPECTED


@pytest.mark.parametrize("seed", range(20))
def test_any_split_gives_the_same_events(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(STREAM)), 12))
    parts = [STREAM[i:j] for i, j in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
    assert decode_all(parts) == EXPECTED


def test_byte_by_byte() -> None:
    assert decode_all([bytes([b]) for b in STREAM]) == EXPECTED


@pytest.mark.parametrize("eol", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends(eol: bytes) -> None:
    stream = STREAM.replace(b"\n", eol)
    assert decode_all([stream]) == EXPECTED
    # a CRLF split between reads must not produce an extra blank line (an extra dispatch)
    assert decode_all([bytes([b]) for b in stream]) == EXPECTED


def test_data_without_space_and_trailing_event_without_blank_line() -> None:
    assert decode_all([b"data:x\n\ndata: [DONE]"]) == [(None, b"x"), (None, DONE)]


def test_garbage_lines_are_ignored_not_fatal() -> None:
    # unknown fields and junk produce no events; the payload check is the client's job
    assert decode_all([b"garbage\nfoo: bar\n\n"]) == []
    assert decode_all([b"data: {not json\n\n"]) == [(None, b"{not json")]


def test_pending_bytes_tracks_incomplete_event() -> None:
    d = SSEDecoder()
    assert d.feed(b'data: {"par') == []
    assert d.pending_bytes > 0
    assert d.feed(b'tial":1}\n\n') == [(None, b'{"partial":1}')]
