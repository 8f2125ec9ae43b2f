"""Before the first level: a crash, a signal and calibration against a server that does not answer.

Issue 22: a crash seen while the prompt lengths were calibrated was printed ("SERVER CRASH"), yet
``--on-crash stop`` let the load run and the run end "completed" with exit 0; calibration waited 15 s
a call whatever ``--request-timeout`` said, silently, and a signal during it left no record while
"record: PATH" was printed; an early SIGINT to a run started in the background (a shell starts it
with SIGINT ignored) was lost and the run went on to exit 0. The servers here are real (the hostile
server's ``stall`` mode answers with headers and then nothing; a launched script prints a crash and
never becomes ready), the runs are the real CLI in a process of its own where signals matter.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from pathlib import Path

from specload.exitcode import ExitCode
from specload.record.reader import read_record
from specload.session import NullListener, Session
from tests.conftest import make_config

ROOT = Path(__file__).resolve().parents[2]
CRASH = textwrap.dedent("""\
    [2026-12-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
      File "/srv/scheduler.py", line 10, in event_loop
        self.run_batch(batch)
    AttributeError: 'EAGLEWorkerV2' object has no attribute 'draft_model_runner'
    [2026-12-01 10:00:01 TP0] Received sigquit from a child process. It usually means the child failed.
""")
CALIBRATING = "asking the server how it counts tokens"


async def _stalling(hostile):
    server = await hostile()
    server.mode, server.params = "stall", {"max_s": 60}
    return server


async def test_a_crash_seen_while_calibrating_stops_the_run_under_on_crash_stop(hostile, tmp_path) -> None:
    server = await _stalling(hostile)
    log, rec = tmp_path / "server.log", tmp_path / "r.jsonl"
    log.write_text("")

    class CrashWhileCalibrating(NullListener):
        def notice(self, text: str) -> None:
            if CALIBRATING in text:  # the server crashes while specload waits for its answer
                with log.open("a") as f:
                    f.write(CRASH)

    cfg = make_config(server.url, concurrency=(1,), requests_per_level=2, path=str(rec), server_log=str(log),
                      on_crash="stop", request_timeout_s=30, metrics_url="off", health=False)
    # bounded (a run that ignored the crash would calibrate for 15 s, then load for 30 s a request)
    result = await asyncio.wait_for(Session(cfg, listener=CrashWhileCalibrating()).run(), 40)
    assert (result.reason, result.exit_code) == ("crashed", ExitCode.CRASHED)
    assert server.requests <= 1  # the calibration request (if it got there before the crash); no load
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "crashed"
    assert {c["exception_type"] for c in data.crashes} == {"AttributeError"}
    assert data.requests == [] and data.levels == []


LOADING_THEN_CRASH = textwrap.dedent("""\
    import sys, time
    sys.stdout.write(sys.argv[1])
    sys.stdout.flush()
    time.sleep(60)  # never ready: nothing listens
""")


async def test_a_crash_while_the_launched_server_loads_stops_the_run_with_exit_3(tmp_path) -> None:
    script, rec = tmp_path / "server.py", tmp_path / "r.jsonl"
    script.write_text(LOADING_THEN_CRASH)
    launch = f"{sys.executable} {script} '{CRASH}'"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specload.cli", "run", "http://127.0.0.1:9", "--launch", launch, "--api", "chat",
        "-n", "1", "--ready-timeout", "120", "--record", str(rec), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 40)  # not the 120 s readiness wait
    assert proc.returncode == ExitCode.CRASHED, err.decode()[-2000:]
    assert "SERVER CRASH AttributeError" in err.decode()
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "crashed"
    assert data.crashes and data.requests == []


async def _run_cli(*args: str, ignore_sigint: bool = False) -> asyncio.subprocess.Process:
    """``specload ARGS`` as a shell's background job starts it when asked (SIGINT ignored)."""
    def background() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specload.cli", *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, preexec_fn=background if ignore_sigint else None)


async def _until_line(stream: asyncio.StreamReader, wanted: str, timeout: float = 30.0) -> list[str]:
    lines: list[str] = []
    async with asyncio.timeout(timeout):
        while wanted not in "".join(lines):
            line = await stream.readline()
            assert line, f"the output ended without {wanted!r}: {lines}"
            lines.append(line.decode())
    return lines


async def test_calibration_is_announced_and_bounded_by_the_request_timeout(hostile, tmp_path) -> None:
    server = await _stalling(hostile)
    rec = tmp_path / "r.jsonl"
    proc = await _run_cli("run", server.url, "--api", "chat", "-c", "1", "-n", "1", "--request-timeout", "2",
                          "--metrics-url", "off", "--no-health", "--record", str(rec))
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    stderr = err.decode()
    assert f"prompt lengths: {CALIBRATING} (at most 4 s)" in stderr, stderr
    data = read_record(str(rec))
    (cal,) = [e for e in data.events if e["kind"] == "calibration"]
    assert "the server did not answer in time" in cal["value"]["prompts"]["detail"], cal
    # one call, cut at the run's 2 s request timeout (it waited 15 s whatever the run's timeouts)
    assert cal["value"]["requests"] == [{"path": "/v1/chat/completions", "error": "TimeoutError"}]
    assert cal["t_s"] < 10, cal


async def test_a_signal_while_calibrating_leaves_a_record_that_ends_interrupted(hostile, tmp_path) -> None:
    server = await _stalling(hostile)
    rec = tmp_path / "r.jsonl"
    proc = await _run_cli("run", server.url, "--api", "chat", "-c", "1", "-n", "1", "--request-timeout", "60",
                          "--metrics-url", "off", "--no-health", "--record", str(rec), ignore_sigint=True)
    assert proc.stderr is not None
    await _until_line(proc.stderr, CALIBRATING)
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == ExitCode.INTERRUPTED, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "interrupted"
    assert data.run["target"] == server.url and data.requests == []


# the signal sent by the run itself at a chosen moment before it could catch signals of its own: a
# background job's SIGINT (ignored when it started) must still end it
EARLY_SIGNAL = textwrap.dedent("""\
    import os, signal, sys
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job
    where = sys.argv[1]
    if where == "config":  # while the options are read: before any session
        import specload.cli_run as target
        name = "build_config"
    else:  # the session built, its run about to start
        import specload.session as target
        name = "Session"
    original = getattr(target, name)
    if where == "config":
        def patched(*a, **k):
            os.kill(os.getpid(), signal.SIGINT)
            return original(*a, **k)
    else:
        class patched(original):
            async def run(self):
                os.kill(os.getpid(), signal.SIGINT)
                return await super().run()
    setattr(target, name, patched)
    if where == "session":
        import specload.headless
        specload.headless.Session = patched
    from specload.cli import main
    main(sys.argv[2:])
""")


async def test_an_early_sigint_to_a_background_run_is_not_swallowed(tmp_path) -> None:
    for where in ("config", "session"):
        rec = tmp_path / f"{where}.jsonl"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", EARLY_SIGNAL, where, "run", "http://127.0.0.1:9", "--api", "chat", "-n", "1",
            "--record", str(rec), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == ExitCode.INTERRUPTED, (where, err.decode()[-2000:])
        if where == "session":  # the run had its record: it says how it ended
            data = read_record(str(rec))
            assert data.end is not None and data.end["reason"] == "interrupted"



async def test_a_crash_in_the_warm_up_or_the_drain_stops_the_run_with_exit_3(sim, tmp_path) -> None:
    # the same rule in every phase: a crash under --on-crash stop ends the run crashed, exit 3, and the
    # record says so. Warm-up: the simulator crashes after its 2nd request of 6 (the 3rd hangs); no
    # level is measured. Drain: both requests of the level sent, the run waits for them (4 s each) when
    # the server's log prints the crash; they are cut, not waited for
    for phase in ("warm-up", "drain"):
        log, rec = tmp_path / f"{phase}.log", tmp_path / f"{phase}.jsonl"
        if phase == "warm-up":
            server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=2, log_file=str(log))
            fields: dict = {"warmup_requests": 6, "concurrency": (1,), "requests_per_level": 4}
        else:
            log.write_text("")
            server = await sim(ttft_ms=5, itl_ms=100, spec_tokens=0)
            fields = {"concurrency": (2,), "requests_per_level": 2, "drain": True, "max_tokens": 40}
        cfg = make_config(server.url, path=str(rec), server_log=str(log), on_crash="stop", metrics_url="off",
                          health=False, **fields)
        session = Session(cfg)
        task = asyncio.ensure_future(session.run())
        if phase == "drain":
            async with asyncio.timeout(30):
                while session.runner is None or session.runner.state != "draining":
                    await asyncio.sleep(0.01)
            with log.open("a") as f:
                f.write(CRASH)
        # bounded: a run that ignored the warm-up's crash would wait for its hung request until 60 s
        result = await asyncio.wait_for(task, 50)
        assert (result.reason, result.exit_code) == ("crashed", ExitCode.CRASHED), phase
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "crashed", phase
        assert data.crashes, phase
        if phase == "warm-up":
            assert data.levels == [] and data.requests and all(r["warmup"] for r in data.requests)
