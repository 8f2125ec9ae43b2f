"""specload started with a standard descriptor closed (``2>&-``, ``>&-``, ``<&-``), as cron jobs and
careless scripts do. Before, with stderr closed the run exited 1 silently at start (the next socket
or pipe took descriptor 2), and with stdout closed uvloop aborted (SIGABRT) closing a descriptor
below 3. Now /dev/null stands in for what is closed and the run completes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from specload.record.reader import read_record
from tests import processes


@pytest.mark.parametrize("fd", [0, 1, 2])
def test_a_run_with_a_standard_descriptor_closed_completes(tmp_path: Path, fd: int) -> None:
    rec = tmp_path / "r.jsonl"
    p = processes.run(
        [sys.executable, "-m", "specload.cli", "run", "-c", "1", "-n", "2", "--max-tokens", "4", "--json",
         "--record", str(rec), "--sim-args", "--ttft-ms 1 --itl-ms 1 --quiet"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=60, preexec_fn=lambda: os.close(fd),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr.decode()
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "completed" and len(data.requests) == 2
    if fd != 1:
        assert orjson.loads(p.stdout)["ok"] == 2
    if fd != 2:
        assert b"Traceback" not in p.stderr
