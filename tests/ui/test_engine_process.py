"""``specload tui``'s engine in a process of its own (issue 11): the UI steers it, hears it, and
neither side can take the other down with it.

Real parts throughout: the engine is a real child process (``python -m
specload.sources.engine_process``), the server the built-in simulator or the test's, the UI the real
app under Pilot. What each test would catch:

* steering: a key's effect must be in the frame sampled right after it (the command's ack carries
  the frame); without the ack the UI showed the state of up to a refresh before;
* the engine killed: the run must end as an error the user reads (and the UI must not hang on a
  frame that never comes);
* the UI killed: the engine must still close the record (in-flight requests recorded as cancelled)
  and stop; with the engine as a child of the UI and no end-of-socket rule it ran on, orphaned;
* a SIGTERM to the engine alone ends the run as a quit does;
* the UI's loop blocked: the engine's loop does not notice at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specload.exitcode import ExitCode
from specload.record.reader import read_record
from specload.sources.engine_process import EngineStartError, ProcessSessionSource
from specload.ui.app import SpecloadApp
from tests import processes
from tests.ui.conftest import live_app, load_running, notices, quit_app, screen_text, tui_config, wait_for

QUIET_SIM = "--ttft-ms 5 --itl-ms 5 --spec-tokens 0 --quiet"


def process_app(record: Path, *, concurrency: int = 2, max_tokens: int = 8) -> tuple[SpecloadApp, ProcessSessionSource]:
    """The app on an engine process running the built-in simulator (a process of its own too)."""
    app = live_app("-c", str(concurrency), "-d", "60", "--max-tokens", str(max_tokens), "--record", str(record),
                   "--sim-args", QUIET_SIM)
    assert isinstance(app.source, ProcessSessionSource)
    return app, app.source


def _gone(pid: int, timeout: float = 15.0) -> bool:
    """``pid`` has exited (and been reaped) within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it, or it stays a zombie that kill(0) still finds
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


async def test_keys_steer_the_engine_process_and_q_closes_its_record(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=20, spec_tokens=0)
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "2", "-d", "60", "--max-tokens", "20", "--record", str(record))
    source = app.source
    assert isinstance(source, ProcessSessionSource)
    engine_pid = source.proc.pid
    assert engine_pid != os.getpid()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: (rs := source.frame().runner) is not None and rs.started >= 4, "the load to run")
        await pilot.press("space")
        # the ack carried the frame built right after the pause ran: no refresh to wait for
        assert source.frame().state == "paused"
        await pilot.press("space")
        assert source.frame().state != "paused"
        app.key_settle_s = 0.05
        await pilot.press("up")
        await wait_for(pilot, lambda: source.frame().runner.target == 3, "C=3 in the engine's frame")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    assert app.exit_code == ExitCode.OK
    assert _gone(engine_pid), "the engine process outlived the run"
    data = read_record(str(record))
    # a quit while holding a level set by hand, with the ramp done: the run completed
    assert app.result is not None and app.result.reason == "completed"
    assert data.end is not None and data.end["reason"] == "completed"
    kinds = [e["kind"] for e in data.events]
    assert "pause" in kinds and "resume" in kinds, kinds
    assert any(e["kind"] == "concurrency" and e["value"] == 3 for e in data.events), data.events


async def test_a_killed_engine_ends_the_run_as_an_error_the_user_reads_and_its_record_says(tmp_path) -> None:
    record = tmp_path / "run.jsonl"
    app, source = process_app(record)
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app, started=4)
        os.kill(source.proc.pid, signal.SIGKILL)
        await wait_for(pilot, lambda: app.result is not None, "the run to end", timeout=15)
        assert app.result is not None
        assert app.result.reason == "error"
        assert app.result.message == "internal error: the engine process was killed by SIGKILL"
        await wait_for(pilot, lambda: "engine failed" in screen_text(app), "the header to say so")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q")
    assert app.exit_code == ExitCode.ERROR  # what run_app exits with
    # what the engine had written is kept (its last flush), and the UI wrote the end line it could not
    # (issue 22: the record had none, though the UI knew why)
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "error"
    errors = [e["value"] for e in data.events if e["kind"] == "error"]
    assert errors == ["internal error: the engine process was killed by SIGKILL"]


