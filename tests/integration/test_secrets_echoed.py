"""A server that echoes credentials back: the URL's password, the Basic token, the API key and a
credential header must reach no output: stderr, ``--json``, the record (error details, crash lines,
the log command) and the TUI's screen.

The hostile server (``tests/hostile.py``, mode ``echo``) answers every request with an error message
holding what it was sent; the "server log" read through ``--server-log-cmd`` prints a crash whose
message holds the password, as a server that logs its failed logins would.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path

import orjson

from specload.record.reader import read_record
from specload.ui.app import create_app
from specload.ui.widgets.crashes import CrashTable
from tests import processes
from tests.ui.conftest import screen_text, tui_config, wait_for

PASSWORD = "hunter2-Pw-0451"
KEY = "sk-echo-SECRET-7788"
HEADER_SECRET = "hdr-SECRET-9911"
CRASH_LOG = f"""[2026-11-30 05:34:15 TP0] Decode batch. #running-req: 1, #token: 20, token usage: 0.01, gen throughput (token/s): 10.0
Traceback (most recent call last):
  File "/srv/auth.py", line 10, in login
    check("admin", "{PASSWORD}")
ValueError: bad password {PASSWORD} for admin (key {KEY})
"""


def _leaks(text: str) -> list[str]:
    b64 = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    return [s for s in (PASSWORD, KEY, HEADER_SECRET, b64) if s in text]


def _args(url: str, log: Path) -> list[str]:
    host = url.removeprefix("http://")
    return [f"http://admin:{PASSWORD}@{host}", "--api", "chat", "-c", "2", "-n", "4", "--max-tokens", "4",
            "--header", f"X-Auth-Token: {HEADER_SECRET}", "--api-key-env", "ECHO_KEY",
            "--server-log-cmd", f"cat {log}; sleep 30", "--on-crash", "continue", "--no-health",
            "--metrics-url", "off"]


async def test_credentials_echoed_by_the_server_reach_no_headless_output(hostile, tmp_path: Path) -> None:
    server = await hostile()
    server.mode = "echo"
    log = tmp_path / "server.log"
    log.write_text(CRASH_LOG)
    rec = tmp_path / "r.jsonl"
    proc = await processes.exec_async(
        sys.executable, "-m", "specload.cli", "run", *_args(server.url, log), "--json", "--record", str(rec),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={"ECHO_KEY": KEY, "PATH": "/usr/bin:/bin"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    stdout, stderr = out.decode(), err.decode()
    assert server.requests >= 4  # the echoing server did answer the load
    summary = orjson.loads(stdout)
    assert summary["errors"] == {"http": 4}, stderr
    assert summary["crashes"] and "bad password" in summary["crashes"][0]["message"], stderr
    data = read_record(str(rec))
    details = [r["error"]["detail"] for r in data.requests]
    assert all("denied: auth=" in d for d in details)
    assert data.crashes and "Traceback" in data.crashes[0]["excerpt"]
    for where, text in (("stdout", stdout), ("stderr", stderr), ("record", rec.read_text())):
        assert not _leaks(text), f"{_leaks(text)} in {where}"


async def test_credentials_echoed_by_the_server_never_reach_the_tui_screen(hostile, tmp_path: Path,
                                                                           monkeypatch) -> None:
    server = await hostile()
    server.mode = "echo"
    log = tmp_path / "server.log"
    log.write_text(CRASH_LOG)
    monkeypatch.setenv("ECHO_KEY", KEY)
    cfg = tui_config(*_args(server.url, log), "--record", str(tmp_path / "t.jsonl"))
    app = create_app(cfg)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.requests_failed >= 4
                       and app.query_one(CrashTable).crashes, "failed requests and the crash on screen", timeout=30)
        await pilot.pause(1.2)  # the log tail is pulled once a second
        screens = [screen_text(app)]
        await pilot.press("e")  # the crash excerpts
        await pilot.pause(0.3)
        screens.append(screen_text(app))
        await pilot.press("escape")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q")
    assert "bad password" in screens[1]  # the excerpt is there, masked
    for screen in screens:
        assert not _leaks(screen), _leaks(screen)
