"""FileTail against real files: append, partial lines, truncation, rotation, late creation.

Every wait is on a condition with a deadline; the tail polls every 10 ms.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from specload.watch.tail import FileTail, LineSplitter
from tests.waiting import DEADLINE, until

POLL = 0.01



class Follower:
    """Runs a FileTail in a task and collects what it yields."""

    def __init__(self, tail: FileTail) -> None:
        self.tail = tail
        self.lines: list[str] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for line in self.tail.lines():
            self.lines.append(line)

    async def wait_lines(self, n: int) -> list[str]:
        await until(lambda: len(self.lines) >= n)
        return self.lines

    async def close(self) -> None:
        await self.tail.stop()
        await asyncio.wait_for(self.task, DEADLINE)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "server.log"


async def test_follows_from_end_by_default(log: Path) -> None:
    log.write_bytes(b"old 1\nold 2\n")
    f = Follower(FileTail(log, poll_interval=POLL))
    await until(lambda: f.tail.opens == 1)
    append(log, b"new 1\nnew 2\n")
    assert await f.wait_lines(2) == ["new 1", "new 2"]
    await f.close()
    assert f.lines == ["new 1", "new 2"]


async def test_from_start_reads_the_whole_file(log: Path) -> None:
    log.write_bytes(b"a\nb\n")
    f = Follower(FileTail(log, from_start=True, poll_interval=POLL))
    assert await f.wait_lines(2) == ["a", "b"]
    append(log, b"c\n")
    assert (await f.wait_lines(3))[2] == "c"
    await f.close()


async def test_partial_line_is_held_until_newline(log: Path) -> None:
    log.write_bytes(b"")
    f = Follower(FileTail(log, poll_interval=POLL))
    await until(lambda: f.tail.opens == 1)
    append(log, b"first\nhalf a li")
    await f.wait_lines(1)
    await until(lambda: f.tail.pending_bytes == len(b"half a li"))
    assert f.lines == ["first"]
    append(log, b"ne\n")
    assert await f.wait_lines(2) == ["first", "half a line"]
    await f.close()


async def test_decoding_replaces_bad_bytes_and_strips_crlf(log: Path) -> None:
    log.write_bytes(b"caf\xe9 \xe2\x9c\x93\r\nnext\n")
    f = Follower(FileTail(log, from_start=True, poll_interval=POLL))
    assert await f.wait_lines(2) == ["caf\ufffd \u2713", "next"]
    await f.close()


async def test_truncation_restarts_at_zero(log: Path) -> None:
    notices: list[str] = []
    log.write_bytes(b"")
    f = Follower(FileTail(log, poll_interval=POLL, on_notice=notices.append))
    await until(lambda: f.tail.opens == 1)
    append(log, b"line one is long\nline two is long\n")
    await f.wait_lines(2)
    with open(log, "r+b") as fh:  # copytruncate-style: same inode, size back to 0
        fh.truncate(0)
    await until(lambda: "log truncated, reading from start" in notices)
    append(log, b"after\n")
    assert (await f.wait_lines(3))[2] == "after"
    await f.close()
    assert f.tail.opens == 1


async def test_rotation_reads_rest_of_old_file_then_new_file(log: Path) -> None:
    notices: list[str] = []
    log.write_bytes(b"")
    f = Follower(FileTail(log, poll_interval=POLL, on_notice=notices.append))
    await until(lambda: f.tail.opens == 1)
    append(log, b"before\n")
    await f.wait_lines(1)
    rotated = log.with_name("server.log.1")
    os.rename(log, rotated)
    # The writer has not reopened yet: it still appends to the renamed file, without a newline.
    append(rotated, b"late in old\nunfinished")
    log.write_bytes(b"fresh 1\nfresh 2\n")
    lines = await f.wait_lines(5)
    assert lines == ["before", "late in old", "unfinished", "fresh 1", "fresh 2"]
    assert "log rotated, following the new file" in notices
    assert f.tail.opens == 2
    append(log, b"fresh 3\n")
    assert (await f.wait_lines(6))[5] == "fresh 3"
    await f.close()


async def test_missing_file_is_waited_for_and_read_from_start(log: Path) -> None:
    notices: list[str] = []
    f = Follower(FileTail(log, poll_interval=POLL, on_notice=notices.append))
    await until(lambda: any(n.startswith("waiting for") for n in notices))
    assert f.tail.opens == 0
    log.write_bytes(b"hello\nworld\n")  # created after we started: nothing of it may be skipped
    assert await f.wait_lines(2) == ["hello", "world"]
    assert any("appeared" in n for n in notices)
    await f.close()


async def test_deleted_then_recreated_file_is_followed(log: Path) -> None:
    notices: list[str] = []
    log.write_bytes(b"")
    f = Follower(FileTail(log, poll_interval=POLL, on_notice=notices.append))
    await until(lambda: f.tail.opens == 1)
    log.unlink()
    await until(lambda: any("moved or deleted" in n for n in notices))
    log.write_bytes(b"reborn\n")
    assert await f.wait_lines(1) == ["reborn"]
    await f.close()


async def test_large_backlog_arrives_complete_and_in_order(log: Path) -> None:
    # More than CHUNKS_PER_POLL * CHUNK_BYTES, so the tail has to yield to the loop mid-backlog.
    n = 40_000
    log.write_bytes(b"".join(b"line %06d of the backlog\n" % i for i in range(n)))
    f = Follower(FileTail(log, from_start=True, poll_interval=POLL))
    lines = await f.wait_lines(n)
    assert (
        len(lines) == n and lines[0].endswith("000000 of the backlog") and lines[-1].startswith("line 039999")
    )
    await f.close()


async def test_stop_ends_the_iteration(log: Path) -> None:
    log.write_bytes(b"")
    tail = FileTail(log, poll_interval=10.0)  # a long poll: stop() must still end it at once
    f = Follower(tail)
    await until(lambda: tail.opens == 1)
    await f.close()
    assert f.task.done()


def test_line_splitter_cuts_runaway_lines() -> None:
    s = LineSplitter(max_line_bytes=8)
    assert s.feed(b"0123") == []
    assert s.feed(b"456789") == ["01234567"]  # cut at the cap; the rest starts the next piece
    assert s.feed(b"ab\ncd") == ["89ab"]
    assert s.flush() == "cd"
    assert s.flush() is None
    assert s.cut_lines == 1
    assert s.feed(b"x" * 20) == ["xxxxxxxx", "xxxxxxxx"] and s.cut_lines == 3
    # (a line that arrives whole in one read is not cut: the read size bounds it)
    assert s.feed(b"\n" + b"y" * 20 + b"\n") == ["xxxx", "y" * 20]


def test_line_splitter_decodes_blocks_like_lines() -> None:
    s = LineSplitter()
    data = "é\r\nü\n".encode() + b"\xff\xfe bad\n" + "ab€".encode()
    out = s.feed(data[:2]) + s.feed(data[2:])  # a chunk boundary inside a multi-byte character
    assert out == ["é", "ü", "\ufffd\ufffd bad"] and s.flush() == "ab€"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
async def test_dev_zero_as_a_log_file_is_read_in_capped_lines_and_bounded_memory() -> None:
    import tracemalloc

    tail = FileTail("/dev/zero", from_start=True, poll_interval=0.01, max_line_bytes=64 << 10)
    lines = tail.lines()
    tracemalloc.start()
    try:
        n = 0
        async for line in lines:
            assert len(line) <= 64 << 10
            n += 1
            if n == 400:  # 25 MiB of input without a newline
                break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await tail.stop()
        await lines.aclose()
    assert peak < 8 << 20, peak  # a few pieces and one read's worth, not the input
