"""LaunchedServer with real subprocesses: a tiny Python HTTP server the test writes to tmp_path.

Covers wait_ready (health 503 -> 200), stop with SIGTERM, escalation to SIGKILL for a server that
ignores SIGTERM (also behind a shell that does not exec), and a server that crashes at start-up
(wait_ready fails at once with the exit code, and the traceback lines are all available).
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specload.clock import FakeClock
from specload.watch.expect import ExpectLog
from specload.watch.launch import LaunchedServer, ReadyTimeoutError, ServerExitedError
from tests.integration.conftest import free_port
from tests.waiting import DEADLINE, pid_gone, until

SERVER = r"""
import os, signal, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
READY = sys.argv[0] + ".ready"  # the test makes it: ready now, whatever the delay
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
t0 = time.monotonic()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ready = (time.monotonic() - t0 >= delay or os.path.exists(READY)) and self.path == "/health"
        body = b'{"status":"ok"}' if ready else b'{"status":"loading"}'
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        pass


print(f"pid {os.getpid()}", flush=True)
print("loading model", flush=True)
print("warming up", file=sys.stderr, flush=True)
if mode == "crash":
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "server.py", line 1, in <module>', file=sys.stderr)
    print("RuntimeError: CUDA out of memory", file=sys.stderr, flush=True)
    sys.exit(1)
if mode == "segv":
    os.kill(os.getpid(), signal.SIGSEGV)
srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
print(f"listening on 127.0.0.1:{port}", flush=True)
srv.serve_forever()
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "server.py"
    p.write_text(SERVER)
    return p


_launched: list[LaunchedServer] = []


@pytest.fixture(autouse=True)
async def stop_launched_servers() -> AsyncIterator[None]:
    """Stop whatever a test launched even when it fails half-way: no server may outlive it."""
    yield
    while _launched:
        server = _launched.pop()
        server.grace = min(server.grace, 0.5)
        await asyncio.wait_for(server.stop(), DEADLINE)


def tracked(server: LaunchedServer) -> LaunchedServer:
    _launched.append(server)
    return server


def launch(script: Path, mode: str = "normal", delay: float = 0.3, **kw) -> tuple[LaunchedServer, int]:
    port = free_port()
    cmd = f"{sys.executable} {script} {port} {delay} {mode}"
    return tracked(LaunchedServer(cmd, f"http://127.0.0.1:{port}/health", **kw)), port


async def test_wait_ready_then_stop_with_sigterm(script: Path) -> None:
    server, _ = launch(script, delay=3600)
    progress: list[tuple[float, str | None]] = []
    lines: list[str] = []

    def on_progress(elapsed: float, line: str | None) -> None:
        progress.append((elapsed, line))
        if len(progress) == 2:  # two polls seen unready (503, or not listening yet): now it may be
            Path(f"{script}.ready").touch()

    async def read() -> None:
        async for line in server.lines():
            lines.append(line)

    await server.start()
    reader = asyncio.create_task(read())
    elapsed = await server.wait_ready(
        timeout=DEADLINE, poll_interval=0.05, on_progress=on_progress
    )
    assert 0 <= elapsed < DEADLINE
    assert len(progress) >= 2  # it polled while the server said 503 (or was not listening yet)
    assert any(ln is not None for _, ln in progress)  # progress shows the server's last line
    assert server.running and server.returncode is None

    ex = await asyncio.wait_for(server.stop(), DEADLINE)
    assert ex is not None
    assert ex.signal_name == "SIGTERM" and ex.returncode == -15
    assert ex.requested and ex.description == "stopped by SIGTERM"
    assert server.signal_name == "SIGTERM" and not server.running
    await asyncio.wait_for(reader, DEADLINE)  # output ended, so lines() ended
    # stdout and stderr arrive through one pipe in the order they were written
    assert lines[1:4] == ["loading model", "warming up", f"listening on 127.0.0.1:{_port(lines)}"]
    assert await server.stop() == ex  # idempotent


