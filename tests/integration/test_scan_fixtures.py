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

from tests import processes
from tests.integration.crash_corpus import (
    check_found,
    check_live_feed,
    check_signatures,
    load_cases,
    read_log,
)

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
EXPECTED = load_cases(FIXTURES)
CASES = [pytest.param(case, id=case["file"][:3]) for case in EXPECTED] or [
    pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))
]


def _text(case: dict) -> str:
    assert FIXTURES is not None
    return read_log(FIXTURES, case)


@pytest.mark.parametrize("case", CASES)
def test_fixture_crashes_found(case: dict) -> None:
    check_found(case, _text(case))


@pytest.mark.parametrize("case", CASES)
def test_fixture_distinct_signatures(case: dict) -> None:
    check_signatures(case, _text(case))


@pytest.mark.parametrize("case", CASES)
def test_fixture_live_feed_finds_the_same_crashes(case: dict) -> None:
    check_live_feed(case, _text(case))


# ------------------------------------------------------------------------------------ the real CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
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