UI_THEN_GONE = textwrap.dedent("""
    import asyncio, json, os, sys
    from specload.sources.engine_process import ProcessSessionSource
    from specload.session.listener import NullListener
    from tests.ui.conftest import tui_config

    cfg = tui_config(*sys.argv[1:])
    source = ProcessSessionSource(cfg)

    async def main():
        task = asyncio.ensure_future(source.run(NullListener()))
        for _ in range(400):  # 20 s at most
            rs = source.frame().runner
            if rs is not None and rs.in_flight > 0 and rs.started >= 4:
                break
            await asyncio.sleep(0.05)
        print(json.dumps({"engine": source.proc.pid, "started": source.frame().runner.started}), flush=True)
        os._exit(9)  # the UI gone at once: no quit, no close

    asyncio.run(main())
""")


def test_the_engine_closes_the_record_when_the_ui_is_gone(tmp_path) -> None:
    record = tmp_path / "run.jsonl"
    root = Path(__file__).resolve().parents[2]
    args = ["-c", "2", "-d", "60", "--max-tokens", "200", "--record", str(record),
            "--sim-args", "--ttft-ms 5 --itl-ms 20 --spec-tokens 0 --quiet"]
    ui = processes.run([sys.executable, "-c", UI_THEN_GONE, *args], cwd=root, capture_output=True, text=True,
                        timeout=60)
    assert ui.returncode == 9, ui.stderr
    engine = json.loads(ui.stdout.strip().splitlines()[-1])["engine"]
    assert _gone(engine, 30), "the engine process ran on without its UI"
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "interrupted"
    # the streams in flight when the UI went away: recorded as cancelled, not lost
    assert any(r["error"] and r["error"]["kind"] == "cancelled" for r in data.requests)


async def test_sigterm_to_the_engine_alone_quits_the_run(tmp_path) -> None:
    record = tmp_path / "run.jsonl"
    app, source = process_app(record, max_tokens=50)
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app, started=4)
        os.kill(source.proc.pid, signal.SIGTERM)
        await wait_for(pilot, lambda: app.result is not None, "the run to end", timeout=30)
        assert app.result is not None and app.result.reason == "interrupted"
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q")
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "interrupted"


async def test_an_app_closed_without_a_quit_still_ends_the_run_and_its_engine(sim, tmp_path) -> None:
    # the app goes away under the run (a test's end, the app's own error): the run is quit as 'q'
    # quits it, and the app's close waits for its teardown (bounded)
    server = await sim(ttft_ms=5, itl_ms=50, spec_tokens=0)
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "4", "-d", "60", "--max-tokens", "50", "--record", str(record))
    engine = app.source.proc.pid
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app)
    assert _gone(engine), "the engine process outlived the app"
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "interrupted"
    assert any(r["error"] and r["error"]["kind"] == "cancelled" for r in data.requests)  # in flight at the close


async def test_an_unreachable_server_is_an_error_that_ends_the_tui_with_its_reason(tmp_path) -> None:
    # issue 22: the header said "■ finished" and the app waited for q, as after a run
    record = tmp_path / "run.jsonl"
    app = live_app("http://127.0.0.1:9", "-c", "1", "--record", str(record))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.return_code is not None, "the app to end by itself", timeout=20)
    assert app.exit_code == ExitCode.ERROR
    assert app.result is not None and app.result.reason == "error"
    assert app.result.message is not None and "cannot connect to http://127.0.0.1:9" in app.result.message
    assert app.frame.state == "error"
    data = read_record(str(record))  # as headless leaves it: what was seen, and why it ended
    assert data.end is not None and [e["kind"] for e in data.events] == ["error"]


