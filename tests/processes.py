"""Every process a test starts: in a session (so a process group) of its own, killed with its whole
group when the test ends, fails or times out.

A child that outlives its test holds a port, a file or a core for the rest of the suite (a
``specload scan-log /dev/zero`` under a measuring launcher ran on for an hour once the launcher was
killed). ``popen``, ``run`` and ``exec_async`` are ``subprocess.Popen``, ``subprocess.run`` and
``asyncio.create_subprocess_exec`` with ``start_new_session=True``; each process is noted, and the
root conftest's autouse fixture SIGKILLs the group of each one the test started once the test's own
teardown is done (its fixtures stop their processes gently first). ``run`` also kills the group when
its ``timeout`` passes, where ``subprocess.run`` kills only the child. A process that leaves the
group on purpose (a server specload launches in a session of its own) is the product's to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

# the processes started so far in this pytest process, in order (pid = pgid: each leads its own
# group); the conftest notes how many there were when a test began and kills the ones after
_started: list[subprocess.Popen | asyncio.subprocess.Process] = []
_alone: set[int] = set()  # of those, the ones started in the test's own session: killed alone

SPECLOAD = [sys.executable, "-m", "specload.cli"]  # the CLI of this tree, as `specload` runs it


def popen(argv: Sequence[str | os.PathLike[str]], *, own_session: bool = True, **kw: Any) -> subprocess.Popen:
    """``subprocess.Popen`` in a session of its own, killed with its group when the test ends.

    ``own_session=False``: in the test's session, killed alone at the end. For processes whose CPU
    share a test arranges: with the kernel's autogroup scheduling each session is a group of its own
    that gets its fair share, so a SCHED_IDLE process in another session than its hog is not starved."""
    kw.pop("start_new_session", None)
    proc = subprocess.Popen(argv, start_new_session=own_session, **kw)
    _started.append(proc)
    if not own_session:
        _alone.add(proc.pid)
    return proc


def run(argv: Sequence[str | os.PathLike[str]], *, timeout: float, input: str | bytes | None = None,
        capture_output: bool = False, check: bool = False, **kw: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` whose timeout (required: a test never waits unbounded) kills the whole group
    before it raises ``TimeoutExpired``."""
    if capture_output:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    with popen(argv, **kw) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            raise
        except BaseException:  # pytest-timeout's failure, a KeyboardInterrupt: the group goes too
            kill_group(proc.pid)
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def specload(*args: str | os.PathLike[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess:
    """``specload ARGS`` run to its end, its output captured as text."""
    return run([*SPECLOAD, *args], timeout=timeout, capture_output=True, text=True, **kw)


async def exec_async(program: str | os.PathLike[str], *args: str | os.PathLike[str],
                     **kw: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec`` in a session of its own, killed with its group when the
    test ends."""
    kw.pop("start_new_session", None)
    proc = await asyncio.create_subprocess_exec(program, *args, start_new_session=True, **kw)
    _started.append(proc)
    return proc


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the group ``pid`` leads (nothing if every process of it has gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def mark() -> int:
    """How many processes were started so far: ``kill_since(mark())`` at the end of a test."""
    return len(_started)


def kill_since(n: int) -> None:
    """Kill the group of each process started after the ``n``-th, and reap the ones that are ours."""
    procs, _started[n:] = _started[n:], []
    for proc in procs:
        if proc.pid in _alone:
            _alone.discard(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        else:
            kill_group(proc.pid)
    for proc in procs:
        if isinstance(proc, subprocess.Popen):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
