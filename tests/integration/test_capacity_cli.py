"""``specload run --find-max`` as a user runs it, against the built-in simulator it starts itself.

Each test derives the answer from the simulator's timing model (``sim/model.py``) rather than from a
previous run:

- Batch model: a decode step of a batch of b sequences takes ``step_ms * (1 + step_slope * (b - 1))``
  and gives each of them one token (``--spec-tokens 0``); with no prefill cost and requests of equal
  length, the C streams of a closed loop decode in lockstep, so every request's TPOT is the step time
  at batch C, and throughput is C tokens per step, C / (1 + slope (C - 1)) in units of 1/step_ms: it
  grows with C (less and less) until ``--max-batch`` B, beyond which requests queue and it stays flat.
- So with ``--max-batch B`` and no objectives, the search's knee is B: every step up to B still adds
  tokens (its scaling efficiency stays above 0.8 for B = 6 and slope 0.03), the step past B adds none.
- And with ``tpot_p50<=L``, the highest concurrency meeting it is the largest C with
  step_ms (1 + slope (C - 1)) <= L: for step 20 ms, slope 0.1 and L = 45 ms, C = 13 (44 ms; C = 14 takes
  46 ms). A busy machine only makes steps later, never earlier, so the search may stop lower, never
  higher: the test accepts 11..13.

Timing is pinned by these settings (no randomness in step times), levels are a few seconds each, and
every run is bounded by --max-duration.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from specload.record.reader import read_record

SPECLOAD = [sys.executable, "-m", "specload.cli"]

pytestmark = pytest.mark.slow


def run(args: list[str], timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(SPECLOAD + args, capture_output=True, text=True, timeout=timeout)


def batch_sim(step_ms: float, slope: float, max_batch: int, *extra: str) -> str:
    return (f"--step-ms {step_ms} --step-slope {slope} --prefill-base-ms 0 --prefill-per-token-ms 0 "
            f"--spec-tokens 0 --max-batch {max_batch} --seed 1 " + " ".join(extra))


def search_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.stdout, proc.stderr[-2000:]
    return orjson.loads(proc.stdout)


def test_the_knee_is_the_simulators_batch_limit(tmp_path: Path) -> None:
    rec = tmp_path / "knee.jsonl"
    proc = run(["run", "-c", "2", "--find-max", "--max-tokens", "20", "--ignore-eos", "--prompt", "hi",
                "--sim-args", batch_sim(10, 0.03, 6), "--max-duration", "120", "--record", str(rec), "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = search_json(proc)["search"]
    assert s["knee"]["reached"] and s["knee"]["value"] == 6, s["message"]
    assert s["best"]["value"] == 6 and s["limited_by"] == "saturation"
    # throughput at the knee: 6 tokens per step of 10 * (1 + 0.03 * 5) = 11.5 ms, so at most 522 tok/s
    # (lockstep rounds lose a little between requests)
    t, lo, hi = s["best"]["throughput_tok_s"]
    assert 400 < t <= 522 * 1.01 and lo <= t <= hi
    # every probe is an ordinary level of the record, and report shows the search again
    data = read_record(rec)
    assert [lv["concurrency"] for lv in data.levels] == [p["value"] for p in s["probes"]]
    rep = subprocess.run(SPECLOAD + ["report", str(rec)], capture_output=True, text=True, timeout=30)
    assert rep.returncode == 0 and "capacity search" in rep.stdout and "knee of the throughput curve: C=6" in rep.stdout


def test_the_objective_limit_matches_the_timing_model(tmp_path: Path) -> None:
    proc = run(["run", "-c", "4", "--find-max", "--slo", "tpot_p50<=45ms", "--max-tokens", "16", "--ignore-eos",
                "--prompt", "hi", "--sim-args", batch_sim(20, 0.1, 64), "--max-duration", "140", "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = search_json(proc)
    s = out["search"]
    assert s["best"] is not None, s["message"]
    assert 11 <= s["best"]["value"] <= 13, s["message"]
    assert s["limited_by"] == "objectives"
    lo, hi = s["bracket"]
    assert lo == s["best"]["value"] and hi is not None and hi <= 14
    # the levels carry goodput: the best level met the objective, the first one above it did not
    levels = {lv["concurrency"]: lv for lv in out["levels"]}
    assert levels[lo]["goodput"]["verdict"] == "met"
    assert levels[hi]["goodput"]["verdict"] == "missed"
    tpot = levels[hi]["goodput"]["objectives"][0]
    assert tpot["name"] == "tpot_p50" and tpot["value_ms"][0] > 45


def test_a_crash_mid_search_ends_it_without_a_best_point(tmp_path: Path) -> None:
    rec = tmp_path / "crash.jsonl"
    # pinned timing, 4 slots: probes 2 (14 requests) and 4 (16) complete, the crash comes during C=8
    proc = run(["run", "-c", "2", "--find-max", "--max-tokens", "10", "--ignore-eos", "--prompt", "hi",
                "--sim-args", "--ttft-ms 5 --itl-ms 5 --spec-tokens 0 --max-batch 4 --crash-after 40",
                "--max-duration", "60", "--record", str(rec), "--json"])
    assert proc.returncode == 3, proc.stderr[-2000:]  # a server crash was detected
    s = search_json(proc)["search"]
    assert s["reason"] == "crashed" and s["best"] is None
    assert "EAGLEWorkerV2" in s["message"] and "no best point" in s["message"]
    assert [p["value"] for p in s["probes"]] == [2, 4]
    assert "capacity search: the server crashed" in proc.stderr
    data = read_record(rec)
    results = [e["value"] for e in data.events if e.get("kind") == "search" and e["value"]["phase"] == "result"]
    assert len(results) == 1 and results[0]["best"] is None


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
