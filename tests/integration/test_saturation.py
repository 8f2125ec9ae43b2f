"""Is specload behind? A blocked event loop is flagged saturated (specload's own doing), a process that
gets no CPU is flagged starved (another process's doing), each worded and recorded as such; and the
loop-lag monitor samples often enough to see a 10 ms stall."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from specload.datatypes import HealthChanged, LoadControl
from specload.record.reader import read_record
from specload.session import Session
from specload.stats.client_load import LATENESS, ClientLoad, ClientLoadMonitor, excuse, lag_outside
from tests import processes
from tests.conftest import Heard, make_config
from tests.integration.conftest import sim_process
from tests.waiting import holds, running, until, wait_until


def block_loop(seconds: float) -> None:
    # deliberately burns the event loop, as a saturated client's parsing would
    time.sleep(seconds)


async def test_monitor_flags_a_blocked_loop() -> None:
    samples: list[ClientLoad] = []
    mon = ClientLoadMonitor(interval_s=0.3, tick_s=0.02, on_sample=samples.append)
    task = asyncio.ensure_future(mon.run())
    try:
        await until(lambda: samples, what="a first, idle interval")
        assert not samples[0].saturated
        asyncio.get_running_loop().call_soon(block_loop, 0.25)
        await until(lambda: any(s.saturated for s in samples), what="a saturated interval")
    finally:
        mon.stop()
        await asyncio.wait_for(task, 5)
    flagged = next(s for s in samples if s.saturated)
    assert flagged.loop_lag_ms >= 200
    # blocked by its own call, not waiting for a CPU: saturated, never starved
    assert not flagged.starved and flagged.state == "saturated"
    if flagged.lag_cpu_wait_ms is not None:  # Linux: the run-queue share of the delay is known
        assert flagged.lag_cpu_wait_ms < flagged.loop_lag_ms / 2


async def test_a_pause_the_loop_excuses_is_not_lag() -> None:
    # the full collection before a load's first request (warmup.settle_before_load, 15-50 ms) was
    # counted as the first second's lag: a sweep judged that level "saturated" and withheld its verdict
    samples: list[ClientLoad] = []
    mon = ClientLoadMonitor(interval_s=0.3, tick_s=0.02, on_sample=samples.append)
    task = asyncio.ensure_future(mon.run())
    loop = asyncio.get_running_loop()

    def excused_block() -> None:
        begin = loop.time()
        block_loop(0.6)
        excuse(begin, loop.time())

    try:
        await until(lambda: samples, what="a first, idle interval")
        seen = len(samples)
        loop.call_soon(excused_block)
        await asyncio.sleep(0)
        await until(lambda: len(samples) > seen + 1, what="the interval of the pause and the next")
    finally:
        mon.stop()
        await asyncio.wait_for(task, 5)
    assert max(s.loop_lag_ms for s in samples[seen:]) < 300, samples[seen:]  # not the 600 ms pause
    assert lag_outside(0.65, 10.0, 10.67, (10.01, 10.61)) == pytest.approx(0.05)  # the rest of the wait
    assert lag_outside(0.2, 20.0, 20.2, (10.01, 10.61)) == 0.2  # a wait the pause did not touch


async def test_the_settle_before_a_load_is_excused() -> None:
    from specload import warmup

    before = asyncio.get_running_loop().time()
    warmup.settle_before_load()
    try:
        begin, end = LATENESS.excused
        assert before <= begin <= end <= asyncio.get_running_loop().time()
    finally:
        warmup.after_load()


def spin(seconds: float) -> None:
    # holds the event loop busy (CPU), as a slow callback does
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_monitor_catches_every_10ms_stall() -> None:
    # A stall of S ms with a wake-up every T ms delays at least one wake-up by S - T: with the 5 ms
    # tick each 10 ms stall shows as >= ~5 ms of lag (more on a busy machine, never less). With the
    # old 50 ms tick, a stall was seen only when it happened to cover a wake-up, about 1 time in 7.
    samples: list[ClientLoad] = []
    mon = ClientLoadMonitor(interval_s=0.2, on_sample=samples.append)
    task = asyncio.ensure_future(mon.run())
    try:
        for i in range(5):
            await until(lambda n=len(samples): len(samples) > n, 10)
            seen = len(samples)
            await asyncio.sleep(0.03 + 0.017 * i)  # a different phase against the ticks each time
            spin(0.010)
            await until(lambda n=seen: len(samples) > n, 10)
            assert samples[seen].loop_lag_ms >= 3.0, (i, samples[seen])
    finally:
        mon.stop()
        await asyncio.wait_for(task, 5)


async def test_session_records_and_announces_saturation_with_the_level(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=10, spec_tokens=0)
    rec = tmp_path / "sat.jsonl"
    cfg = make_config(server.url, concurrency=(3,), duration_per_level_s=2.5, drain=True,
                      max_tokens=20, health=False, metrics_url="off", path=str(rec))
    heard = Heard()
    session = Session(cfg, listener=heard.listener)
    task = asyncio.ensure_future(session.run())
    await until(lambda: session.runner is not None and session.runner.started >= 3, what="the load to run")
    block_loop(0.3)  # the client is stuck: every stream's timing in this second is client-bound
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "completed"
    # A loop blocked by specload's own call is 'saturated'. On a loaded machine the thread can also
    # wait for a CPU once the blocking call returns, and when that wait is most of the lag the
    # interval is judged 'starved' (seen once in a full suite with other suites running): either
    # way a client-bound interval, announced with its level and lag, which is what is tested here
    # (the judgement between the two has its own tests with a controlled hog and a blocked loop).
    sat = [(load, level) for load, level in heard.of("client_load") if load.saturated or load.starved]
    # announced with the level (its concurrency) and the lag that caused it
    assert any(level == 3 and load.loop_lag_ms >= 200 for load, level in sat), heard.of("client_load")
    data = read_record(str(rec))
    flagged = [c for c in data.clients if (c["saturated"] or c.get("starved")) and c["loop_lag_ms"] >= 200]
    assert flagged and flagged[0]["level"] == 3
    assert any(not c["saturated"] for c in data.clients)


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _starve(pid: int, cpu: int) -> None:
    """Make every thread of ``pid`` run only on ``cpu`` and only when nothing else wants it there."""
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, {cpu})
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except (ProcessLookupError, PermissionError):
            pass


def _unstarve(pid: int) -> None:
    cpus = os.sched_getaffinity(0)
    for tid in _threads(pid):
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not os.path.exists("/proc/self/task"), reason="needs Linux")
def test_a_process_that_gets_no_cpu_is_starved_not_saturated(tmp_path) -> None:
    """A controlled CPU hog: specload and the hog share one CPU, specload at the idle priority, so it
    waits in the run queue (as next to a busy-polling server). The warning must say starved, with
    specload's own CPU low, and the record must say which it was. Bounded: the hog runs 2 s."""
    sim = processes.popen(
        [sys.executable, "-m", "specload.sim", "--port", "0", "--ttft-ms", "5", "--itl-ms", "10", "--spec-tokens", "0",
         "--quiet"], stdout=subprocess.PIPE, text=True,
    )
    hog = run = None
    try:
        url = sim.stdout.readline().split("listening on ")[1].strip()
        rec = tmp_path / "starved.jsonl"
        # specload and the hog in the test's session: with autogroup scheduling, a session is a group
        # with its fair share, and a SCHED_IDLE specload in a session of its own was never starved
        run = processes.popen(
            [sys.executable, "-m", "specload.cli", "run", url, "-c", "2", "-d", "6", "--max-tokens", "30",
             "--ignore-eos", "--api", "chat", "--no-health", "--metrics-url", "off", "--record", str(rec)],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, own_session=False,
        )
        wait_until(lambda: running(run) and holds(rec, b'"type":"request"'),
                   what="the load to run")
        cpu = min(os.sched_getaffinity(0))
        hog = processes.popen([sys.executable, "-c", "import time\nend = time.time() + 2\nwhile time.time() < end: pass"],
                              own_session=False)
        os.sched_setaffinity(hog.pid, {cpu})
        _starve(run.pid, cpu)
        hog.wait(30)
        _unstarve(run.pid)
        _, err = run.communicate(timeout=60)
    finally:
        for p in (hog, run, sim):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
    assert run.returncode == 0, err
    assert "WARNING client starved at C=2" in err, err
    assert "another process holds the CPU; latencies at this level include scheduling delay" in err
    data = read_record(str(rec))
    starved = [c for c in data.clients if c.get("starved")]
    assert starved, data.clients
    s = starved[0]
    assert not s["saturated"] and s["loop_lag_ms"] >= 50 and s["cpu_pct"] < 50
    assert s["lag_cpu_wait_ms"] >= s["loop_lag_ms"] / 2


