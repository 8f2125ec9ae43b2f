"""specload's memory stays bounded whatever a server sends: measured as the peak RSS of a real
``specload run`` process (os.wait4 on the child) against the hostile test server.

Before: 16 streams of 100 MB lines without a newline reached 1 GB RSS (the SSE decoder buffered the
line, copying it on every read), blocked the loop long enough for a false "server down" and exit 4.
Now an event over 4 MiB is an error for its request and the connection is dropped.
"""

from __future__ import annotations

import asyncio
import sys

import orjson
import pytest

from tests import processes

PEAK_MB = 250  # the process idles at ~70 MB; 16 streams each holding a capped 4 MiB event: < 150 MB


WRAPPER = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
    "out, err = p.communicate()\n"
    "import resource\n"
    "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n')\n"
    "sys.stdout.flush(); os.write(1, out); os.write(2, err); sys.exit(p.returncode)\n"
)


async def run_measured(*args: str) -> tuple[int, float, bytes, bytes]:
    """``specload ARGS`` under a wrapper whose only child it is, so RUSAGE_CHILDREN is its peak RSS."""
    proc = await processes.exec_async(
        sys.executable, "-c", WRAPPER, sys.executable, "-m", "specload.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    first, _, rest = out.partition(b"\n")
    return proc.returncode, int(first) / 1024, rest, err


async def test_sixteen_streams_of_endless_lines_stay_bounded(hostile) -> None:
    server = await hostile()
    server.mode, server.params = "giant_line", {"size": 100 << 20}
    code, peak_mb, out, err = await run_measured(
        "run", server.url, "--api", "chat", "-c", "16", "-n", "16", "--max-tokens", "8", "--json",
        "--metrics-url", "off")
    assert code == 5, err.decode()[-2000:]  # every request failed, and the run said so: no "server down"
    summary = orjson.loads(out)
    assert summary["reason"] == "completed" and summary["requests"] == 16
    assert sum(summary["errors"].values()) == 16
    assert peak_mb < PEAK_MB, f"peak RSS {peak_mb:.0f} MB"
    print("PEAK", peak_mb)
    assert b"server down" not in err


async def test_dev_zero_as_a_dataset_is_refused_within_bounded_memory(tmp_path) -> None:
    code, peak_mb, _, err = await run_measured("run", "--dataset", "/dev/zero", "-c", "1", "-n", "1")
    assert code == 2 and b"/dev/zero: not a text file" in err
    assert peak_mb < 150, f"peak RSS {peak_mb:.0f} MB"


@pytest.mark.slow
async def test_endless_fast_streams_keep_bounded_detail(hostile) -> None:
    # before: every chunk offset of every request was kept; 4 endless fast streams reached 938 MB in 40 s
    server = await hostile()
    server.mode, server.params = "endless", {"max_s": 60.0}
    code, peak_mb, out, err = await run_measured(
        "run", server.url, "--api", "chat", "-c", "4", "-n", "4", "--max-tokens", "8", "--json",
        "--request-timeout", "8", "--metrics-url", "off", "--no-health")
    summary = orjson.loads(out)
    assert summary["errors"] == {"timeout": 4}, err.decode()[-2000:]
    # ~400,000 chunks per request in 8 s: 131 MB with every offset kept, 73 MB capped (measured)
    assert peak_mb < 110, f"peak RSS {peak_mb:.0f} MB"


async def test_files_from_elsewhere_are_read_within_bounded_memory(tmp_path) -> None:
    # before: `report /dev/zero` ended in a MemoryError traceback, and a record with one 200 MB line
    # cost 853 MB (read whole, split, then parsed); now a line over 16 MiB is a one-line error, exit 2
    code, peak_mb, _, err = await run_measured("report", "/dev/zero")
    assert code == 2 and b"Traceback" not in err, err.decode()[-2000:]
    assert err.decode().strip() == ("specload report: /dev/zero: line 1 runs over 16 MiB without a line end "
                                    "(a corrupted record, or not a record)")
    assert peak_mb < 150, f"peak RSS {peak_mb:.0f} MB"
    rec = tmp_path / "r.jsonl"
    with open(rec, "wb") as f:
        f.write(b'{"type":"run","version":1}\n{"type":"event","t_s":1,"kind":"note","value":"')
        f.write(b"a" * (48 << 20) + b'"}\n{"type":"end","reason":"completed"}\n')
    code, peak_mb, _, err = await run_measured("report", str(rec))
    assert code == 2 and b"r.jsonl: line 2 runs over 16 MiB without a line end" in err, err.decode()[-2000:]
    assert peak_mb < 150, f"peak RSS {peak_mb:.0f} MB"
    # the same file as a schedule or a baseline: refused before any load (no URL is reached)
    for option in ("--schedule-from", "--baseline"):
        code, peak_mb, _, err = await run_measured("run", "http://127.0.0.1:9", option, str(rec), "-n", "1")
        assert code == 2 and b"line 2 runs over 16 MiB" in err and b"Traceback" not in err, err.decode()[-2000:]
        assert peak_mb < 150, f"peak RSS {peak_mb:.0f} MB"