async def test_calibration_is_shown_and_a_quit_during_it_leaves_a_record(hostile, tmp_path) -> None:
    # issue 22: calibration said nothing while it ran (up to 15 s a call), and a quit during it left
    # no record while "record: PATH" was printed
    server = await hostile()
    server.mode, server.params = "stall", {"max_s": 60}
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "--api", "chat", "-c", "1", "--request-timeout", "60", "--metrics-url", "off",
                   "--no-health", "--record", str(record))
    said: list[str] = []  # every notice (a toast expires after a few seconds)
    notify = app.notify
    app.notify = lambda message, **kw: (said.append(str(message)), notify(message, **kw))[1]  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "… calibrating" in screen_text(app), "the header to say so", timeout=30)
        await wait_for(pilot, lambda: any("asking the server how it counts tokens (at most 30 s)" in m for m in said),
                       "the notice")
        await quit_app(pilot, app)
    assert app.result is not None and app.result.reason == "interrupted"
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "interrupted"
    assert data.run["target"] == server.url and data.requests == []


# the engine's scheduling priority beside its caller's: a caller of its own session (so of its own
# autogroup, whose nice a process may raise), niced, as a user runs specload under nice or autogroup
PRIORITY = textwrap.dedent("""
    import json, os, sys
    from specload.sources.engine_process import ProcessSessionSource
    from tests.ui.conftest import tui_config

    want = os.nice(3)  # the caller's nice, 3 lower than it was (a test run under nice starts above 0)
    with open("/proc/self/autogroup", "w") as f:
        f.write("5")
    source = ProcessSessionSource(tui_config("http://127.0.0.1:9", "-c", "1", "--no-record"))
    try:
        def seen(pid):
            group = open(f"/proc/{pid}/autogroup").read().split()
            return {"group": group[0], "autogroup_nice": int(group[-1]), "nice": os.getpriority(os.PRIO_PROCESS, pid)}
        print(json.dumps({"ui": seen(os.getpid()), "engine": seen(source.proc.pid), "want": want}))
    finally:
        source.close()
""")


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no kernel autogroups here")
def test_the_engine_keeps_the_callers_scheduling_priority() -> None:
    # issue 22: the engine process started a session of its own (setsid), so a kernel autogroup of
    # its own at the default priority, while its caller ran under nice or autogroup -19: the TUI
    # starved 40 of 50 seconds where headless starved none
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", PRIORITY], cwd=root, capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["engine"] == seen["ui"] == {"group": seen["ui"]["group"], "autogroup_nice": 5, "nice": seen["want"]}
    assert seen["want"] >= 3


@pytest.mark.parametrize("wait", [True, False])
def test_an_engine_that_does_not_start_in_time_is_one_line_and_leaves_nothing_behind(wait: bool) -> None:
    cfg = tui_config("http://127.0.0.1:9", "-c", "1")
    with pytest.raises(EngineStartError) as caught:
        # no interpreter starts in a millisecond; wait=False: the CLI's way, the wait comes later
        source = ProcessSessionSource(cfg, start_wait_s=0.001, wait=wait)
        source.wait_started()
    assert str(caught.value) == "the engine process did not start within 0.001 s"


# `specload tui` with the engine's start patched to say what the process had imported by then, and
# to end the process there (the dashboard is not what this looks at)
_START_ORDER = """
import json, os, subprocess, sys
from specload import cli
real = subprocess.Popen.__init__
def popen(self, args, *a, **k):
    real(self, args, *a, **k)
    if "specload.sources.engine_process" in args:
        seen = {m: m in sys.modules for m in ("textual", "specload.ui.app", "specload.session", "aiohttp")}
        print(json.dumps(seen), flush=True)
        self.kill()
        os._exit(0)
subprocess.Popen.__init__ = popen
sys.argv = ["specload", "tui", "http://127.0.0.1:9", "-n", "1", "--no-record"]
cli.main()
"""


