"""What integration tests share: a free port, the simulator as a process of its own, its SSE read.

(Every tier's fixtures, ``make_config`` and ``make_client``: ``tests/conftest.py``; starting
processes: ``tests.processes``; bounded waits: ``tests.waiting``.)

    with sim_process("--ttft-ms", "10") as url:   # `specload sim --port 0 --quiet --seed 0 ...`
        specload("run", url, "-n", "4")
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson

from tests import processes
from tests.waiting import DEADLINE


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago, for a process that must be
    told its port (one that can take port 0 and say which it bound should do that instead)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def read_line(proc: subprocess.Popen, timeout: float = DEADLINE) -> str:
    """The next line ``proc`` writes to its stdout (a pipe), waiting at most ``timeout`` seconds
    (``proc.stdout.readline()`` alone waits for ever on a child that hangs before it writes)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        fd = proc.stdout.fileno()
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"no line from {proc.args!r} within {timeout:g} s (so far {buf!r})")
            chunk = os.read(fd, 1)  # one byte at a time: nothing past the line is taken from the pipe
            if not chunk:
                break
            buf += chunk
    return buf.decode()


@contextlib.contextmanager
def sim_process(*args: str, **popen_kw: Any) -> Iterator[str]:
    """``specload sim --port 0 ARGS`` in a process of its own (quiet and seeded unless ARGS say
    otherwise); yields its URL once it listens; SIGTERM at the end, then its group is killed."""
    extra = [*args]
    if "--log-file" not in extra and "--quiet" not in extra:
        extra.append("--quiet")
    if "--seed" not in extra:
        extra += ["--seed", "0"]
    proc = processes.popen([sys.executable, "-m", "specload.sim", "--port", "0", *extra],
                           stdout=subprocess.PIPE, **popen_kw)
    try:
        line = read_line(proc)
        assert "listening on " in line, line
        yield line.split("listening on ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            processes.kill_group(proc.pid)
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def read_sse(resp: aiohttp.ClientResponse, t0: float) -> list[tuple[float, Any]]:
    """(arrival seconds after ``t0`` on ``time.perf_counter``, parsed event) for every ``data:``
    line; ``[DONE]`` as the string."""
    events: list[tuple[float, Any]] = []
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        t = time.perf_counter() - t0
        events.append((t, "[DONE]" if payload == b"[DONE]" else orjson.loads(payload)))
    return events
