"""``specload tui --web``'s door, with real HTTP and websocket requests to the served port.

Another site's page in the user's browser must not read the dashboard or send it keys (its
websocket names its own Origin), a DNS-rebound name must not reach it (its Host names that
domain), and nobody without the printed token gets in. The first connection with the token runs
the load; a reload after it gets a note naming the record, and the record is left as it was.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from specload.record.reader import read_record
from tests import processes
from tests.integration.conftest import free_port, listening
from tests.integration.test_web_browser import stop
from tests.waiting import until

SIM = ["--sim-args", "--ttft-ms 20 --itl-ms 10 --quiet"]
SECRET = "sk-web-door-secret"


def start_web(tmp_path: Path, port: int, *args: str) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / "web.err"
    proc = processes.popen(
        [sys.executable, "-m", "specload.cli", "tui", "--web", "--port", str(port), *args],
        stdout=(tmp_path / "web.out").open("w"), stderr=err.open("w"), cwd=tmp_path,
    )
    return proc, err


async def refused(ws: object) -> int:
    try:
        async with ws:  # type: ignore[attr-defined]
            return 101
    except aiohttp.WSServerHandshakeError as e:
        return e.status


@pytest.mark.timeout(240)  # every wait is bounded; on a loaded 2-core machine a run takes a while
async def test_web_door_and_one_run(tmp_path: Path) -> None:
    pytest.importorskip("textual_serve", reason='textual-serve is the [web] extra: pip install "specload[web]"')
    port = free_port()
    rec = tmp_path / "web.jsonl"
    proc, err = start_web(tmp_path, port, "-c", "1", "-d", "60", "--max-tokens", "20", "--record", str(rec),
                          "--header", f"X-Api-Key: {SECRET}", *SIM)
    try:
        await until(lambda: listening(port) or proc.poll() is not None, timeout=60)
        banner = err.read_text()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)", banner)
        assert m and int(m.group(1)) == port, banner
        token = m.group(2)
        base = f"http://127.0.0.1:{port}"
        mine, evil = {"Origin": base}, {"Origin": "http://evil.example"}
        async with aiohttp.ClientSession() as http:
            async def status(path: str, **headers: str) -> int:
                async with http.get(base + path, headers=headers) as r:
                    return r.status

            # the page: no token, a wrong one, a rebound name with the right one
            assert await status("/") == 403
            assert await status("/?token=wrong") == 403
            assert await status(f"/?token={token}", Host=f"evil.example:{port}") == 403
            assert await status(f"/?token={token}", Host=f"127.0.0.1:{port + 1}") == 403
            async with http.get(f"{base}/?token={token}") as r:
                assert r.status == 200
                page = await r.text()
                cookie = r.headers.get("Set-Cookie", "")
            assert f'data-session-websocket-url="ws://127.0.0.1:{port}/ws"' in page
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and token in cookie
            # the same browser comes back with its cookie; localhost is this machine's name too
            assert await status("/", Cookie=f"specload-web-{port}={token}") == 200
            assert await status(f"/?token={token}", Host=f"localhost:{port}") == 200
            # a page of another site (cross-site websocket hijacking), or one without the token
            ws = f"{base}/ws?token={token}&width=100&height=30"
            assert await refused(http.ws_connect(f"{base}/ws", headers=mine)) == 403
            assert await refused(http.ws_connect(ws, headers=evil)) == 403
            assert await refused(http.ws_connect(ws, headers={"Origin": "null"})) == 403
            assert await refused(http.ws_connect(ws, headers={**mine, "Host": f"evil.example:{port}"})) == 403
            assert not rec.exists() or rec.stat().st_size == 0  # nothing of that started a run

            # the right token from its own page: the dashboard streams and the load runs
            async with http.ws_connect(ws, headers=mine) as sock:
                frames = 0
                async def dashboard_runs() -> bool:
                    return '"type":"request"' in (rec.read_text() if rec.exists() else "")
                while not await dashboard_runs():
                    msg = await sock.receive(timeout=60)
                    assert msg.type == aiohttp.WSMsgType.BINARY, msg
                    frames += 1
                assert frames > 5
            # closing the page ends the run as 'q' does
            await until(lambda: '"type":"end"' in rec.read_text(), timeout=60)
            kept = rec.read_bytes()

            # a reload is told where the record is, and starts nothing
            async with http.ws_connect(ws, headers=mine) as sock:
                msg = await sock.receive(timeout=30)
                assert msg.type == aiohttp.WSMsgType.BINARY
                assert f"run has ended (record: {rec})" in msg.data.decode()
                assert (await sock.receive(timeout=30)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert rec.read_bytes() == kept
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "interrupted" and data.requests
    finally:
        stop(proc)
    shown = err.read_text() + (tmp_path / "web.out").read_text()
    assert "Traceback" not in shown, shown[-1500:]
    assert SECRET not in shown  # textual-serve printed the command, --header and all
    # aiohttp's access log printed each "GET /?token=...": only the banner hands the token out
    assert shown.count(token) == 1 and "token=***" in shown, shown[-1500:]


def test_web_never_overwrites_a_record(tmp_path: Path) -> None:
    pytest.importorskip("textual_serve", reason='textual-serve is the [web] extra: pip install "specload[web]"')
    rec = tmp_path / "old.jsonl"
    rec.write_text('{"type":"run"}\n')
    p = processes.run([sys.executable, "-m", "specload.cli", "tui", "--web", "--port", str(free_port()),
                        "--record", str(rec)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"specload: error: --record {rec} holds a run already: name another file "
                                "(a record is never overwritten)")
    assert rec.read_text() == '{"type":"run"}\n'


async def test_web_names_its_record_before_any_viewer(tmp_path: Path) -> None:
    pytest.importorskip("textual_serve", reason='textual-serve is the [web] extra: pip install "specload[web]"')
    proc, err = start_web(tmp_path, free_port(), *SIM)
    try:
        await until(lambda: "token=" in err.read_text() or proc.poll() is not None, timeout=60)
        m = re.search(r"record: (specload-[\d-]+\.jsonl)", err.read_text())
        assert m, err.read_text()
        assert (tmp_path / m.group(1)).exists()  # made now: a second server in this second takes another
    finally:
        stop(proc)
    assert not (tmp_path / m.group(1)).exists()  # no viewer came: no empty file left behind
