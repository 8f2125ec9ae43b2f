"""Idle cost: specload's own CPU at a gentle load (16 streams of 50 tok/s = 800 tok/s).

    python benchmarks/idle_cost.py [--seconds 15] [--workers 1]

The simulator pins 20 ms per token (50 tok/s per stream); specload runs 16 streams for a fixed
time with --record, and its own per-second CPU samples (the record's ``client`` lines, the same
figures the TUI shows) give the CPU share. Also printed: whole-process CPU / wall including
start-up. Target (issue #6): under 8 % of a core headless.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from _common import run_child, simulator

from specload.record.reader import read_record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    with simulator("--ttft-ms", "20", "--itl-ms", "20", "--spec-tokens", "0") as (url, _), \
            tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "idle.jsonl"
        res, wall, cpu = run_child([
            sys.executable, "-m", "specload.cli", "run", url, "-c", "16", "-d", str(a.seconds),
            "--max-tokens", "200", "--ignore-eos", "--record", str(rec), "--workers", str(a.workers),
        ])
        if res.returncode:
            raise SystemExit(res.stderr[-600:])
        data = read_record(str(rec))
        lv = data.levels[0]
        samples = [c["cpu_pct"] for c in data.clients if c["cpu_pct"] is not None][1:]  # skip the start-up second
    print(f"load: 16 streams, {lv['throughput_tok_s']:.0f} tok/s for {lv['wall_s']:.1f} s, workers={a.workers}")
    print(f"specload CPU while running (per-second samples, median): {statistics.median(samples):.1f} % of a core "
          f"(max {max(samples):.1f} %)   target < 8 %")
    print(f"whole process incl. start-up and shutdown: {100 * cpu / wall:.1f} % of a core over {wall:.1f} s")


if __name__ == "__main__":
    main()
