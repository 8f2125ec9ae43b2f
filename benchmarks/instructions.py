"""Instructions per streamed token, counted by callgrind: the repeatable measure of the hot path.

    python benchmarks/instructions.py [--small 40] [--large 160] [--max-tokens 500] [--api completions] [--burst 16]

CPU time on a shared 2-core machine swings by tens of percent between runs; the number of
instructions a run executes does not. This runs ``specload run`` twice under ``valgrind
--tool=callgrind`` against ``benchmarks/bench_server.py`` (C=16, ``--small`` and ``--large``
requests of ``--max-tokens`` tokens each) and prints the instructions per token of the difference,
so start-up and shutdown cancel out and what is left is the steady state: the stream reading,
classification, live statistics and records per token. It also prints the top C functions of the
steady state in instructions per token (``callgrind_annotate``; CPython 3.11's Python frames all
show as ``_PyEval_EvalFrameDefault``, so use cProfile for the Python side). Under valgrind the
client is ~50x slower than the server, so its reads are larger than in a native run: compare
figures of this script with each other, not with CPU times.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ceiling import bench_server

TOTALS = re.compile(r"^\s*([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", re.M)


FUNC = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?)(?: \[.*\])?$")


def functions(ann: str) -> dict[str, int]:
    """Exclusive instructions per function from callgrind_annotate's listing."""
    out: dict[str, int] = {}
    for ln in ann.splitlines():
        m = FUNC.match(ln)
        if m and "PROGRAM TOTALS" not in ln:
            # the path of CPython's build tree is noise: keep the file's base name and the function
            name = m.group(2).rsplit("/", 1)[-1]
            out[name] = out.get(name, 0) + int(m.group(1).replace(",", ""))
    return out


def run(url: str, n: int, a: argparse.Namespace, out: str) -> tuple[int, dict[str, int]]:
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           sys.executable, "-m", "specload.cli", "run", url, "-c", "16", "-n", str(n),
           "--max-tokens", str(a.max_tokens), "--ignore-eos", "--api", a.api, "--no-health",
           "--metrics-url", "off", "--json", "--no-record", *a.extra.split()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"specload under callgrind failed: {res.stderr[-1500:]}")
    # --threshold=100: every function, so the two runs can be subtracted function by function
    ann = subprocess.run(["callgrind_annotate", "--threshold=100", out], capture_output=True, text=True).stdout
    m = TOTALS.search(ann)
    if not m:
        raise SystemExit("no totals in callgrind_annotate output")
    return int(m.group(1).replace(",", "")), functions(ann)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=40)
    ap.add_argument("--large", type=int, default=160)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--api", default="completions")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--extra", default="", help="extra specload options")
    ap.add_argument("--burst", type=int, default=16, help="bench server: SSE events per write (1: one token each)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, bench_server(1, a.burst) as (url, _pids):
        small, f_small = run(url, a.small, a, f"{tmp}/small.out")
        large, f_large = run(url, a.large, a, f"{tmp}/large.out")
    tokens = (a.large - a.small) * a.max_tokens
    print(f"setup: C=16, {a.small} and {a.large} requests x {a.max_tokens} tokens, --api {a.api}, bench server")
    print(f"instructions: {small:,} ({a.small} requests), {large:,} ({a.large} requests)")
    print(f"steady state: {(large - small) / tokens:,.0f} instructions per token")
    print("\ntop functions of the steady state (the large run minus the small one), instructions per token:")
    diff = {k: (v - f_small.get(k, 0)) / tokens for k, v in f_large.items()}
    for name, per in sorted(diff.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"  {per:8,.0f}  {name}")


if __name__ == "__main__":
    main()
