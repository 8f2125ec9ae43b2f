"""The engine thread's plumbing (session/engine_thread.py): where calls run, what a blocked engine does
to a caller, listener calls in order on the UI's loop, the UI thread's priority."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading

import pytest

from specload.session.engine_thread import EngineBusy, EngineThread, OnLoop, lower_thread_priority


def _started(main) -> tuple[EngineThread, concurrent.futures.Future]:
    engine = EngineThread(name="test-engine")
    done: concurrent.futures.Future = concurrent.futures.Future()
    engine.start(main, done)
    return engine, done


def test_calls_run_on_the_engine_loop_while_it_runs_and_here_before_and_after() -> None:
    release = threading.Event()
    assert EngineThread().call(threading.current_thread, timeout=1) is threading.current_thread()

    async def main() -> str:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return "done"

    engine, done = _started(main)
    assert engine.call(lambda: threading.current_thread().name, timeout=10) == "test-engine"
    assert engine.call(lambda: asyncio.get_running_loop() is engine.loop, timeout=10)
    with pytest.raises(ZeroDivisionError):  # the callee's error reaches the caller
        engine.call(lambda: 1 / 0, timeout=10)
    release.set()
    assert done.result(10) == "done"
    engine.join(10)
    # the loop is closed: nothing else runs the session now, so the call runs in the caller's thread
    assert engine.call(threading.current_thread, timeout=1) is threading.current_thread()


def test_a_blocked_engine_makes_the_caller_give_up_not_hang() -> None:
    blocked, release = threading.Event(), threading.Event()
    ran: list[int] = []

    async def main() -> None:
        blocked.set()
        release.wait(30)  # a blocking call on the engine's loop (what must never happen, but might)
        await asyncio.sleep(0)

    engine, done = _started(main)
    assert blocked.wait(10)
    with pytest.raises(EngineBusy):
        engine.call(ran.append, 1, timeout=0.05)
    with pytest.raises(EngineBusy):
        engine.call(ran.append, 2, timeout=0.05, cancel_late=True)
    release.set()
    done.result(10)
    engine.join(10)
    assert ran == [1]  # a late command still runs; a late frame request does not


async def test_listener_calls_reach_the_ui_loop_in_order_without_the_engine_waiting() -> None:
    heard: list[tuple[str, object, bool]] = []
    ui_thread = threading.current_thread()

    class Listener:
        def notice(self, text: str) -> None:
            heard.append(("notice", text, threading.current_thread() is ui_thread))

        def phase(self, phase: str) -> None:
            heard.append(("phase", phase, threading.current_thread() is ui_thread))

    relay = OnLoop(Listener(), asyncio.get_running_loop())  # type: ignore[arg-type]

    async def main() -> None:
        for i in range(50):
            relay.notice(f"n{i}")
            if i % 10 == 0:
                relay.phase(f"p{i}")

    engine, done = _started(main)
    await asyncio.wrap_future(done)  # the engine finished without waiting for the UI's loop
    for _ in range(100):
        if len(heard) == 55:
            break
        await asyncio.sleep(0.01)
    expected = []
    for i in range(50):
        expected.append(("notice", f"n{i}", True))
        if i % 10 == 0:
            expected.append(("phase", f"p{i}", True))
    assert heard == expected
    engine.join(10)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread has a nice value of its own on Linux only")
def test_lowering_the_ui_threads_priority_leaves_the_others_alone() -> None:
    me = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, me)
    seen: dict[str, int] = {}

    def ui_thread() -> None:
        tid = threading.get_native_id()
        seen["before"] = os.getpriority(os.PRIO_PROCESS, tid)
        seen["lowered"] = lower_thread_priority(3)
        seen["after"] = os.getpriority(os.PRIO_PROCESS, tid)

    t = threading.Thread(target=ui_thread)
    t.start()
    t.join(10)
    assert seen["lowered"] and seen["after"] == min(19, seen["before"] + 3)
    assert os.getpriority(os.PRIO_PROCESS, me) == before  # this thread (the engine's, say) keeps its own


# run_app's process settings are process-global (the GC's thresholds, the GIL's switch interval): a
# test checks them in a process of its own, never in pytest's, which they would outlive
_RUN_APP_PROBE = """
import gc, json, sys
from specload.session.engine_thread import TUI_PROCESS
from specload.ui import app as ui_app
from tests.ui.conftest import tui_config

before = {"threshold": gc.get_threshold(), "switch": sys.getswitchinterval()}
seen = {}

def run(self, *args, **kwargs):  # the app itself is not started: what matters is the process it runs in
    seen.update(threshold=gc.get_threshold(), switch=sys.getswitchinterval())
    return 0

ui_app.SpecloadApp.run = run
ui_app.run_app(tui_config("http://127.0.0.1:9", "-n", "1"))
print(json.dumps({"before": before, "seen": seen, "want": {
    "threshold": TUI_PROCESS.gc_threshold, "switch": TUI_PROCESS.switch_interval_s}}))
"""


def test_run_app_applies_the_tui_process_settings_before_the_app_starts() -> None:
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _RUN_APP_PROBE], cwd=root, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    seen, before, want = out["seen"], out["before"], out["want"]
    assert seen, "run_app did not start the app"
    for key in ("threshold", "switch"):
        expected = before[key] if want[key] is None else want[key]
        assert seen[key] == pytest.approx(expected), key


def test_tui_process_settings_apply_the_gc_threshold_and_switch_interval_given() -> None:
    import subprocess

    code = ("import gc, sys; from specload.session.engine_thread import TuiProcess; "
            "TuiProcess(gc_threshold=(1234, 5, 67), switch_interval_s=0.0007).apply(); "
            "print(gc.get_threshold(), sys.getswitchinterval())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    threshold, switch = proc.stdout.rsplit(" ", 1)
    assert threshold == "(1234, 5, 67)"
    assert float(switch) == pytest.approx(0.0007)