def _port(lines: list[str]) -> str:
    return next(ln for ln in lines if ln.startswith("listening")).rsplit(":", 1)[1]


async def test_server_ignoring_sigterm_gets_sigkill_after_grace(script: Path) -> None:
    notices: list[str] = []
    server, _ = launch(script, mode="ignore-term", grace=0.3, on_notice=notices.append)
    await server.wait_ready(timeout=DEADLINE, poll_interval=0.05)
    t0 = time.monotonic()
    ex = await asyncio.wait_for(server.stop(), DEADLINE)
    took = time.monotonic() - t0
    assert ex is not None and ex.signal_name == "SIGKILL" and ex.requested
    assert ex.description == "killed by SIGKILL after ignoring SIGTERM for 0.3 s"
    assert took >= 0.3
    assert any("sent SIGKILL" in n for n in notices)


async def test_sigkill_reaches_the_server_behind_a_shell(script: Path, tmp_path: Path) -> None:
    # A command after the server keeps a shell between us and it: the shell dies on SIGTERM,
    # the server ignores it, and stop() must still wait for and kill the whole group.
    port = free_port()
    cmd = f"{sys.executable} {script} {port} 0 ignore-term; echo server exited"
    server = tracked(LaunchedServer(cmd, f"http://127.0.0.1:{port}/health", grace=0.3))
    await server.wait_ready(timeout=DEADLINE, poll_interval=0.05)
    pid = int(next(ln for ln in server.last_lines() if ln.startswith("pid ")).split()[1])
    assert pid != server.pid
    ex = await asyncio.wait_for(server.stop(), DEADLINE)
    await until(lambda: pid_gone(pid))
    assert ex is not None and ex.requested
    assert ex.description.endswith("its process group ignored SIGTERM for 0.3 s and got SIGKILL")


async def test_crash_before_ready_fails_early_with_exit_code_and_lines(script: Path) -> None:
    server, _ = launch(script, mode="crash", ready_timeout=60)
    t0 = time.monotonic()
    with pytest.raises(ServerExitedError) as err:
        await asyncio.wait_for(server.wait_ready(poll_interval=0.05), DEADLINE)
    assert time.monotonic() - t0 < DEADLINE
    assert err.value.exit.returncode == 1 and err.value.exit.signal_name is None
    assert "exited with code 1" in str(err.value)
    assert err.value.last_lines[-1] == "RuntimeError: CUDA out of memory"
    assert server.returncode == 1 and server.exit_description == "exited with code 1"
    lines = [line async for line in server.lines()]
    assert lines[1:] == [
        "loading model",
        "warming up",
        "Traceback (most recent call last):",
        '  File "server.py", line 1, in <module>',
        "RuntimeError: CUDA out of memory",
    ]
    ex = await server.stop()
    assert ex is not None and not ex.requested


async def test_crash_by_signal_is_named(script: Path) -> None:
    server, _ = launch(script, mode="segv")
    with pytest.raises(ServerExitedError) as err:
        await asyncio.wait_for(server.wait_ready(poll_interval=0.05), DEADLINE)
    assert err.value.exit.signal_name == "SIGSEGV"
    assert server.exit_description == "killed by SIGSEGV"
    await server.stop()


async def test_ready_timeout(script: Path) -> None:
    server, _ = launch(script, delay=3600)
    with pytest.raises(ReadyTimeoutError) as err:
        await asyncio.wait_for(server.wait_ready(timeout=1.0, poll_interval=0.05), DEADLINE)
    # what the last poll met: refused (not listening yet), 503, or a server too slow to answer in time
    detail = err.value.last_detail
    assert detail in ("HTTP 503", "connection refused") or detail.startswith("timeout after "), detail
    assert server.running


