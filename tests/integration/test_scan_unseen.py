"""The crash detector against logs written here from real crash reports it was not developed on.

``tests/data/unseen-logs`` holds logs modeled on public issue threads (the ``source`` key of each line of
its ``expected.jsonl`` names the thread), in the same format and under the same conventions as the shared
server-log fixtures (their README.md). Unknown keys in ``expected.jsonl`` are ignored.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import processes
from tests.integration.crash_corpus import (
    check_failures,
    check_found,
    check_live_feed,
    check_roots,
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


@pytest.mark.parametrize("case", [c for c in CASES if "roots" in c.values[0]])
def test_unseen_first_failure_in_time_is_the_root_cause(case: dict) -> None:
    check_roots(case, read_log(DATA, case))


# ------------------------------------------------------------------------------------ the real CLI


# Runs a command in a child of its own and writes that child's peak RSS (KiB) to the file
# descriptor given first. Linux counts in a process's peak the memory of the process image it
# replaced at exec, so a child forked from the test process starts at the test process's size
# (grown by ~100 MB when the Ray tests ran in it): the command is forked from this small launcher
# instead, and measured there with wait4.
_LAUNCHER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "os.write(int(sys.argv[1]), str(usage.ru_maxrss).encode())\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _scan_cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``specload scan-log`` in a child; (result, the child's peak RSS in MB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as peak:
        fd = peak.fileno()
        proc = processes.popen([sys.executable, "-c", _LAUNCHER, str(fd), sys.executable, "-m", "specload.cli",
                                 "scan-log", *args], stdout=out, stderr=err, pass_fds=(fd,))
        try:
            proc.wait(timeout=110)  # (under the suite's 120 s per test)
        except subprocess.TimeoutExpired:
            processes.kill_group(proc.pid)  # the launcher and the scan-log it forked
            proc.wait()
            pytest.fail(f"scan-log {' '.join(args)} still ran after 110 s")
        out.seek(0)
        err.seek(0)
        peak.seek(0)
        res = subprocess.CompletedProcess(proc.args, proc.returncode, out.read().decode(), err.read().decode())
        kib = int(peak.read() or b"0")
    return res, kib / 1024


def test_cli_counts_failures_like_the_live_run_and_shows_consequences() -> None:
    res, _ = _scan_cli(str(DATA / "048_llamacpp_compose_restart_loop_same_assert_5x.log"))
    assert res.returncode == 1
    assert ": 5 failures, 1 root cause (2 entries)" in res.stdout
    assert "seen:       5x" in res.stdout
    assert "then:       process_exit: exited with code 134 (SIGABRT) on llama-1 (5x)" in res.stdout
    # two engine deaths of one appended log, 91 s (the log's own times) and 578 lines apart
    two, _ = _scan_cli(str(DATA / "051_vllm_appended_log_two_engine_deaths_91s_apart.log"))
    assert ": 2 failures, 1 root cause (2 entries)" in two.stdout
    assert "seen:       2x on APIServer" in two.stdout
    js, _ = _scan_cli(str(DATA / "025_sglang_docker_compose_scheduler_oom.log"), "--json")
    objs = [json.loads(line) for line in js.stdout.splitlines()]
    roots = {o["signature"] for o in objs if o["consequence_of"] is None}
    assert len(roots) == 1 and {o["consequence_of"] for o in objs} == {None, *roots}


@pytest.mark.slow
def test_cli_streams_a_big_log_in_bounded_memory(tmp_path: Path) -> None:
    # 64 MB of long normal lines (the whole file used to be read, decoded and split in memory: about
    # 3.5x its size, 170 MB for 48 MB), a crash at the very end, and a 3 MB line (examined cut)
    log = tmp_path / "big.log"
    with log.open("wb") as f:
        line = b"INFO 01-01 00:00:00 [x.py:1] " + b"a" * 4000 + b"\n"
        for _ in range(16_000):
            f.write(line)
        f.write(b"\x00" * (3 << 20) + b"\n")
        f.write(b"terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: boom\n")
    res, peak_mb = _scan_cli(str(log), "--json")
    assert res.returncode == 1
    (obj,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert obj["exception_type"] == "c10::Error" and obj["line"] > 16_000
    assert peak_mb < 80, peak_mb  # the interpreter (23 MB), one read, a few cut pieces: 37 MB seen


def test_cli_refuses_a_file_without_line_ends_in_one_line() -> None:
    # /dev/zero never ends: it was read on (cut into 1 MiB pieces) until killed
    res, peak_mb = _scan_cli("/dev/zero")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == "specload scan-log: /dev/zero: line 1 runs over 16 MiB without a line end: not a text log\n"
    assert peak_mb < 80, peak_mb
