"""A full disk under a running record: the file ends at a complete line, the lines lost are counted,
the run stops with a one-line error and its summary, and ``report`` reads what was written.

Two real ways to fill a disk: a small tmpfs (needs root and mount rights; skipped without them) and
a file-size limit (RLIMIT_FSIZE: the kernel cuts writes short, then fails them with EFBIG, as a full
disk does with ENOSPC), which runs anywhere. Before, the failure printed a traceback, dropped the
whole failed batch and left the record cut mid-line.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from specload.record.reader import read_record
from tests import processes

SPECLOAD = [sys.executable, "-m", "specload.cli"]
LIMIT = 48 * 1024


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):  # yields the mount point
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = processes.run(["mount", "-t", "tmpfs", "-o", f"size={LIMIT}", "tmpfs", str(mnt)],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        processes.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _run_until_full(record: Path, preexec=None) -> subprocess.CompletedProcess:
    return processes.run(
        SPECLOAD + ["run", "-c", "8", "-n", "100000", "--max-tokens", "20", "--ignore-eos", "--json",
                    "--record", str(record), "--sim-args", "--ttft-ms 1 --itl-ms 1 --spec-tokens 0 --quiet"],
        capture_output=True, text=True, timeout=120, preexec_fn=preexec,
    )  # fmt: skip


def _check(p: subprocess.CompletedProcess, record: Path) -> None:
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("specload: error:")]
    assert len(errors) == 1, p.stderr
    m = re.search(r"writing record .* failed: .*; (\d+) record lines? lost, the record ends at its last "
                  r"complete line \((\d+) lines\)", errors[0])
    assert m, errors[0]
    lost, kept = int(m.group(1)), int(m.group(2))
    summary = orjson.loads(p.stdout)  # the summary is still printed
    assert summary["reason"] == "stopped" and summary["requests"] > 0
    data = record.read_bytes()
    assert data.endswith(b"\n")  # cut back to its last complete line
    assert len(data.splitlines()) == kept
    assert lost > 0
    rec = read_record(str(record))
    assert rec.bad_lines == 0 and rec.requests
    # every request the run counted is either in the file or among the lines said to be lost
    assert summary["requests"] <= len([r for r in rec.requests if not r["warmup"]]) + lost
    rep = processes.run(SPECLOAD + ["report", str(record)], capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    assert "Traceback" not in rep.stderr


def test_a_file_size_limit_mid_run(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    _check(_run_until_full(record, preexec=_limit_file_size), record)


def test_a_full_tmpfs_mid_run(tiny_tmpfs: Path) -> None:
    record = tiny_tmpfs / "r.jsonl"
    _check(_run_until_full(record), record)


def _report(*args: str, preexec=None) -> subprocess.CompletedProcess:
    return processes.run(SPECLOAD + ["report", *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=preexec)


def test_a_report_onto_a_full_disk_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: the page (~280 kB) was cut at the limit and left there, a broken file of 48 KiB
    from tests.unit.test_peers import PEERS

    if PEERS is None:
        pytest.skip("peer-result fixtures not found: set SPECLOAD_SHARED or put shared/ beside the clone")
    record = str(PEERS / "specload-spec-ngram-c4.jsonl")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))  # matplotlib's cache: made by the first run
    out = tmp_path / "out"
    out.mkdir()
    html, png = out / "r.html", out / "r.png"
    p = _report(record, "--html", str(html), "--plot", str(png))  # whole, with the mode a plain write gives
    assert p.returncode == 0, p.stderr
    for f in (html, png):
        assert f.stat().st_size > LIMIT and f.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert html.read_bytes().endswith(b"</html>\n")
    assert sorted(f.name for f in out.iterdir()) == ["r.html", "r.png"]
    html.write_bytes(b"an earlier report")
    p = _report(record, "--html", str(html), preexec=_limit_file_size)
    assert p.returncode == 2 and p.stderr.strip() == f"specload report: cannot write {html}: File too large", p.stderr
    assert html.read_bytes() == b"an earlier report"  # as it was, and no temporary file beside it
    assert sorted(f.name for f in out.iterdir()) == ["r.html", "r.png"]
    svg = out / "r.svg"
    p = _report(record, "--plot", str(svg), preexec=_limit_file_size)
    assert p.returncode == 2 and p.stderr.strip() == f"specload report: cannot write {svg}: File too large", p.stderr
    assert sorted(f.name for f in out.iterdir()) == ["r.html", "r.png"]  # none made


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
