"""Reading a file another program wrote in bounded memory: its lines, each at most a cap long, or the
whole of it, at most a cap in size.

Records, other tools' result files, ``--schedule-from`` / ``--baseline`` files and server logs may be
anything: /dev/zero, a binary, a record with one 200 MB line. Read whole (``f.read()``) such a file
costs its size several times over, and one without an end never returns. Here a file is streamed in
chunks; a line over its cap, or a file over its size cap, stops the reading with ``TooLong``, a
one-line reason naming the file and the line, which each command turns into its own error. No I/O
but reading; shared by record/ and watch/, so it lives beside the vocabulary.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

READ_BYTES = 1 << 20
# far above any line specload writes (a request line with 16,384 chunk times is about 300 kB)
MAX_LINE_BYTES = 16 << 20
# a whole result file, or one line of a tool that writes a run per line (SGLang's JSONL)
MAX_DOCUMENT_BYTES = 1 << 30


class TooLong(ValueError):
    """A line or a file over its cap; ``str()`` is one line for the user, naming the file."""


def _mib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n} bytes"


def iter_lines(source: str | os.PathLike[str] | int, max_line_bytes: int = MAX_LINE_BYTES, *, name: str | None = None
               ) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, line without its newline, whether a newline ended it)`` for each line of
    ``source`` (a path, or a file descriptor, read and not closed), blank lines included; only the
    last can be unended. At most one line is held. ``TooLong`` at the first line over
    ``max_line_bytes``; ``OSError`` as ``open`` and ``read`` raise it."""
    label = name or (f"file descriptor {source}" if isinstance(source, int) else os.fspath(source))
    with open(source, "rb", buffering=READ_BYTES, closefd=not isinstance(source, int)) as f:
        for n in itertools.count(1):
            line = f.readline(max_line_bytes + 1)
            if not line:
                return
            if line.endswith(b"\n"):
                yield n, line[:-1], True
            elif len(line) > max_line_bytes:
                raise TooLong(f"{label}: line {n} runs over {_mib(max_line_bytes)} without a line end")
            else:
                yield n, line, False


def read_capped(path: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The whole of ``path``, or ``TooLong`` once it is over ``max_bytes`` (a regular file's size is
    checked before reading; a pipe or a device is read until the cap)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise TooLong(f"{path} is over {_mib(max_bytes)} ({_mib(size)}): too large to read")
        parts, n = [], 0
        while data := f.read(READ_BYTES):
            n += len(data)
            if n > max_bytes:
                raise TooLong(f"{path} is over {_mib(max_bytes)}: too large to read")
            parts.append(data)
    return b"".join(parts)