def test_specload_tui_starts_the_engine_before_it_imports_the_dashboard() -> None:
    # the engine's start-up (its imports, the session) overlaps the dashboard's (Textual's imports):
    # the engine process is started before either is imported here
    root = Path(__file__).resolve().parents[2]
    proc = processes.run([sys.executable, "-c", _START_ORDER], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"textual": False, "specload.ui.app": False, "specload.session": False, "aiohttp": False}


def test_a_secret_header_is_not_on_the_engine_command_line_and_an_unstarted_run_never_starts(tmp_path) -> None:
    secret = "sk-test-" + "7" * 24
    record = tmp_path / "r.jsonl"
    cfg = tui_config("http://127.0.0.1:9", "-c", "1", "--header", f"Authorization: Bearer {secret}",
                     "--record", str(record))
    source = ProcessSessionSource(cfg)
    try:
        cmdline = Path(f"/proc/{source.proc.pid}/cmdline").read_bytes()
        assert secret.encode() not in cmdline
        assert b"specload.sources.engine_process" in cmdline
    finally:
        source.close()  # the UI gone before it ever ran the source (app.run() failed, say)
    # the engine left without starting the run it was never asked to: no record begun
    assert source.proc.returncode == 0
    assert not record.exists() or record.read_text() == ""


async def test_a_blocked_ui_loop_is_nothing_to_the_engine_process(tmp_path) -> None:
    # as test_engine_isolation's thread test, for the process: the UI's loop held 1.5 s (a slow
    # repaint) while the engine, a process of its own, measures its loop and finishes requests
    record = tmp_path / "run.jsonl"
    app, source = process_app(record, concurrency=4)
    blocked: list[tuple[int, int]] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app, started=8)

        def block_the_ui() -> None:
            assert threading.current_thread() is threading.main_thread()
            t0 = time.perf_counter_ns()  # the session's clock (CLOCK_MONOTONIC, shared by processes)
            time.sleep(1.5)
            blocked.append((t0, time.perf_counter_ns()))

        app.call_later(block_the_ui)
        await wait_for(pilot, lambda: bool(blocked), "the UI's handler to have run")
        # the engine reports its loop every second: two reports after the block
        await wait_for(pilot, lambda: time.perf_counter_ns() > blocked[0][1] + 2.5e9, "two more loop reports")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    t_block0, t_block1 = blocked[0]
    assert t_block1 - t_block0 >= 1.5e9  # the UI's loop really was held that long
    data = read_record(str(record))
    t0 = app.frame.info.t0_ns
    during = [c for c in data.clients if c["t_s"] * 1e9 + t0 >= t_block0][:2]
    assert during, f"no loop-lag sample after the block: {data.clients}"
    # the block would show as a lag of 1500 ms or more. A busy machine adds the time the engine's
    # loop waited for a CPU (the record says how much of each lag that was) and more (203 ms not
    # waiting for a CPU was seen at load 15): half the block tells the two apart on any machine
    worst = max(c["loop_lag_ms"] for c in during)
    own = max(c["loop_lag_ms"] - (c["lag_cpu_wait_ms"] or 0.0) for c in during)
    assert worst < 1500 and own < 750, f"the engine's loop lagged {worst} ms ({own} not waiting for a CPU)"
    finished = [r for r in data.requests if t_block0 < r["end_s"] * 1e9 + t0 < t_block1]
    assert len(finished) >= 4, f"only {len(finished)} requests finished while the UI was blocked"


