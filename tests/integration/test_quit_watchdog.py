"""The quit watchdog ends a process whose loop is blocked for good, and kills the launched server.

A child process arms the watchdog and then blocks its main thread forever in ``Queue.put`` (what
Textual's writer did on a dead terminal). The watchdog must end it with the run's exit status and
kill the "server", a process group of its own. Disarmed in time, it does nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests import processes
from tests.waiting import pid_gone, wait_until

CHILD = textwrap.dedent("""
    import queue, subprocess, sys, time
    from specload.ui.watchdog import QuitWatchdog
    server = subprocess.Popen(["sleep", "60"], start_new_session=True)
    print(server.pid, flush=True)
    dog = QuitWatchdog(process_groups=lambda: [server.pid], exit_code=lambda: 129)
    dog.arm(float(sys.argv[1]), "test")
    if sys.argv[2] == "disarm":
        dog.disarm()
        time.sleep(float(sys.argv[1]) + 0.5)  # past the deadline
        server.kill()
        sys.exit(0)
    q = queue.Queue(1)
    q.put(1)
    q.put(2)  # blocks forever
""")


def _run(mode: str) -> tuple[int, int]:
    proc = processes.popen([sys.executable, "-c", CHILD, "0.3", mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    server = int(proc.stdout.readline())
    return proc.wait(timeout=30), server


def test_the_watchdog_ends_a_blocked_process_and_its_server() -> None:
    code, server = _run("block")
    assert code == 129
    wait_until(lambda: pid_gone(server), what="the launched server to end with the watchdog's process")


def test_a_disarmed_watchdog_does_nothing() -> None:
    code, _ = _run("disarm")
    assert code == 0
