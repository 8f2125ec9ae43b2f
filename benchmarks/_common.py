"""Shared bits of the benchmark scripts: start the simulator as a subprocess, measure a child's CPU.

Benchmarks only ever talk to 127.0.0.1 and bound every load in requests and seconds.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from contextlib import contextmanager


@contextmanager
def simulator(*args: str):
    """A ``specload sim`` subprocess on a free loopback port; yields (url, Popen)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload.sim", "--host", "127.0.0.1", "--port", "0", "--quiet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"simulator did not start: {line!r}")
        yield line.split("listening on ")[1].strip(), proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def proc_cpu_s(pid: int) -> float:
    """user+system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(parts[11]) + int(parts[12])) / ticks


def run_child(cmd: list[str], timeout: float = 300, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run a command; return (result, wall seconds, CPU seconds of the child and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return res, wall, cpu
