"""The SSE decoder on whole, split, CRLF and malformed input."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specload.engine.sse import DONE, LEARN_TRIES, EventTemplate, SSEDecoder, SSEEventTooLarge

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


def test_an_event_ended_by_a_cr_at_the_end_of_a_read_is_not_held_back() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: x\r\r") == [(None, b"x")]  # the second CR is a blank line, whatever follows
    assert d.feed(b"\ndata: y\r\n\r\n") == [(None, b"y")]  # that LF was half of a CRLF: no extra line


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


# ---------------------------------------------------------------- hostile input: bounded, linear, total


def reference_events(stream: bytes) -> list[tuple[int, tuple[str | None, bytes]]]:
    """A slow, obviously right SSE reader: (offset just past the line end that completed it, event)."""
    out = []
    data: list[bytes] = []
    event = None
    i = 0
    while True:
        j = min([k for k in (stream.find(b"\n", i), stream.find(b"\r", i)) if k >= 0], default=-1)
        if j < 0:
            break
        line = stream[i:j]
        end = j + 1  # the event is complete once its last line end has arrived (a CR of a CRLF too)
        i = j + 2 if stream[j:j + 2] == b"\r\n" else j + 1
        if not line:
            if data:
                out.append((end, (event.decode("utf-8", "replace") if event else None, b"\n".join(data))))
            data, event = [], None
        elif line.startswith(b"data:"):
            v = line[5:]
            data.append(v[1:] if v[:1] == b" " else v)
        elif line.startswith(b"event:"):
            v = line[6:].strip()
            event = v[:200] if v and v != b"message" else None
    return out


def test_a_line_without_end_is_capped() -> None:
    d = SSEDecoder(max_event_bytes=1 << 20)
    d.feed(b"data: ")
    with pytest.raises(SSEEventTooLarge, match="1 MiB"):
        for _ in range(100):
            d.feed(b"x" * 65536)
    assert d.pending_bytes == 0  # nothing held after the error


def test_an_event_of_endless_data_lines_is_capped() -> None:
    d = SSEDecoder(max_event_bytes=1 << 20)
    with pytest.raises(SSEEventTooLarge):
        for _ in range(10_000):
            d.feed(b"data: " + b"y" * 200 + b"\n")


def test_an_event_just_under_the_cap_is_delivered() -> None:
    d = SSEDecoder(max_event_bytes=1 << 20)
    body = b"z" * ((1 << 20) - 100)
    events = [e for piece in (b"data: ", body[: len(body) // 2], body[len(body) // 2:], b"\n\n") for e in d.feed(piece)]
    assert events == [(None, body)]


def test_an_unfinished_line_is_kept_in_pieces_not_copied_per_read() -> None:
    # the structure that makes a huge line linear: each read is kept as it came, joined once when
    # the line ends (joining the tail to every read copied the line again per read: quadratic)
    d = SSEDecoder()
    d.feed(b"data: ")
    for _ in range(1000):
        d.feed(b"q" * 1000)
    # (the pieces are private: nothing public shows how a line is held, and its time is a benchmark's)
    assert len(d._pending) == 1001 and d.pending_bytes == 6 + 1000 * 1000
    assert d.feed(b"\n\n") == [(None, b"q" * 1_000_000)]


def test_events_of_many_lines_are_parsed_as_their_lines_arrive() -> None:
    d = SSEDecoder()
    for i in range(1000):
        d.feed(b"data: %d\n" % i)
        assert d._pending_len == 0  # complete lines are not held raw for re-splitting (private, as above)
    assert d.feed(b"\n") == [(None, b"\n".join(b"%d" % i for i in range(1000)))]


SSE_BYTES = st.lists(
    st.sampled_from([b"data: ", b"data:", b"event: ", b"event: message", b"id: 1", b":c", b"x", b'{"a":1}',
                     b"[DONE]", b"\n", b"\r", b"\r\n", b"\n\n", b" ", b"\xff", b"retry: 5"]) | st.binary(max_size=8),
    max_size=60,
).map(b"".join)


@given(stream=SSE_BYTES, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_bytes_any_split_events_come_exactly_when_completed(stream: bytes, cuts: list[int]) -> None:
    """Property: the decoder never raises on arbitrary bytes under the cap, and every event comes out
    of the very feed() whose bytes completed it (no event late: its timing is the measurement)."""
    ref = reference_events(stream)
    points = sorted({c for c in cuts if 0 < c < len(stream)})
    d = SSEDecoder()
    got: list[tuple[int, tuple[str | None, bytes]]] = []
    prev = 0
    for p in [*points, len(stream)]:
        got.extend((p, e) for e in d.feed(stream[prev:p]))
        prev = p
    tail = d.finish()
    for end, ev in ref:
        fed_at = next(p for p in [*points, len(stream)] if p >= end)
        assert (fed_at, ev) in got, (stream, points, ev)
    assert [e for _, e in got] == [e for _, e in ref]
    # finish() may deliver one last event not followed by a blank line, nothing else
    assert len(tail) <= 1


# ------------------------------------------------------------------ runs of plain text events

HEAD = b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
TAIL = b',"logprobs":null,"finish_reason":null}]}'
KEY = b'"content":"'


def chat_event(text: bytes) -> bytes:
    return HEAD + b'{"content":"' + text + b'"}' + TAIL


PLAIN = "plain"
ROLE = HEAD + b'{"role":"assistant","content":""}' + TAIL  # ends like a plain event, starts otherwise
FINISH = HEAD.replace(b'"delta":', b'"delta":{}') + b',"logprobs":null,"finish_reason":"length"}]}'
USAGE = b'{"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}'


def sse(*datas: bytes) -> bytes:
    return b"".join(b"data: " + d + b"\n\n" for d in datas)


def test_template_around_the_text() -> None:
    tpl = EventTemplate.around(chat_event(b" hello"), KEY)
    assert tpl is not None
    assert tpl.prefix == b"data: " + HEAD + b'{"content":"'
    assert tpl.suffix == b'"}' + TAIL + b"\n\n"
    # escaped quotes and backslashes inside the text do not end it
    for text in (rb"a\"b", rb"a\\", rb"\\\"", rb'\u0022'):
        t = EventTemplate.around(chat_event(text), KEY)
        assert t is not None and t.suffix == tpl.suffix, text
    assert EventTemplate.around(chat_event(b""), KEY) is None  # empty text: not a text event
    assert EventTemplate.around(USAGE, KEY) is None  # no text field
    assert EventTemplate.around(b'{"content":"x","content":"y"}', KEY) is None  # the key twice
    assert EventTemplate.around(b'{"content":"unterminated', KEY) is None


def is_plain(name: str | None, data: bytes, tpl: EventTemplate) -> bool:
    wire = b"data: " + data + b"\n\n"
    return (name is None and wire.startswith(tpl.prefix) and wire.endswith(tpl.suffix)
            and len(wire) > len(tpl.prefix) + len(tpl.suffix))


def learner(calls: list[bytes]):
    """The client's side: a plain text event (here: a chat event with text) gives the template."""
    def learn(data: bytes) -> EventTemplate | None:
        calls.append(data)
        return EventTemplate.around(data, KEY) if data.startswith(HEAD + b'{"content":"') else None
    return learn


