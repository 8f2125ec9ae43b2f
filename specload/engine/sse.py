"""Server-sent events, split at the byte level.

Pure and I/O-free: the streaming client feeds it whatever bytes the socket gave and gets back the
complete events. Splitting is done on bytes (no decode of the whole stream) because this is the hot
path: every streamed token passes through here. Only ``data:`` and ``event:`` fields matter to an LLM
stream; ``id:``, ``retry:`` and comment lines (``:keep-alive``) are skipped.
"""

from __future__ import annotations

DONE = b"[DONE]"


class SSEDecoder:
    """Incremental SSE decoder. ``feed`` returns the events completed by the new bytes.

    An event is ``(event_name, data)``: ``event_name`` is ``None`` for the default ``message`` type,
    ``data`` the joined ``data:`` lines as bytes (not decoded). Lines may end in LF, CRLF or CR.
    """

    __slots__ = ("_tail", "_data", "_event")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []
        self._event: bytes | None = None

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        buf = self._tail + chunk if self._tail else chunk
        if b"\r" in buf or self._data or self._event is not None:
            return self._feed_lines(buf)
        # Fast path, taken for nearly every LLM stream: LF line ends and events that are one
        # ``data:`` line. Whole events are cut at blank lines; anything unusual inside an event
        # goes through the line parser, and an unfinished event stays raw in the tail.
        parts = buf.split(b"\n\n")
        self._tail = parts.pop()
        out: list[tuple[str | None, bytes]] = []
        append = out.append
        for ev in parts:
            if ev[:6] == b"data: " and b"\n" not in ev:
                append((None, ev[6:]))
            elif ev:
                out.extend(self._lines(ev.split(b"\n") + [b""]))
        return out

    def _feed_lines(self, buf: bytes) -> list[tuple[str | None, bytes]]:
        held_cr = b""
        if b"\r" in buf:
            # CRLF and lone CR are both line ends in SSE. A CR at the very end may be the first half
            # of a CRLF split across reads, so it is held back raw until the next read decides.
            if buf[-1:] == b"\r":
                buf = buf[:-1]
                held_cr = b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._tail = lines.pop() + held_cr
        return self._lines(lines)

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
            elif line[:6] == b"event:":
                v = line[6:].strip()
                self._event = v if v and v != b"message" else None
            # id:, retry:, comments (":...") and unknown fields are ignored per the SSE spec
        return out

    def _dispatch(self) -> tuple[str | None, bytes]:
        data = self._data
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        name = self._event.decode("utf-8", "replace") if self._event is not None else None
        self._data = []
        self._event = None
        return name, payload

    def finish(self) -> list[tuple[str | None, bytes]]:
        """End of stream: a last event not followed by a blank line is still delivered.

        Servers differ in whether the final ``data: [DONE]`` ends with a blank line; being lenient
        here costs nothing and avoids calling a complete stream malformed.
        """
        out: list[tuple[str | None, bytes]] = []
        tail = self._tail.rstrip(b"\r")
        self._tail = b""
        if tail:
            out.extend(self._feed_lines(tail + b"\n"))
            self._tail = b""
        if self._data:
            out.append(self._dispatch())
        return out

    @property
    def pending_bytes(self) -> int:
        return len(self._tail) + sum(len(d) for d in self._data)