async def test_expect_log_waits_for_server_lines(script: Path) -> None:
    """--expect-log: the launched server's lines are fed to ExpectLog, awaited before the load."""
    server, port = launch(script, delay=0)
    expect = ExpectLog([r"listening on 127\.0\.0\.1:\d+", "warming"], clock=FakeClock(start_ns=7))
    never = ExpectLog(["speculative decoding enabled"])

    async def feed() -> None:
        async for line in server.lines():
            expect.feed(line)
            never.feed(line)

    feeder = asyncio.create_task(feed())
    assert await expect.wait(DEADLINE) is True
    assert expect.all_seen and expect.missing == []
    match = expect.seen[r"listening on 127\.0\.0\.1:\d+"]
    assert match.line == f"listening on 127.0.0.1:{port}" and match.t_ns == 7
    assert expect.seen["warming"].line == "warming up"
    assert await never.wait(0.05) is False and never.missing == ["speculative decoding enabled"]
    await server.stop()
    await asyncio.wait_for(feeder, DEADLINE)


def test_expect_log_rejects_a_bad_regex_up_front() -> None:
    with pytest.raises(re.error):
        ExpectLog(["(unclosed"])


REAL = Path(__file__).resolve().parents[3] / "shared" / "real-server"


@pytest.mark.real_server
async def test_real_llama_server_launch_metrics_and_stats_lines() -> None:
    """The whole watch path against llama.cpp's server: launch, ready, /metrics deltas, log stats."""
    binary, model = REAL / "llama-server", REAL / "tiny-llama-f32.gguf"
    if not (binary.is_file() and model.is_file()):
        pytest.skip(f"real llama-server not found in {REAL}")
    import aiohttp

    from specload.watch.metrics import probe_metrics, samples_from_metrics
    from specload.watch.server_stats import parse_stats_line

    port = free_port()
    cmd = (
        f"{binary} -m {model} -a tiny --host 127.0.0.1 --port {port} -c 4096 -np 2 -t 1 "
        "--metrics --log-timestamps --log-prefix --spec-type ngram-mod"
    )
    server = tracked(LaunchedServer(cmd, f"http://127.0.0.1:{port}/health", grace=3))
    await server.wait_ready(timeout=DEADLINE, poll_interval=0.05)
    base = f"http://127.0.0.1:{port}"
    assert await probe_metrics(f"{base}/metrics")
    async with aiohttp.ClientSession() as session:

        async def scrape(prev, t_ns):  # type: ignore[no-untyped-def]
            async with session.get(f"{base}/metrics") as r:
                return samples_from_metrics(await r.text(), prev, t_ns)

        _, state = await scrape(None, 1_000_000_000)
        for _ in range(2):
            async with session.post(
                f"{base}/v1/completions", json={"prompt": "The quick brown", "max_tokens": 64}
            ) as r:
                assert r.status == 200
                await r.read()
        sample, _ = await scrape(state, 2_000_000_000)  # one fake second later
    assert sample.extra["engine"] == "llamacpp"
    assert sample.gen_tok_s == 128.0  # 2 x 64 tokens in the (fake) second between scrapes
    assert sample.running == 0 and sample.queued == 0
    if sample.extra.get("drafts"):  # ngram-mod drafts on this model's repetitive output
        assert 0 < sample.accept_rate <= 1 and sample.accept_len > 1

    ex = await asyncio.wait_for(server.stop(), DEADLINE)
    assert ex is not None and ex.requested
    kinds = [s.extra.get("kind") for ln in server.last_lines() if (s := parse_stats_line(ln, 0))]
    assert kinds.count("eval") == 2 and kinds.count("prompt_eval") == 2


async def test_concurrent_starts_spawn_one_server(tmp_path: Path) -> None:
    # lines() starts the server too; a session awaiting start() at the same moment once spawned two
    marker = tmp_path / "starts"
    server = LaunchedServer(f"echo started >> {marker}; sleep 30", None, grace=1)
    try:
        await asyncio.wait_for(asyncio.gather(server.start(), server.start(), server.start()), DEADLINE)
        # the shell creates the file for '>>' before echo writes to it: wait for the line itself
        await until(lambda: marker.exists() and "started" in marker.read_text(), what="the start line")
    finally:
        await server.stop()
    assert marker.read_text().count("started") == 1