def run_reads(parts: list[bytes], learn) -> tuple[list, SSEDecoder]:
    """Every event, in order; plain text events as PLAIN, whether counted in a run or returned."""
    d = SSEDecoder(learn=learn)
    out: list = []
    for p in parts:
        for name, data in d.feed_runs(p):
            if isinstance(data, int):
                out.extend([PLAIN] * data)
            elif d.template is not None and is_plain(name, data, d.template):
                out.append(PLAIN)
            else:
                out.append((name, data))
    out.extend(d.finish())
    return out, d


STREAM_RUN = (
    sse(ROLE)
    + sse(*(chat_event(b" w%d" % i) for i in range(12)))
    + b": keep-alive\n\n"
    + sse(chat_event(rb' \"quoted\"","logprobs\":null'), chat_event(b""), ROLE, chat_event(b" back"))
    + b"event: error\ndata: " + chat_event(b"not plain: named event") + b"\n\n"
    + sse(*(chat_event(b" v%d" % i) for i in range(9)), FINISH, USAGE, DONE)
)


def expected_events(stream: bytes) -> list:
    tpl = EventTemplate.around(chat_event(b"x"), KEY)
    assert tpl is not None
    return [PLAIN if is_plain(name, data, tpl) else (name, data) for name, data in decode_all([stream])]


@pytest.mark.parametrize("seed", range(40))
def test_feed_runs_gives_the_same_events_in_order_for_any_split(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(STREAM_RUN)), rng.randint(0, 30)))
    parts = [STREAM_RUN[i:j] for i, j in zip([0, *cuts], [*cuts, len(STREAM_RUN)], strict=True)]
    expected = expected_events(STREAM_RUN)
    assert expected.count(PLAIN) == 12 + 2 + 9  # the empty one and the named event are not plain
    calls: list[bytes] = []
    got, d = run_reads(parts, learner(calls))
    assert got == expected
    assert d.template is not None and calls[:2] == [ROLE, chat_event(b" w0")]  # learnt from the first text


