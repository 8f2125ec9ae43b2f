"""The crash detector against logs written here from real crash reports it was not developed on.

``tests/data/unseen-logs`` holds logs modeled on public issue threads (the ``source`` key of each line of
its ``expected.jsonl`` names the thread), in the same format and under the same conventions as the shared
server-log fixtures (their README.md). Unknown keys in ``expected.jsonl`` are ignored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.crash_corpus import (
    check_failures,
    check_found,
    check_live_feed,
    check_signatures,
    load_cases,
    read_log,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "unseen-logs"
EXPECTED = load_cases(DATA)
CASES = [pytest.param(case, id=case["file"][:3]) for case in EXPECTED]


def test_every_log_has_an_expectation() -> None:
    logs = {p.name for p in DATA.glob("*.log")}
    assert logs == {case["file"] for case in EXPECTED}


@pytest.mark.parametrize("case", CASES)
def test_unseen_crashes_found(case: dict) -> None:
    check_found(case, read_log(DATA, case))


@pytest.mark.parametrize("case", CASES)
def test_unseen_distinct_signatures(case: dict) -> None:
    # nothing beyond what the expectation lists: these logs were written for this corpus
    check_signatures(case, read_log(DATA, case), exact=True)


@pytest.mark.parametrize("case", CASES)
def test_unseen_live_feed_finds_the_same_crashes(case: dict) -> None:
    check_live_feed(case, read_log(DATA, case))


@pytest.mark.parametrize("case", CASES)
def test_unseen_failures_counted_alike_offline_and_live(case: dict) -> None:
    check_failures(case, read_log(DATA, case))
