"""The ceiling benchmark's server (benchmarks/bench_server.py) speaks a stream specload reads exactly.

The ceiling figures are only worth something if specload does its full per-chunk work against this
server: every token a text chunk, the usage chunk counted, keep-alive connections reused, with the
server running as two processes on one port (SO_REUSEPORT).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specload.engine.api import CHAT, COMPLETIONS
from tests import processes
from tests.conftest import make_client

SERVER = Path(__file__).parents[2] / "benchmarks" / "bench_server.py"


@pytest.fixture
def bench_url():
    proc = processes.popen([sys.executable, str(SERVER), "--port", "0", "--procs", "2", "--burst", "7"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, (line, proc.stderr.read() if proc.stderr else "")
        url, _, pids = line.split("listening on ")[1].strip().partition(" pids ")
        assert len(pids.split()) == 2
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("flavour", [CHAT, COMPLETIONS])
async def test_bench_server_streams_are_read_token_by_token(bench_url: str, flavour: str) -> None:
    async with make_client(bench_url, flavour, max_tokens=50, ignore_eos=True) as c:
        recs = [await c.send("x", request_id=i) for i in range(6)]
    for r in recs:
        assert r.ok, r.error_detail
        assert r.output_tokens == 50 and not r.tokens_estimated
        assert r.chunks == 50
        assert r.finish_reason == "length"


async def test_bench_server_continuous_usage_gives_tokens_per_chunk(bench_url: str) -> None:
    async with make_client(bench_url, COMPLETIONS, max_tokens=20, ignore_eos=True, continuous_usage=True) as c:
        r = await c.send("x")
    assert r.ok and r.chunk_tokens == (1,) * 20