def test_a_read_of_one_plain_event_or_a_large_run_is_counted() -> None:
    d = SSEDecoder(learn=learner([]))
    d.template = EventTemplate.around(chat_event(b"x"), KEY)
    assert list(d.feed_runs(sse(chat_event(b" one")))) == [(None, 1)]
    assert d.feed_runs(sse(*(chat_event(b" m%d" % i) for i in range(300)))) == [(None, 300)]


def test_a_response_in_one_read_is_counted_from_its_first_plain_event() -> None:
    calls: list[bytes] = []
    d = SSEDecoder(learn=learner(calls))
    body = sse(ROLE, *(chat_event(b" t%d" % i) for i in range(50)), FINISH, USAGE, DONE)
    assert d.feed_runs(body + b'data: {"par') == [
        (None, ROLE), (None, chat_event(b" t0")), (None, 49), (None, FINISH), (None, USAGE), (None, DONE)]
    assert d.pending_bytes > 0  # the unfinished event waits for the next read
    assert d.feed_runs(b'tial":1}\n\n') == [(None, b'{"partial":1}')]
    assert len(calls) == 2


def test_learning_gives_up_after_a_few_events() -> None:
    calls: list[bytes] = []
    d = SSEDecoder(learn=learner(calls))
    body = sse(*(USAGE for _ in range(10)))  # never a text event: continuous usage, say
    assert d.feed_runs(body) == [(None, USAGE)] * 10
    assert d.feed_runs(body) == [(None, USAGE)] * 10
    assert len(calls) == LEARN_TRIES and d.template is None


def test_feed_runs_falls_back_when_an_event_inside_the_run_differs() -> None:
    # an empty text, a role chunk (same suffix, other prefix), malformed events, and line ends
    # inside a text (an SSE line end there would hide a line or an event)
    odds = (chat_event(b""), ROLE, b"{not json", chat_event(b"a") + b"junk", chat_event(b"a\nb"),
            chat_event(b"a\rb"), chat_event(b"a\r\n\r\nb"), chat_event(b"a") + b"\n\n\ndata: " + chat_event(b"b"))
    many = tuple(chat_event(b" m%d" % i) for i in range(200))  # a read over 8 kB: LFs counted by numpy
    for odd in odds:
        for body in (sse(chat_event(b"a"), odd, chat_event(b"b")), sse(*many, odd, *many), sse(odd)):
            d = SSEDecoder(learn=learner([]))
            d.template = EventTemplate.around(chat_event(b"x"), KEY)
            assert d.feed_runs(body) == decode_all([body]), odd
    assert EventTemplate.around(chat_event(b"a\nb"), KEY) is None
    assert EventTemplate.around(chat_event(b"a\rb"), KEY) is None


FRAGMENTS = [
    *(sse(chat_event(t)) for t in (b" a", b" bb", rb"\"q\"", rb"x\\", b"")),
    sse(*(chat_event(b" r%d" % i) for i in range(12))), sse(*(chat_event(b" s%d" % i) for i in range(12))),
    sse(ROLE), sse(FINISH), sse(USAGE), sse(DONE), b": keep-alive\n\n", b"event: error\ndata: boom\n\n",
    b"data: " + chat_event(b"crlf") + b"\r\n\r\n", sse(chat_event(b"cr\rin text")), b"\n", b"\r", b"data: ", b"junk", b'"},"logprobs"',
]


@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=40),
       cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_feed_runs_any_mix_any_split_gives_the_events_feed_gives(parts: list[bytes], cuts: list[int]) -> None:
    """Property: whatever the stream (plain events, other events, junk, CR line ends) and however it
    is split, feed_runs gives the events feed gives, in order, each in the same read, with runs
    standing for plain text events only."""
    stream = b"".join(parts)
    points = sorted({c for c in cuts if 0 < c < len(stream)}) + [len(stream)]
    tpl = EventTemplate.around(chat_event(b"x"), KEY)
    assert tpl is not None
    plain, runs = SSEDecoder(), SSEDecoder(learn=learner([]))
    prev = 0
    for p in points:
        want = [PLAIN if is_plain(n, e, tpl) else (n, e) for n, e in plain.feed(stream[prev:p])]
        got: list = []
        for n, e in runs.feed_runs(stream[prev:p]):
            if isinstance(e, int):
                got.extend([PLAIN] * e)
            else:
                got.append(PLAIN if is_plain(n, e, tpl) else (n, e))
        assert got == want, (stream, points, p)
        prev = p
    assert runs.finish() == plain.finish()
