"""Checks shared by the crash-log corpora: the shared server-log fixtures and tests/data/unseen-logs.

Both describe their logs in the shared fixtures' ``expected.jsonl`` format (see the README.md beside
the fixtures): per file the expected crashes (type, message prefix, innermost frame, process) and the
number of distinct signatures; tests/data/unseen-logs adds ``failures`` (how many failures the log shows:
root causes, each counted once with its consequences) and, for some logs, ``roots`` (each root cause's
``[exception_type, first process]``, in order). Unknown keys (``source``, ``notes``) are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

from specload.watch.crashbook import CrashEntry, SignatureBook
from specload.watch.detector import CrashDetector, LogScanner, scan_text

MS = 1_000_000


def load_cases(directory: Path | None) -> list[dict]:
    if directory is None:
        return []
    lines = (directory / "expected.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def read_log(directory: Path, case: dict) -> str:
    return (directory / case["file"]).read_bytes().decode("utf-8", errors="replace")


def matches(entry: CrashEntry, want: dict) -> bool:
    return (
        entry.exception_type == want["exception_type"]
        and entry.process == want["process"]
        and entry.innermost_frame == want["innermost_frame"]
        and entry.message.strip().startswith(want["message_prefix"].strip())
    )


def describe(entries: list[CrashEntry]) -> str:
    return "\n".join(
        f"  {e.exception_type} | {e.message[:80]!r} | {e.innermost_frame} | {e.process} | line {e.line_no}"
        for e in entries
    )


def check_found(case: dict, text: str) -> None:
    """Every expected crash is found; a normal log yields nothing."""
    entries = scan_text(text)
    if not case["crashes"]:
        assert entries == [], f"{case['file']} is a normal log, found:\n{describe(entries)}"
        return
    for want in case["crashes"]:
        assert any(matches(e, want) for e in entries), f"{case['file']}: expected {want}\nfound:\n{describe(entries)}"


def check_signatures(case: dict, text: str, *, exact: bool = False) -> None:
    """The expected number of distinct signatures, one entry per signature per process; with
    ``exact``, nothing beyond the expected entries."""
    entries = scan_text(text)
    assert len({e.signature for e in entries}) == case["distinct_signatures"], f"{case['file']}:\n{describe(entries)}"
    keys = [(e.signature, e.process) for e in entries]
    assert len(keys) == len(set(keys))
    if exact:
        assert len(entries) == len(case["crashes"]), f"{case['file']}:\n{describe(entries)}"


def check_live_feed(case: dict, text: str) -> None:
    """Fed line by line with a clock and polled after every line, as the log tailer does, the
    detector finds the same crashes."""
    det = CrashDetector(settle_ns=300 * MS)
    live: list[CrashEntry] = []
    for i, line in enumerate(text.split("\n")):
        t = i * 5 * MS  # 5 ms per line: a quiet traceback is released by poll after 60 lines
        live.extend(det.feed(line, t))
        live.extend(det.poll(t))
    live.extend(det.finish())
    for want in case["crashes"]:
        assert any(matches(e, want) for e in live), f"{case['file']}: live feed missed {want}"
    assert len({e.signature for e in live}) == case["distinct_signatures"]


def _live_book(text: str) -> SignatureBook:
    """Detector and book fed with a clock and polled after every line, as the live run does."""
    det, book = CrashDetector(settle_ns=300 * MS), SignatureBook()
    t = 0
    for i, line in enumerate(text.split("\n")):
        t = i * 5 * MS
        for e in det.feed(line, t) + det.poll(t):
            book.add(e, t)
    for e in det.finish():
        book.add(e, t)
    return book


def check_roots(case: dict, text: str) -> None:
    """Where the expectation names them, the root causes (type and first process, in order) are those,
    offline and live."""
    scanner = LogScanner()
    scanner.feed_lines(text.split("\n"))
    scanner.finish()
    for book in (scanner.book, _live_book(text)):
        roots = [[ev.exception_type, ev.processes[0] if ev.processes else None] for ev in book.events()]
        assert roots == case["roots"], case["file"]


def check_failures(case: dict, text: str) -> None:
    """``scan-log``'s count (the offline scanner) and the live run's (detector and book fed with a clock,
    polled after every line) both equal the expected number of failures."""
    scanner = LogScanner()
    scanner.feed_lines(text.split("\n"))
    scanner.finish()
    live = _live_book(text).failures
    assert (scanner.book.failures, live) == (case["failures"], case["failures"]), case["file"]