@pytest.mark.slow
async def test_a_saturated_client_never_declares_a_healthy_server_down(tmp_path, monkeypatch) -> None:
    """The client's loop is saturated (every turn of it takes a second, as with 10,000 streams) while
    the server, in its own process, is fine: the health checks, timed on their own thread, keep
    finding it up, so the load is never paused and no request is lost. On the load's loop each check
    would have timed its backlog (several turns) against the 0.8 s timeout and declared it down.
    Bounded: the hog runs 6 turns of 1 s."""
    from specload.watch import health

    monkeypatch.setattr(health, "INTERVAL_S", 0.1)
    monkeypatch.setattr(health, "TIMEOUT_S", 0.8)
    with sim_process("--ttft-ms", "5", "--itl-ms", "10", "--spec-tokens", "0") as url:
        rec = tmp_path / "saturated.jsonl"
        cfg = make_config(url, concurrency=(4,), duration_per_level_s=7, max_tokens=20, metrics_url="off",
                          gpu_metrics="off", path=str(rec))
        heard = Heard()
        session = Session(cfg, listener=heard.listener)
        task = asyncio.ensure_future(session.run())
        await until(lambda: session.runner is not None and session.runner.started >= 4
                    and session.watch is not None and session.watch.health is not None
                    and session.watch.health.state == "up", 30)
        assert session.watch is not None and session.watch.health is not None
        checks_before = session.watch.health.checks
        loop = asyncio.get_running_loop()
        turns = [6]

        def hog() -> None:  # one second of the loop per turn, then the other callbacks get theirs
            spin(1.0)
            turns[0] -= 1
            if turns[0]:
                loop.call_soon(hog)

        loop.call_soon(hog)
        await until(lambda: turns[0] == 0, 60)
        checks_during = session.watch.health.checks - checks_before
        result = await asyncio.wait_for(task, 60)
    assert result.reason == "completed"
    assert checks_during >= 2  # the checks went on while the loop was saturated
    events = heard.of("run_event")
    assert [e.state for e in events if isinstance(e, HealthChanged)] == ["up"], events
    assert not [e for e in events if isinstance(e, LoadControl) and e.action == "pause"], events
    assert not [n for n in heard.of("notice") if "server down" in str(n)]
    data = read_record(str(rec))
    assert any(c["saturated"] or c.get("starved") for c in data.clients)  # it was saturated
    reqs = [r for r in data.requests if not r["warmup"]]
    assert reqs and all(r["ok"] for r in reqs)
    assert data.end is not None and data.end["requests"] == len(data.requests)


