"""The dashboard's own process settings (ui/process.py): the UI thread's priority lowered alone, and
``run_app``'s process-global settings applied before the app starts (in a process of its own: they
would outlive a test in pytest's)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from specload.ui.process import lower_thread_priority
from tests import processes


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
from specload.ui.process import TUI_PROCESS
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
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = processes.run([sys.executable, "-c", _RUN_APP_PROBE], cwd=root, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    seen, before, want = out["seen"], out["before"], out["want"]
    assert seen, "run_app did not start the app"
    for key in ("threshold", "switch"):
        expected = before[key] if want[key] is None else want[key]
        assert seen[key] == pytest.approx(expected), key


def test_tui_process_settings_apply_the_gc_threshold_and_switch_interval_given() -> None:

    code = ("import gc, sys; from specload.ui.process import TuiProcess; "
            "TuiProcess(gc_threshold=(1234, 5, 67), switch_interval_s=0.0007).apply(); "
            "print(gc.get_threshold(), sys.getswitchinterval())")
    proc = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    threshold, switch = proc.stdout.rsplit(" ", 1)
    assert threshold == "(1234, 5, 67)"
    assert float(switch) == pytest.approx(0.0007)
