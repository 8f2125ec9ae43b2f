"""The client's steady-state path: runs of plain text chunks counted by the SSE decoder (feed_runs)
give the same records as chunk-by-chunk decoding, over real HTTP. The hostile test server writes
each response in one write, so the runs sit inside a read between other events, as they do when a
client at its ceiling gets a whole response in one read."""

from __future__ import annotations

import orjson

from specload.datatypes import ErrorKind
from tests.conftest import make_client
from tests.hostile import chunk, usage

ROLE = orjson.dumps({"id": "x", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})


async def send_events(hostile, events: list[bytes], **kw):
    server = await hostile()
    server.mode, server.params = "events", {"events": events}
    async with make_client(server.url, max_tokens=50, **kw) as c:
        return await c.send("x")


async def test_a_whole_response_in_one_read_is_counted_chunk_by_chunk(hostile) -> None:
    texts = [f" w{i}".encode() if i % 7 else rb' \"q\"' for i in range(40)]  # escaped quotes inside too
    rec = await send_events(hostile, [ROLE, *(chunk(t.decode()) for t in texts), chunk("", finish="length"),
                                      usage(40)])
    assert rec.ok, rec.error_detail
    assert (rec.chunks, rec.output_tokens, rec.tokens_estimated, rec.finish_reason) == (40, 40, False, "length")
    assert len(rec.chunk_offsets_ns) == 40 and rec.ttft_ns == rec.chunk_offsets_ns[0]
    assert rec.e2e_ns == rec.chunk_offsets_ns[-1]


async def test_an_error_event_after_a_run_ends_the_request_at_it(hostile) -> None:
    events = [ROLE, *(chunk(f" a{i}") for i in range(10)), b'{"error":{"message":"boom"}}',
              *(chunk(f" b{i}") for i in range(10))]
    rec = await send_events(hostile, events)
    assert rec.error_kind is ErrorKind.STREAM_ERROR and "boom" in (rec.error_detail or "")
    assert rec.chunks == 10  # the text before the error, none after


async def test_empty_and_odd_chunks_inside_a_run_are_not_text(hostile) -> None:
    events = [ROLE, *(chunk(f" a{i}") for i in range(5)), chunk(""), ROLE,
              *(chunk(f" b{i}") for i in range(5)), chunk("", finish="stop"), usage(10)]
    rec = await send_events(hostile, events)
    assert rec.ok, rec.error_detail
    assert (rec.chunks, rec.output_tokens) == (10, 10)
