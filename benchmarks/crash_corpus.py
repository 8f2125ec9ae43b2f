"""The crash detector's accuracy on a corpus of logs with expectations (expected.jsonl).

    python benchmarks/crash_corpus.py [DIR] [--from NNN] [--verbose]

DIR defaults to tests/data/unseen-logs (``../shared/fixtures/server-logs`` works too). For each log:
expected entries found, missed (no entry with that type, message prefix and frame), misattributed
(found, but on another process), unexpected entries, and whether the distinct-signature count and the
failure count (``failures``, when the expectation has it) match. The totals are the figures quoted when
the detector changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specload.watch.crashbook import SignatureBook  # noqa: E402
from specload.watch.detector import scan_text  # noqa: E402


def _matches(e, want: dict, *, process: bool = True) -> bool:
    return (
        e.exception_type == want["exception_type"]
        and (not process or e.process == want["process"])
        and e.innermost_frame == want["innermost_frame"]
        and e.message.strip().startswith(want["message_prefix"].strip())
    )


def failures_of(text: str) -> int:
    """Failures as the live run counts them: the sum of the counts of the book's events."""
    from specload.watch.detector import CrashDetector

    det, book = CrashDetector(), SignatureBook()
    entries = []
    for line in text.split("\n"):
        entries.extend(det.feed(line))
    entries.extend(det.finish())
    for e in entries:
        book.add(e, 0)
    return sum(ev.count for ev in book.events())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", type=Path, default=REPO / "tests" / "data" / "unseen-logs")
    ap.add_argument("--from", dest="start", default="000", help="only files whose name sorts at or after this")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    cases = [json.loads(ln) for ln in (a.dir / "expected.jsonl").read_text().splitlines() if ln.strip()]
    cases = [c for c in cases if c["file"][: len(a.start)] >= a.start]
    tot = {"expected": 0, "found": 0, "missed": 0, "misattributed": 0, "unexpected": 0,
           "signatures_wrong": 0, "failures_wrong": 0, "files_failing": 0}
    for case in cases:
        text = (a.dir / case["file"]).read_bytes().decode("utf-8", errors="replace")
        entries = scan_text(text)
        found = missed = misattr = 0
        for want in case["crashes"]:
            if any(_matches(e, want) for e in entries):
                found += 1
            elif any(_matches(e, want, process=False) for e in entries):
                misattr += 1
            else:
                missed += 1
        unexpected = sum(1 for e in entries if not any(_matches(e, w) for w in case["crashes"]))
        sig_ok = len({e.signature for e in entries}) == case["distinct_signatures"]
        fail_ok = True
        failures = None
        if "failures" in case:
            failures = failures_of(text)
            fail_ok = failures == case["failures"]
        bad = missed or misattr or unexpected or not sig_ok or not fail_ok
        for k, v in (("expected", len(case["crashes"])), ("found", found), ("missed", missed),
                     ("misattributed", misattr), ("unexpected", unexpected)):
            tot[k] += v
        tot["signatures_wrong"] += not sig_ok
        tot["failures_wrong"] += not fail_ok
        tot["files_failing"] += bool(bad)
        if bad or a.verbose:
            extra = f" failures {failures}/{case['failures']}" if failures is not None else ""
            print(f"{'FAIL' if bad else 'ok  '} {case['file'][:60]:60s} found {found}/{len(case['crashes'])} "
                  f"missed {missed} misattr {misattr} unexpected {unexpected} "
                  f"signatures {'ok' if sig_ok else 'WRONG'}{extra}")
            if bad and a.verbose:
                for e in entries:
                    print(f"      {e.exception_type} | {e.message[:70]!r} | {e.innermost_frame} | {e.process}")
    print(f"{len(cases)} logs: " + ", ".join(f"{k} {v}" for k, v in tot.items()))


if __name__ == "__main__":
    main()