async def test_a_stopped_engine_is_shown_and_does_not_freeze_the_keys(tmp_path) -> None:
    # the engine process stopped (SIGSTOP: a debugger, a machine swapping): the UI says so instead of
    # showing the last frame as if it were live, and keys do not each wait the whole ack timeout
    record = tmp_path / "run.jsonl"
    app, source = process_app(record)
    source.silent_after_s = 1.0
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app, started=4)
        os.kill(source.proc.pid, signal.SIGSTOP)
        try:
            await wait_for(pilot, lambda: "engine silent" in screen_text(app), "the header to say so")
            await pilot.press("space")  # waits for its ack once, in vain
            t = time.monotonic()
            for _ in range(3):
                await pilot.press("space")  # no ack can come: none is waited for now
            assert time.monotonic() - t < 2.0, "each key waited for an engine that does not answer"
        finally:
            os.kill(source.proc.pid, signal.SIGCONT)
        await wait_for(pilot, lambda: "engine silent" not in screen_text(app), "the engine to answer again")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    data = read_record(str(record))
    assert data.end is not None
    # the four presses reached the engine once it ran again, in order: paused, resumed, paused, resumed
    kinds = [e["kind"] for e in data.events if e["kind"] in ("pause", "resume")]
    assert kinds == ["pause", "resume", "pause", "resume"], kinds


async def test_a_level_the_crash_paused_is_in_the_table_as_cut_before_it_ends(tmp_path) -> None:
    # issue 11: after a crash the TUI pauses the load, and the paused level stays open until the user
    # moves on: the table showed it (cut, with the requests it lost) only once it ended. Now the
    # frame carries the levels a cut has cut, as they stand, and the table shows them at once.
    from specload.ui.widgets.levels import LevelTable

    record = tmp_path / "run.jsonl"
    app = live_app("-c", "4", "-d", "600", "--max-tokens", "50", "--record", str(record),
                   "--sim-args", "--crash-after 12 --ttft-ms 5 --itl-ms 5 --spec-tokens 0")
    source = app.source
    assert isinstance(source, ProcessSessionSource)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: bool(source.frame().stats.crashes), "the crash", timeout=30)
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: "level-0" in table.rows, "the paused level's row")
        assert not source.frame().stats.levels, "the level had ended: this is not the case under test"
        await wait_for(pilot, lambda: "crash" in str(table.get_row("level-0")), "the cut shown in its row")
        row = [str(c) for c in table.get_row("level-0")]
        assert row[0] == "4"
        # the streams the crash hung are counted lost at once (they end so when the run does)
        (provisional,) = source.frame().cut_levels
        assert provisional.cut == "crash" and provisional.lost is not None and provisional.lost >= 1
        assert provisional.requests == provisional.ok + provisional.lost
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    # the final summary replaced the provisional row, and says the same cut
    (level,) = app.result.levels if app.result is not None else ()
    assert level.cut == "crash"
    assert "crash" in str(table.get_row("level-0"))


@pytest.mark.parametrize("judged", [("--baseline",), ("--target-ci", "5")], ids=["baseline", "target-ci"])
async def test_baseline_and_target_ci_are_judged_live_in_the_engine_process(sim, tmp_path, judged) -> None:
    # issue 22: `specload tui --baseline B` and `specload tui --target-ci 5` ended at start ("engine
    # failed"): the live judge's figure of a level with no finished request raised, on the first
    # frame, in the engine process (the tests ran on the engine thread, which the CLI does not ship)
    from specload.session import Session
    from tests.conftest import make_config

    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    if judged == ("--baseline",):
        baseline = tmp_path / "b.jsonl"
        base = await Session(make_config(server.url, concurrency=(1,), requests_per_level=10, path=str(baseline))).run()
        assert base.reason == "completed"
        judged = (*judged, str(baseline))
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "1", "-d", "60", "--max-tokens", "16", *judged, "--record", str(record))
    said = notices(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.frame.live is not None or app.result is not None, "the live judge's view",
                       timeout=20)
        assert app.result is None, app.result  # the run goes on
        # the load panel: the ratio to the baseline, or the interval's half-width against its goal
        mark = "×" if "--baseline" in judged else "±"
        await wait_for(pilot, lambda: mark in str(app.query_one("#load-live").render()),
                       f"{mark} on the load panel", timeout=20)
        live = app.frame.live
        assert live is not None
        if "--baseline" in judged:
            assert live.baseline is not None and live.baseline.value
        # no frame was lost to an error: the engine says so once, and the screen shows old figures
        assert not [n for n in said if "internal error" in n], said
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    assert app.result is not None and app.result.reason != "error", app.result
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] != "error"


