"""No callback on the engine's loop holds it for more than 2 ms while a load runs.

A callback that blocks the loop delays the reading of every stream at that moment: those requests
show a TTFT (or an ITL) the server never had. The level here runs with everything a real run has
going on (the record and its flushes, /health, /metrics scrapes, the server log followed, the client
load monitor, the first second of live statistics closing) against a simulator that closes the
connection after every stream, as llama-server does.

The slow-callback report is the probe's (stats/slow_callbacks.py): it times every callback the
loop runs, as asyncio's debug mode does with ``slow_callback_duration`` at 2 ms, but without debug
mode's own cost. Debug mode records a stack trace for every handle, future and task it creates, and
that alone took the connection set-up callbacks of this level to 1.3-2.0 ms of CPU (2.03 ms failed a
clean CI run) where they take at most 1.1 ms in a real run; a measurement with debug mode on measures
debug mode. Every report fails the test unless the probe shows the callback was slow only by
run-queue wait: its thread was runnable but not running (another process held the CPUs, which a
shared 2-core CI machine does), so the time was not the callback's. What it did by itself (wall
time minus run-queue wait) must stay within 2 ms.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from specload.record.reader import read_record
from specload.session import Session
from specload.stats.slow_callbacks import SlowCallbackProbe
from tests.conftest import make_config
from tests.waiting import until

THRESHOLD_MS = 2.0


@pytest.fixture
def sim_process(tmp_path):
    log = tmp_path / "sim.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload.sim", "--port", "0", "--ttft-ms", "20", "--itl-ms", "5", "--spec-tokens",
         "0", "--close-after-stream", "--seed", "1", "--log-file", str(log), "--log-interval", "0.5"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line
        yield line.split("listening on ")[1].strip(), log
    finally:
        proc.terminate()
        proc.wait(10)


async def test_no_callback_blocks_the_loop_for_more_than_2ms_during_a_level(sim_process, tmp_path) -> None:
    url, log = sim_process
    rec = tmp_path / "run.jsonl"
    cfg = make_config(url, concurrency=(4,), requests_per_level=40, drain=True, max_tokens=64,
                      server_log=str(log), server_log_from_start=True, metrics_interval_s=0.5,
                      path=str(rec))
    session = Session(cfg)
    with SlowCallbackProbe(threshold_ms=THRESHOLD_MS) as probe:
        probe.active = False  # start-up (imports, the server probe) is not the load
        task = asyncio.ensure_future(session.run())
        await until(lambda: task.done() or (session.runner is not None and session.runner.started > 0), 30)
        probe.active = True
        await until(lambda: task.done() or session.runner.state in ("finished", "stopped"), 60)
        probe.active = False
        result = await asyncio.wait_for(task, 30)
    assert result.reason == "completed"
    data = read_record(str(rec))
    assert sum(1 for r in data.requests if r["ok"]) == 40
    assert probe.callbacks > 1000  # the probe saw the load's callbacks
    blocking = probe.blocking()
    assert not blocking, "\n".join(str(b) for b in blocking)


async def test_the_probe_reports_a_callback_that_blocks_the_loop() -> None:
    # what the level test relies on: a callback holding the loop in a blocking call is reported with
    # its own time (the thread slept: no run-queue wait to discount)
    loop = asyncio.get_running_loop()
    with SlowCallbackProbe(threshold_ms=THRESHOLD_MS) as probe:
        done = loop.create_future()
        loop.call_soon(lambda: (time.sleep(0.01), done.set_result(None)))
        await done
    assert any(s.own_ms >= 8 for s in probe.blocking()), probe.slow
