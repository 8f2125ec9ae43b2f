"""The suite's own process rule (``tests.processes``): a child a test starts, and whatever that child
starts, do not outlive the test, whether it ends, fails or times out."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import processes
from tests.waiting import pid_gone, wait_until

# a parent that starts a long sleeper, says its pid, and then waits for it (as the RSS launcher of
# test_scan_unseen waits for its scan-log)
PARENT = "import subprocess, sys; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); p.wait()"


def test_a_timeout_in_run_kills_the_grandchild_too(tmp_path) -> None:
    out = tmp_path / "pid"
    code = PARENT.replace("print(p.pid, flush=True)", f"open({str(out)!r}, 'w').write(str(p.pid))")
    with pytest.raises(subprocess.TimeoutExpired):
        processes.run([sys.executable, "-c", code], timeout=3)  # (subprocess.run would kill the parent only)
    grandchild = int(out.read_text())
    wait_until(lambda: pid_gone(grandchild), what="the sleeper the timed-out parent started")


def test_the_end_of_a_test_kills_what_its_children_left_running() -> None:
    n = processes.mark()
    parent = processes.popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    grandchild = int(parent.stdout.readline())
    parent.kill()  # the parent goes (as a launcher killed on a timeout did); its child runs on
    parent.wait(10)
    parent.stdout.close()
    assert not pid_gone(grandchild)
    processes.kill_since(n)  # what the conftest does once a test's teardown is done
    wait_until(lambda: pid_gone(grandchild), what="the orphaned sleeper")
    assert processes.mark() == n


def test_a_child_in_the_tests_own_session_is_killed_alone() -> None:
    n = processes.mark()
    child = processes.popen(["sleep", "300"], own_session=False)
    assert os.getsid(child.pid) == os.getsid(0)  # (where autogroup scheduling puts it with the test)
    processes.kill_since(n)
    assert child.wait(10) == -9 and processes.mark() == n
