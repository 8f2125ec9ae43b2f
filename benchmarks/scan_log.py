"""scan-log speed and memory on a large normal server log, optionally against another checkout.

    python benchmarks/scan_log.py [--lines 400000] [--repeat 3] [--compare /path/to/other/checkout]
    python benchmarks/scan_log.py --gigabyte          # peak RSS on a ~1 GB log (streaming check)

The log is built from the normal (crash-free) logs of tests/data/unseen-logs, repeated until it has
``--lines`` lines, so it has the mix of prefixes and serving lines real servers print. Each run is
``specload scan-log FILE --json`` in a subprocess; the figures are the median wall time, microseconds
per line (from the child's CPU time) and its peak RSS (ru_maxrss). With ``--compare DIR`` the same file is scanned by the
specload package found in DIR (a ``git worktree`` or ``git archive`` of another commit), runs
interleaved, and the ratio is printed: on a shared machine only the same-run ratio is meaningful.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NORMAL = REPO / "tests" / "data" / "unseen-logs"


ONLY: tuple[str, ...] = ()  # --only: file-name prefixes of the normal logs to use (default: all of them)


def normal_lines() -> list[bytes]:
    cases = [json.loads(ln) for ln in (NORMAL / "expected.jsonl").read_text().splitlines() if ln.strip()]
    out: list[bytes] = []
    for c in cases:
        if not c["crashes"] and (not ONLY or c["file"].startswith(ONLY)):
            out.extend((NORMAL / c["file"]).read_bytes().splitlines())
    return out


def build_log(path: Path, n_lines: int) -> int:
    src = normal_lines()
    with path.open("wb") as f:
        written = 0
        while written < n_lines:
            chunk = src[: n_lines - written]
            f.write(b"\n".join(chunk) + b"\n")
            written += len(chunk)
    return path.stat().st_size


def build_big(path: Path, target_bytes: int) -> int:
    src = b"\n".join(normal_lines()) + b"\n"
    block = src * max(1, (8 << 20) // len(src))
    with path.open("wb") as f:
        size = 0
        while size < target_bytes:
            f.write(block)
            size += len(block)
    return size


def scan_once(code_dir: Path, log: Path) -> tuple[float, float, int]:
    """(CPU s, peak RSS MB, exit code) of one scan-log child using the package in code_dir.

    CPU time (user + system of the child) rather than wall time: on a shared 2-core machine the wall
    time swings with whatever else runs, the CPU the scan needs much less."""
    env = dict(os.environ, PYTHONPATH=str(code_dir))
    # wait4 gives this child's own rusage (RUSAGE_CHILDREN would be the max over all children so far)
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload.cli", "scan-log", str(log), "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=code_dir,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, rc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", type=Path, help="another checkout whose specload to scan with too")
    ap.add_argument("--gigabyte", action="store_true", help="one scan of a ~1 GB log: peak memory")
    ap.add_argument("--only", default="", help="comma-separated file-name prefixes of the normal logs to use")
    a = ap.parse_args()
    global ONLY
    ONLY = tuple(x for x in a.only.split(",") if x)
    codes = [("this", REPO)] + ([("compare", a.compare.resolve())] if a.compare else [])
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "normal.log"
        if a.gigabyte:
            size = build_big(log, 1 << 30)
            lines = sum(1 for _ in log.open("rb"))
            repeat = 1
        else:
            size = build_log(log, a.lines)
            lines = a.lines
            repeat = a.repeat
        print(f"log: {lines:,} lines, {size / 1e6:.1f} MB; machine: {os.cpu_count()} cores (shared)")
        results: dict[str, list[tuple[float, float, int]]] = {name: [] for name, _ in codes}
        for _ in range(repeat):
            for name, code in codes:
                results[name].append(scan_once(code, log))
        medians = {}
        for name, code in codes:
            cpus = [r[0] for r in results[name]]
            rss = max(r[1] for r in results[name])
            rcs = {r[2] for r in results[name]}
            med = statistics.median(cpus)
            medians[name] = min(cpus)
            print(
                f"{name:8s} {code}: CPU median {med:.2f} s, min {min(cpus):.2f} s "
                f"({min(cpus) / lines * 1e6:.2f} us/line), peak RSS {rss:.0f} MB, exit {sorted(rcs)}"
            )
        if a.compare:
            print(f"ratio this/compare (min CPU): {medians['this'] / medians['compare']:.3f}")


if __name__ == "__main__":
    main()