@pytest.mark.slow
async def test_a_connect_timeout_on_a_late_loop_is_the_clients_not_the_servers(sim) -> None:
    """The server accepts at once, but the client's loop takes 0.3 s a turn (saturated), so a new
    connection's set-up (several turns) outlasts the 0.4 s connect timeout: that failure is
    specload's own (kind ``client``, saying how late its loop was), never a ``connect`` error that
    would count against the server and mark it down."""
    from specload.datatypes import ErrorKind
    from tests.conftest import make_client

    server = await sim(ttft_ms=1, itl_ms=1, spec_tokens=0)
    client = make_client(server.url, max_tokens=2, connect_timeout_s=0.4, keepalive=False)
    mon = ClientLoadMonitor(interval_s=0.5)
    watch = asyncio.ensure_future(mon.run())
    await client.start()
    loop = asyncio.get_running_loop()
    turns = [8]

    def hog() -> None:
        spin(0.3)
        turns[0] -= 1
        if turns[0]:
            loop.call_soon(hog)

    try:
        await asyncio.sleep(0.05)  # the monitor has ticked
        loop.call_soon(hog)
        recs = await asyncio.wait_for(asyncio.gather(*(client.send("hi", request_id=i) for i in range(20))), 60)
    finally:
        turns[0] = 1
        mon.stop()
        await asyncio.wait_for(watch, 5)
        await client.close()
    failed = [r for r in recs if not r.ok]
    assert failed, "no connect timed out: the hog did not delay the connections"
    assert all(r.error_kind is ErrorKind.CLIENT for r in failed), [(r.error_kind, r.error_detail) for r in failed]
    assert all("specload's own event loop was" in (r.error_detail or "") for r in failed)
