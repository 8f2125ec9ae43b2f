"""The crash detector and `specload scan-log` against the real server logs in shared/fixtures.

The fixtures live outside the repository (``<clone>/../shared/fixtures/server-logs``, or under
``$SPECLOAD_SHARED``); their conventions are defined in that folder's README.md and expected.jsonl.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specload.watch.signatures import CrashDetector, CrashEntry, scan_text

MS = 1_000_000
REPO = Path(__file__).resolve().parents[2]


def _fixture_dir() -> Path | None:
    candidates = []
    if os.environ.get("SPECLOAD_SHARED"):
        candidates.append(Path(os.environ["SPECLOAD_SHARED"]) / "fixtures" / "server-logs")
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "server-logs")
    for c in candidates:
        if (c / "expected.jsonl").is_file():
            return c
    return None


FIXTURES = _fixture_dir()
SKIP_REASON = "server-log fixtures not found: set SPECLOAD_SHARED or put shared/ beside the clone"


def _expected() -> list[dict]:
    if FIXTURES is None:
        return []
    lines = (FIXTURES / "expected.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


EXPECTED = _expected()
CASES = [pytest.param(case, id=case["file"][:3]) for case in EXPECTED] or [
    pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))
]


def _scan(case: dict) -> list[CrashEntry]:
    assert FIXTURES is not None
    data = (FIXTURES / case["file"]).read_bytes()
    return scan_text(data.decode("utf-8", errors="replace"))


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


@pytest.mark.parametrize("case", CASES)
def test_fixture_crashes_found(case: dict) -> None:
    entries = _scan(case)
    if not case["crashes"]:
        assert entries == [], f"{case['file']} is a normal log, found:\n{_describe(entries)}"
        return
    for want in case["crashes"]:
        assert any(_matches(e, want) for e in entries), (
            f"{case['file']}: expected {want}\nfound:\n{_describe(entries)}"
        )


@pytest.mark.parametrize("case", CASES)
def test_fixture_distinct_signatures(case: dict) -> None:
    entries = _scan(case)
    signatures = {e.signature for e in entries}
    assert len(signatures) == case["distinct_signatures"], f"{case['file']}:\n{_describe(entries)}"
    # one entry per signature per process
    keys = [(e.signature, e.process) for e in entries]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("case", CASES)
def test_fixture_live_feed_finds_the_same_crashes(case: dict) -> None:
    """Fed line by line with a clock and polled after every line, as the log tailer does."""
    assert FIXTURES is not None
    text = (FIXTURES / case["file"]).read_bytes().decode("utf-8", errors="replace")
    det = CrashDetector(settle_ns=300 * MS)
    live: list[CrashEntry] = []
    for i, line in enumerate(text.split("\n")):
        t = i * 5 * MS  # 5 ms per line: a quiet traceback is released by poll after 60 lines
        live.extend(det.feed(line, t))
        live.extend(det.poll(t))
    live.extend(det.finish())
    for want in case["crashes"]:
        assert any(_matches(e, want) for e in live), f"{case['file']}: live feed missed {want}"
    assert len({e.signature for e in live}) == case["distinct_signatures"]


# ------------------------------------------------------------------------------------ the real CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specload.cli", "scan-log", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(FIXTURES is None, reason=SKIP_REASON)
def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    assert FIXTURES is not None
    crash_case = next(c for c in EXPECTED if c["file"].startswith("014"))
    normal_case = next(c for c in EXPECTED if not c["crashes"])

    crashed = _cli(str(FIXTURES / crash_case["file"]), "--json")
    assert crashed.returncode == 1, crashed.stderr
    objects = [json.loads(line) for line in crashed.stdout.splitlines()]
    assert len(objects) >= len(crash_case["crashes"])
    for obj in objects:
        assert {
            "exception_type",
            "message",
            "innermost_frame",
            "process",
            "signature",
            "line",
            "causes",
        } <= set(obj)
    assert len({o["signature"] for o in objects}) == crash_case["distinct_signatures"]

    human = _cli(str(FIXTURES / crash_case["file"]))
    assert human.returncode == 1 and "EngineDeadError" in human.stdout

    clean = _cli(str(FIXTURES / normal_case["file"]), "--json")
    assert (clean.returncode, clean.stdout) == (0, "")

    assert _cli().returncode == 2  # usage error: no FILE

    missing = _cli(str(tmp_path / "no-such.log"))
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    assert "no-such.log" in missing.stderr
