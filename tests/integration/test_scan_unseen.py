"""The crash detector against logs written here from real crash reports it was not developed on.

``tests/data/unseen-logs`` holds logs modeled on public issue threads (the ``source`` key of each line of
its ``expected.jsonl`` names the thread), in the same format and under the same conventions as the shared
server-log fixtures (their README.md). Unknown keys in ``expected.jsonl`` are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specload.watch.signatures import CrashDetector, CrashEntry, scan_text

MS = 1_000_000
DATA = Path(__file__).resolve().parents[1] / "data" / "unseen-logs"


def _expected() -> list[dict]:
    lines = (DATA / "expected.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


EXPECTED = _expected()
CASES = [pytest.param(case, id=case["file"][:3]) for case in EXPECTED]


def _text(case: dict) -> str:
    return (DATA / case["file"]).read_bytes().decode("utf-8", errors="replace")


def _matches(entry: CrashEntry, want: dict) -> bool:
    return (
        entry.exception_type == want["exception_type"]
        and entry.process == want["process"]
        and entry.innermost_frame == want["innermost_frame"]
        and entry.message.strip().startswith(want["message_prefix"].strip())
    )


def _describe(entries: list[CrashEntry]) -> str:
    return "\n".join(
        f"  {e.exception_type} | {e.message[:80]!r} | {e.innermost_frame} | {e.process} | line {e.line_no}"
        for e in entries
    )


def test_every_log_has_an_expectation() -> None:
    logs = {p.name for p in DATA.glob("*.log")}
    assert logs == {case["file"] for case in EXPECTED}


@pytest.mark.parametrize("case", CASES)
def test_unseen_crashes_found(case: dict) -> None:
    entries = scan_text(_text(case))
    if not case["crashes"]:
        assert entries == [], f"{case['file']} is a normal log, found:\n{_describe(entries)}"
        return
    for want in case["crashes"]:
        assert any(_matches(e, want) for e in entries), (
            f"{case['file']}: expected {want}\nfound:\n{_describe(entries)}"
        )


@pytest.mark.parametrize("case", CASES)
def test_unseen_distinct_signatures(case: dict) -> None:
    entries = scan_text(_text(case))
    assert len({e.signature for e in entries}) == case["distinct_signatures"], (
        f"{case['file']}:\n{_describe(entries)}"
    )
    # one entry per signature per process, and nothing beyond what the expectation lists
    keys = [(e.signature, e.process) for e in entries]
    assert len(keys) == len(set(keys))
    assert len(entries) == len(case["crashes"]), f"{case['file']}:\n{_describe(entries)}"


@pytest.mark.parametrize("case", CASES)
def test_unseen_live_feed_finds_the_same_crashes(case: dict) -> None:
    """Fed line by line with a clock and polled after every line, as the log tailer does."""
    det = CrashDetector(settle_ns=300 * MS)
    live: list[CrashEntry] = []
    for i, line in enumerate(_text(case).split("\n")):
        t = i * 5 * MS
        live.extend(det.feed(line, t))
        live.extend(det.poll(t))
    live.extend(det.finish())
    for want in case["crashes"]:
        assert any(_matches(e, want) for e in live), f"{case['file']}: live feed missed {want}"
    assert len({e.signature for e in live}) == case["distinct_signatures"]
