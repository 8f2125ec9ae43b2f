"""Server-sent events, split at the byte level.

Pure and I/O-free: the streaming client feeds it whatever bytes the socket gave and gets back the
complete events. Splitting is done on bytes (no decode of the whole stream) because this is the hot
path: every streamed token passes through here. Only ``data:`` and ``event:`` fields matter to an LLM
stream; ``id:``, ``retry:`` and comment lines (``:keep-alive``) are skipped.

The bytes come from a server, so they are bounded: an event (its data lines and the unfinished line
being read) larger than ``max_event_bytes`` raises ``SSEEventTooLarge`` rather than growing without
end, and an unfinished line is kept as a list of pieces joined once when its line end arrives, so a
huge line costs linear time (joining the tail to every read made a 40 MB line cost 24 s of CPU).

``feed_runs`` is the steady-state path: servers serialise the plain text chunks of one response
identically except for the text (compact JSON from vLLM, SGLang, llama.cpp, TGI), so once the client
has parsed one such event and knows its bytes around the text (an ``EventTemplate``), a run of them
is recognised and counted with a few C-level scans of the whole read, without splitting it into
events; anything else in the read is decoded as usual. Byte searches use ``find``/``count``, never
``in`` (``bytes.__contains__`` formats a TypeError message per call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

DONE = b"[DONE]"
ONE_PLAIN: tuple[tuple[None, int]] = ((None, 1),)  # feed_runs of a read that is one plain event (this object)
# unnamed events offered to ``learn`` before a stream is decoded event by event to its end (a chat
# stream's first event is the role chunk; some servers send an empty text first)
LEARN_TRIES = 4

# No LLM server sends an event anywhere near this (SGLang's /generate repeats the whole text so far
# in each event: 4 MiB is a million tokens of text); memory stays bounded at this per stream.
MAX_EVENT_BYTES = 4 << 20


def _newlines(buf: bytes, begin: int, end: int) -> int:
    """The LFs in ``buf[begin:end]``. ``bytes.count`` of one byte is a plain loop, the costliest of a
    run's scans when a read holds a whole response (37 us for 90 kB); numpy compares 16 bytes at a
    time (7 us) but costs ~2 us to start, so it takes only the large reads (imported then)."""
    if end - begin < 8192:
        return buf.count(b"\n", begin, end)
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(buf, np.uint8, end - begin, begin) == 10))


class SSEEventTooLarge(ValueError):
    """An SSE event (or a line without its end) grew past the cap; one line for the record."""


class EventTemplate:
    """The bytes of one stream's plain text events around their text: ``prefix + TEXT + suffix``.

    ``prefix`` starts with ``data: `` and ends where the JSON string of the text starts; ``suffix``
    starts with the quote that closes it and ends with the blank line. Built from an event the
    client has parsed and found to be a plain text chunk (text, no finish, no usage, no error), so
    any event with the same bytes around a non-empty text is one too. A valid JSON string cannot
    contain the suffix (its quotes would be escaped), which is what makes counting them sound.
    """

    __slots__ = ("prefix", "suffix", "boundary", "empty", "junction", "newlines", "single")

    def __init__(self, prefix: bytes, suffix: bytes) -> None:
        self.prefix = prefix
        self.suffix = suffix
        self.boundary = suffix + prefix  # one event ending where the next begins
        self.empty = prefix + suffix  # an event with empty text
        # where an empty text's prefix meets its suffix, 64 bytes: under 100, where CPython's slower
        # two-way search begins, and long, which its skip table makes fast (9 us for 90 kB; 32 bytes: 16)
        self.junction = prefix[-32:] + suffix[:32]
        self.newlines = prefix.count(b"\n") + suffix.count(b"\n")  # per event: 2 (the blank line)
        # its only line ends are the blank line's: a read of one such event is told by its ends
        self.single = self.newlines == 2 and suffix.endswith(b"\n\n")

    @classmethod
    def around(cls, data: bytes, key: bytes) -> EventTemplate | None:
        """The template of an event whose ``data:`` is ``data``, around the JSON string after ``key``.

        ``key`` is the field with its opening quote (``b'"text":"'``). None when the key is absent or
        appears twice, the string is empty or not closed, or the data is not one line.
        """
        k = data.find(key)
        if k < 0 or data.find(b"\n") >= 0 or data.find(b"\r") >= 0:  # one line, or no template
            return None
        k += len(key)
        j = k
        while True:
            j = data.find(b'"', j)
            if j < 0:
                return None
            b = j
            while b > k and data[b - 1] == 0x5C:  # backslashes before the quote
                b -= 1
            if (j - b) % 2 == 0:  # an even number of them: the quote is not escaped
                break
            j += 1
        if j == k or data.find(key, j) >= 0:
            return None
        return cls(b"data: " + data[:k], data[j:] + b"\n\n")


class SSEDecoder:
    """Incremental SSE decoder. ``feed`` returns the events completed by the new bytes.

    An event is ``(event_name, data)``: ``event_name`` is ``None`` for the default ``message`` type,
    ``data`` the joined ``data:`` lines as bytes (not decoded). Lines may end in LF, CRLF or CR.
    """

    __slots__ = (
        "_pending", "_pending_len", "_data", "_data_len", "_event", "_cr_end", "max_event_bytes",
        "learn", "template", "_tries",
    )

    def __init__(
        self,
        max_event_bytes: int = MAX_EVENT_BYTES,
        learn: Callable[[bytes], EventTemplate | None] | None = None,
    ) -> None:
        # the bytes after the last complete line (or, on the fast path, after the last complete
        # event, when they hold no line end), as received: joined only when a line end arrives
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._data: list[bytes] = []  # data lines of the event being read
        self._data_len = 0
        self._event: bytes | None = None
        # the last read ended in CR: a line end already acted on, whose LF (if CRLF was split
        # between reads) arrives at the start of the next read and must not count as a blank line
        self._cr_end = False
        self.max_event_bytes = max_event_bytes
        # feed_runs: given the data of an unnamed event, the stream's plain-event template or None
        # (the client decides, by parsing the event, what counts as a plain text event)
        self.learn = learn
        self.template: EventTemplate | None = None
        self._tries = 0

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        buf = self._gather(chunk)
        return self._split(buf) if buf is not None else []

    def _gather(self, chunk: bytes) -> bytes | None:
        """The bytes to decode now: held pieces joined with the new ones, or None while the held
        line still has no end."""
        if self._cr_end and chunk:
            self._cr_end = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        pending = self._pending
        if not pending:
            return chunk
        if chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
            # still no line end: keep the piece, copy nothing (linear in the line's length)
            pending.append(chunk)
            self._pending_len += len(chunk)
            if self._pending_len + self._data_len > self.max_event_bytes:
                self._too_large()
            return None
        pending.append(chunk)
        self._pending = []
        self._pending_len = 0
        return b"".join(pending)

    def _split(self, buf: bytes) -> list[tuple[str | None, bytes]]:
        if buf.find(b"\r") >= 0 or self._data or self._event is not None:
            return self._feed_lines(buf)
        # Fast path, taken for nearly every LLM stream: LF line ends and events that are one
        # ``data:`` line. Whole events are cut at blank lines; anything unusual inside an event
        # goes through the line parser.
        parts = buf.split(b"\n\n")
        tail = parts.pop()
        out: list[tuple[str | None, bytes]] = []
        append = out.append
        for ev in parts:
            if ev[:6] == b"data: " and ev.find(b"\n") < 0:
                append((None, ev[6:]))
            elif ev:
                out.extend(self._lines(ev.split(b"\n") + [b""]))
        if tail:
            if tail.find(b"\n") >= 0:
                # an unfinished event with complete lines: parse them now, so that only the last
                # partial line waits (an event of many lines is never re-split)
                lines = tail.split(b"\n")
                tail = lines.pop()
                out.extend(self._lines(lines))
            if tail:
                self._hold(tail)
        return out

    def feed_runs(self, chunk: bytes) -> Sequence[tuple[str | None, bytes | int]]:
        """``feed`` that counts runs of plain text events instead of splitting them out.

        Returns the events in stream order, with each run of complete events that are
        ``template.prefix + TEXT + template.suffix`` (TEXT not empty) as one item ``(None, n)``,
        ``n`` an int. Until the stream's template is known, the first events are split one at a time
        and offered to ``learn`` (at most ``LEARN_TRIES`` of them), so that a response that
        arrives in one read (the usual case for a client at its ceiling) is counted from the first
        plain event on. When a run is not clean (another event inside it, an empty TEXT), every
        event of the read is returned as ``feed`` returns it.
        """
        if self._pending or self._cr_end:
            buf = self._gather(chunk)
            if buf is None:
                return []
        else:
            buf = chunk
        if self._data or self._event is not None:
            return self._split(buf)  # in the middle of an event: the line parser's business
        tpl = self.template
        if tpl is not None:
            # a read of exactly one plain event (a server writing one token per event, read as it
            # comes): its ends are the template's, its text not empty, and no line end inside it
            if (tpl.single and buf.startswith(tpl.prefix) and buf.endswith(tpl.suffix)
                    and len(buf) > len(tpl.empty) and buf.find(b"\n", 0, len(buf) - 2) < 0
                    and buf.find(b"\r") < 0):
                return ONE_PLAIN
            return self._run(buf, tpl)
        if self.learn is None or self._tries >= LEARN_TRIES:
            return self._split(buf)
        out: list[tuple[str | None, bytes | int]] = []
        while tpl is None and self._tries < LEARN_TRIES:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            events = self._split(buf[:cut + 2])
            buf = buf[cut + 2:]
            out.extend(events)
            for name, data in events:
                if name is None and tpl is None:
                    self._tries += 1
                    tpl = self.template = self.learn(data)
            if self._data or self._event is not None:
                break  # (a CR made those lines end elsewhere) the rest goes the usual way
        if buf:
            out.extend(self._run(buf, tpl) if tpl is not None and not self._data else self._split(buf))
        return out

    def _run(self, buf: bytes, tpl: EventTemplate) -> Sequence[tuple[str | None, bytes | int]]:
        begin = buf.find(tpl.prefix)
        end = buf.rfind(tpl.suffix)
        if begin >= 0 and end > begin and (begin == 0 or buf[begin - 2:begin] == b"\n\n"):
            end += len(tpl.suffix)
            # [begin, end) starts with the prefix and ends with the suffix; with n - 1 suffixes
            # each directly followed by a prefix it is n events prefix + TEXT + suffix, provided
            # there is no other line end in it (an event or a line hidden inside a TEXT takes a
            # newline or a CR) and no TEXT is empty.
            n = buf.count(tpl.boundary, begin, end) + 1
            if (
                _newlines(buf, begin, end) == n * tpl.newlines
                and buf.find(b"\r", begin, end) < 0
                and buf.find(tpl.junction, begin, end) < 0
            ):
                out: list[tuple[str | None, bytes | int]] = []
                if begin:
                    out.extend(self._split(buf[:begin]))
                    if self._pending or self._data or self._event is not None or self._cr_end:
                        # the bytes before the run did not end at an event boundary after all
                        self._reset()
                        return self._split(buf)
                out.append((None, n))
                if end < len(buf):
                    out.extend(self._split(buf[end:]))
                return out
        return self._split(buf)

    def _reset(self) -> None:
        self._pending = []
        self._pending_len = 0
        self._data = []
        self._data_len = 0
        self._event = None
        self._cr_end = False

    def _hold(self, tail: bytes) -> None:
        self._pending = [tail]
        self._pending_len = len(tail)
        if self._pending_len + self._data_len > self.max_event_bytes:
            self._too_large()

    def _too_large(self) -> None:
        size = self._pending_len + self._data_len
        self._pending = []
        self._pending_len = 0
        self._data = []
        self._data_len = 0
        self._event = None
        raise SSEEventTooLarge(
            f"an SSE event grew past {self.max_event_bytes >> 20} MiB ({size} bytes) without ending"
        )

    def _feed_lines(self, buf: bytes) -> list[tuple[str | None, bytes]]:
        if buf.find(b"\r") >= 0:
            # CRLF and lone CR are both line ends in SSE. A CR ending this read ends its line now
            # (an event it completes is not held back a read); a LF starting the next read is then
            # the second half of that CRLF, not a blank line.
            self._cr_end = buf[-1:] == b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        tail = lines.pop()
        out = self._lines(lines)
        if tail:
            self._hold(tail)
        return out

    def _lines(self, lines: list[bytes]) -> list[tuple[str | None, bytes]]:
        """Complete lines (without their line ends) -> the events they finish."""
        out: list[tuple[str | None, bytes]] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(self._dispatch())
                    data = self._data
                else:
                    self._event = None
                continue
            if line[:5] == b"data:":
                v = line[5:]
                if v[:1] == b" ":
                    v = v[1:]
                data.append(v)
                self._data_len += len(v) + 1
                if self._data_len > self.max_event_bytes:
                    self._too_large()
            elif line[:6] == b"event:":
                v = line[6:].strip()
                self._event = v[:200] if v and v != b"message" else None
            # id:, retry:, comments (":...") and unknown fields are ignored per the SSE spec
        return out

    def _dispatch(self) -> tuple[str | None, bytes]:
        data = self._data
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        name = self._event.decode("utf-8", "replace") if self._event is not None else None
        self._data = []
        self._data_len = 0
        self._event = None
        return name, payload

    def finish(self) -> list[tuple[str | None, bytes]]:
        """End of stream: a last event not followed by a blank line is still delivered.

        Servers differ in whether the final ``data: [DONE]`` ends with a blank line; being lenient
        here costs nothing and avoids calling a complete stream malformed.
        """
        out: list[tuple[str | None, bytes]] = []
        tail = b"".join(self._pending)
        self._pending = []
        self._pending_len = 0
        if tail:
            out.extend(self._feed_lines(tail + b"\n"))
            self._pending = []
            self._pending_len = 0
        if self._data:
            out.append(self._dispatch())
        return out

    @property
    def pending_bytes(self) -> int:
        return self._pending_len + self._data_len
