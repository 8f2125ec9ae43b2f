"""Server-sent events, split at the byte level.

Pure and I/O-free: the streaming client feeds it whatever bytes the socket gave and gets back the
complete events. Splitting is done on bytes (no decode of the whole stream) because this is the hot
path: every streamed token passes through here. Only ``data:`` and ``event:`` fields matter to an LLM
stream; ``id:``, ``retry:`` and comment lines (``:keep-alive``) are skipped.

The bytes come from a server, so they are bounded: an event (its data lines and the unfinished line
being read) larger than ``max_event_bytes`` raises ``SSEEventTooLarge`` rather than growing without
end, and an unfinished line is kept as a list of pieces joined once when its line end arrives, so a
huge line costs linear time (joining the tail to every read made a 40 MB line cost 24 s of CPU).
"""

from __future__ import annotations

DONE = b"[DONE]"

# No LLM server sends an event anywhere near this (SGLang's /generate repeats the whole text so far
# in each event: 4 MiB is a million tokens of text); memory stays bounded at this per stream.
MAX_EVENT_BYTES = 4 << 20


class SSEEventTooLarge(ValueError):
    """An SSE event (or a line without its end) grew past the cap; one line for the record."""


class SSEDecoder:
    """Incremental SSE decoder. ``feed`` returns the events completed by the new bytes.

    An event is ``(event_name, data)``: ``event_name`` is ``None`` for the default ``message`` type,
    ``data`` the joined ``data:`` lines as bytes (not decoded). Lines may end in LF, CRLF or CR.
    """

    __slots__ = ("_pending", "_pending_len", "_data", "_data_len", "_event", "_cr_end", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
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

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        if self._cr_end and chunk:
            self._cr_end = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        pending = self._pending
        if pending:
            if b"\n" not in chunk and b"\r" not in chunk:
                # still no line end: keep the piece, copy nothing (linear in the line's length)
                pending.append(chunk)
                self._pending_len += len(chunk)
                if self._pending_len + self._data_len > self.max_event_bytes:
                    self._too_large()
                return []
            pending.append(chunk)
            buf = b"".join(pending)
            self._pending = []
            self._pending_len = 0
        else:
            buf = chunk
        if b"\r" in buf or self._data or self._event is not None:
            return self._feed_lines(buf)
        # Fast path, taken for nearly every LLM stream: LF line ends and events that are one
        # ``data:`` line. Whole events are cut at blank lines; anything unusual inside an event
        # goes through the line parser.
        parts = buf.split(b"\n\n")
        tail = parts.pop()
        out: list[tuple[str | None, bytes]] = []
        append = out.append
        for ev in parts:
            if ev[:6] == b"data: " and b"\n" not in ev:
                append((None, ev[6:]))
            elif ev:
                out.extend(self._lines(ev.split(b"\n") + [b""]))
        if tail:
            if b"\n" in tail:
                # an unfinished event with complete lines: parse them now, so that only the last
                # partial line waits (an event of many lines is never re-split)
                lines = tail.split(b"\n")
                tail = lines.pop()
                out.extend(self._lines(lines))
            if tail:
                self._hold(tail)
        return out

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
        if b"\r" in buf:
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
