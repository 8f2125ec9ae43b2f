"""``specload run --find-max`` as a user runs it: real processes, the built-in simulator it starts.

What the search finds against the simulator's timing model is tested in virtual time
(``test_capacity_virtual.py``), where a busy machine cannot move it; here: a server that crashes
mid-search (its crash is detected in the simulator's log, the search ends without a best point, the
record and ``report`` say so), and bad options. Every run is bounded by --max-duration.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from specload.record.reader import read_record
from tests import processes

SPECLOAD = [sys.executable, "-m", "specload.cli"]

def run(args: list[str], timeout: float = 150) -> subprocess.CompletedProcess:
    return processes.run(SPECLOAD + args, capture_output=True, text=True, timeout=timeout)


def search_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.stdout, proc.stderr[-2000:]
    return orjson.loads(proc.stdout)


@pytest.mark.slow
def test_a_crash_mid_search_ends_it_without_a_best_point(tmp_path: Path) -> None:
    rec = tmp_path / "crash.jsonl"
    # pinned timing, 4 slots: C=2 takes at most 56 requests (its cap), the crash comes after 70, in a later probe
    proc = run(["run", "-c", "2", "--find-max", "--max-tokens", "10", "--ignore-eos", "--prompt", "hi",
                "--sim-args", "--ttft-ms 5 --itl-ms 5 --spec-tokens 0 --max-batch 4 --crash-after 70",
                "--max-duration", "60", "--record", str(rec), "--json"])
    assert proc.returncode == 3, proc.stderr[-2000:]  # a server crash was detected
    s = search_json(proc)["search"]
    assert s["reason"] == "crashed" and s["best"] is None
    assert "the server crashed" in s["message"] and "no best point" in s["message"]
    probed = [p["value"] for p in s["probes"]]
    assert probed and probed[0] == 2  # the probes that completed before the crash
    assert "capacity search: the server crashed" in proc.stderr
    data = read_record(rec)
    results = [e["value"] for e in data.events if e.get("kind") == "search" and e["value"]["phase"] == "result"]
    assert len(results) == 1 and results[0]["best"] is None
    # the completed probes are levels of the record, and so is the one the crash cut short (not used;
    # which one comes next, a doubling or a bisection, is the search's reading of throughputs that a
    # busy machine moves)
    *done, cut = [lv["concurrency"] for lv in data.levels]
    assert done == probed and cut not in probed
    rep = processes.run(SPECLOAD + ["report", str(rec)], capture_output=True, text=True, timeout=30)
    assert rep.returncode == 0 and "capacity search (concurrency): the server crashed" in rep.stdout


def test_bad_search_options_are_one_line_errors() -> None:
    for args, message in (
        (["--slo", "ttft_p99<=500"], "needs a unit"),
        (["--slo", "speed_p50<=1s"], "unknown metric"),
        (["--find-max", "--max-probes", "0"], "--max-probes"),
        (["--search-max", "64"], "applies to --find-max"),
    ):
        proc = run(["run", *args], timeout=30)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