async def test_a_live_baseline_of_another_max_tokens_reads_unsound_in_the_engine_process(sim, tmp_path) -> None:
    # issue 24: a live --baseline with max_tokens 16 against a baseline of 8 gave no warning
    from specload.session import Session
    from tests.conftest import make_config

    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    baseline = tmp_path / "b.jsonl"
    cfg = make_config(server.url, concurrency=(1,), requests_per_level=10, max_tokens=8, path=str(baseline))
    assert (await Session(cfg).run()).reason == "completed"
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "1", "-n", "12", "--max-tokens", "16", "--baseline", str(baseline),
                   "--record", str(record))
    said = notices(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: "unsound" in str(app.query_one("#load-live").render()),
                       "the verdict on the load panel", timeout=30)
        assert any("unsound, no verdicts: the workloads differ: max_tokens 8 vs 16" in n for n in said)
        await wait_for(pilot, lambda: (rs := app.source.frame().runner) is not None and rs.plan_done
                       and rs.in_flight == 0, "the level to end", timeout=60)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    (level,) = read_record(str(record)).levels
    assert level["judged"]["verdict"] == "unsound"


async def test_conversations_run_turn_by_turn_in_the_engine_process(sim, tmp_path) -> None:
    # --multi-turn as `specload tui` ships it: sessions in the engine process, each turn a request line
    # with its conversation and turn, the level's figures per turn
    server = await sim(ttft_ms=5, itl_ms=2, spec_tokens=0)
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "2", "-n", "8", "--max-tokens", "8", "--dataset", "builtin", "--multi-turn",
                   "--record", str(record))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: (rs := app.source.frame().runner) is not None and rs.plan_done
                       and rs.in_flight == 0, "the conversations to end", timeout=60)
        assert app.source.frame().runner.started >= 8  # type: ignore[union-attr]
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)
    data = read_record(str(record))
    turns = [(r["conversation"], r["turn"]) for r in data.requests]
    assert len(turns) >= 8 and (1, 2) in turns and all(t >= 1 for _, t in turns)
    (level,) = data.levels
    assert set(level["turns"]) >= {"1", "2"} and level["turns"]["1"]["requests"] >= 2


def test_a_dead_engine_is_explained_by_its_traceback_not_by_what_it_printed_after() -> None:
    # issue 22: the user read aiohttp's "Unclosed client session" (printed as the dead engine's
    # interpreter exited) instead of the ValueError that ended it
    from specload.sources.engine_process import last_error

    plain = textwrap.dedent("""\
        Traceback (most recent call last):
          File "x.py", line 1, in <module>
        ValueError: zero-size array to reduction operation fmax which has no identity
        Unclosed client session
        client_session: <aiohttp.client.ClientSession object at 0x7f>
    """)
    assert last_error(plain) == "ValueError: zero-size array to reduction operation fmax which has no identity"
    group = textwrap.dedent("""\
          + Exception Group Traceback (most recent call last):
          |   File "x.py", line 1, in <module>
          | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
          +-+---------------- 1 ----------------
            | Traceback (most recent call last):
            |   File "y.py", line 2, in f
            | KeyError: 'x'
            +------------------------------------
        Unclosed connector
    """)
    assert last_error(group) == "KeyError: 'x'"
    assert last_error("some line\nthe last one\n") == "the last one"
    assert last_error("") == ""
