"""Property tests: the log scanner, the crash detector and the line-prefix cleaner take any bytes.

Whatever a server, a log shipper or a broken disk writes, scanning it must neither raise nor loop: the
scanner reads logs of any size and the detector runs inside the load's event loop. Inputs mix arbitrary
bytes with fragments of real crash markers and prefixes, so the interesting paths (tracebacks, pending
markers, glued lines, learned prefixes) are reached, not only the prefilter.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specload.watch.crashbook import SignatureBook
from specload.watch.detector import CrashDetector, LogScanner
from specload.watch.logline import clean_line, parse_line
from specload.watch.tail import LineSplitter

FRAGMENTS = [
    b"Traceback (most recent call last):", b'  File "/x/y.py", line 3, in f', b"RuntimeError: boom",
    b"During handling of the above exception, another exception occurred:", b"terminate called after "
    b"throwing an instance of 'c10::Error'", b"  what():  CUDA error", b"[rank1]:", b"(VllmWorker rank=0 pid=3) ",
    b"[2025-01-01 00:00:00 TP0] ", b"INFO 01-01 00:00:00 [x.py:1] ", b"Segmentation fault (core dumped)",
    b"Killed", b"vllm-1 exited with code 134", b"mpirun detected that one or more processes exited with "
    b"non-zero status", b"  Process name: [[1,1],0]", b"  Exit code:    1", b"EngineCore encountered a fatal "
    b"error.", b"thread 'main' panicked at a.rs:1:2:", b"Exception 0xc0000005 0x0", b"PC=0x1",
    b"Fatal Python error: Aborted", b"\x1b[31m", b"ESC[0m", b"^M", b"\r", b"\n", b"\x00", b"\xff\xfe",
    b"  | ", b"+-+---- 1 ----", b'{"message": "Traceback (most recent call last):\\n  File", "level": "ERROR"}',
    b"time=x level=ERROR msg=\"llama runner terminated\" error=\"x\"", b"2025-02-11 14:03:22.417 | ERROR | 1 | ",
]

chunks = st.lists(st.one_of(st.binary(max_size=64), st.sampled_from(FRAGMENTS)), max_size=60)


def _lines(data: bytes, cut: int) -> list[str]:
    split = LineSplitter(max_line_bytes=cut)
    out = split.feed(data)
    rest = split.flush()
    return out + ([rest] if rest is not None else [])


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(chunks, st.integers(min_value=1, max_value=200))
def test_scanner_takes_any_bytes(parts: list[bytes], cut: int) -> None:
    data = b"".join(parts)
    scanner = LogScanner()
    lines = _lines(data, cut)
    scanner.feed_lines(lines)
    scanner.finish()
    entries = scanner.entries()
    assert len(entries) <= len(lines) + 1
    for e in entries:
        assert e.line_no >= 1 and scanner.root_of(e)
    assert scanner.book.failures <= len(entries) + len(lines)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(chunks, st.lists(st.integers(min_value=0, max_value=10**9), max_size=60))
def test_live_detector_takes_any_bytes_and_any_clock(parts: list[bytes], times: list[int]) -> None:
    det, book = CrashDetector(settle_ns=300_000_000), SignatureBook()
    t = 0
    for i, line in enumerate(_lines(b"".join(parts), 1 << 20)):
        t += times[i % len(times)] if times else 1
        for e in det.feed(line, t) + det.poll(t):
            book.add(e, t)
    for e in det.finish():
        book.add(e, t)
    assert det.finish() == [] and det.poll(t + 10**12) == []  # finish() left nothing open to emit later


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")),
                 st.lists(st.sampled_from(FRAGMENTS), max_size=12).map(lambda f: b"".join(f).decode("utf-8", "replace"))))
def test_prefix_cleaner_takes_any_text(raw: str) -> None:
    raw = raw.replace("\n", "")  # one physical line, as the splitter hands it over
    cleaned = clean_line(raw)
    assert "\x1b" not in cleaned and "\r" not in cleaned and cleaned == cleaned.rstrip()
    p = parse_line(raw)
    assert p.text == cleaned
    # the body is what is left after the prefixes (or a JSON record's message and traceback)
    assert p.body == "" or p.body in cleaned or "{" in cleaned
