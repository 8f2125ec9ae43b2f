"""Memory: resident size of a long run (default 100,000 requests) that streams its record to disk.

    python benchmarks/memory.py [--requests 100000] [--max-tokens 16]

Against the max-speed simulator, so the run is short; the peak RSS of the specload process
(``ru_maxrss`` of the child) is the figure. Target (issue #6): under 200 MB.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import simulator


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=64)
    a = ap.parse_args()
    with simulator("--max-speed", "--spec-tokens", "0") as (url, _), tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "long.jsonl"
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "specload.cli", "run", url, "-c", str(a.concurrency), "-n", str(a.requests),
             "--max-tokens", str(a.max_tokens), "--ignore-eos", "--record", str(rec), "--json"],
            capture_output=True, text=True, timeout=1800,
        )
        wall = time.perf_counter() - t0
        if p.returncode:
            raise SystemExit(p.stderr[-600:])
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        size_mb = rec.stat().st_size / 1e6
        lines = sum(1 for _ in rec.open("rb"))
    print(f"{a.requests} requests x {a.max_tokens} tokens at C={a.concurrency} in {wall:.0f} s")
    print(f"peak RSS of specload: {peak_mb:.0f} MB (target < 200 MB); record {size_mb:.0f} MB, {lines} lines on disk")


if __name__ == "__main__":
    main()
