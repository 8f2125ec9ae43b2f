"""Server text that carries a URL password reaches no output (issue 22, data and secrets).

A server may log a connection string (``url=http://alice:PW@host``) whose password specload was
never given: only the URL's shape says it is a secret. One password is planted in each field that
can carry server text: a plain log line, a stats line, a traceback's source line (the crash's
excerpt), the exception's message (the crash's message), a consequence line (the parent's sigquit),
an HTTP error body and a launched server's last lines before it died. The server is the built-in simulator writing its log file, which the run
tails (``--server-log``); once the load runs, the test appends the planted lines to that file, as
the server's own crash would be. HTTP error bodies come from ``tests/hostile.py`` (the simulator
cannot be told what to answer).

Checked everywhere the text can go: the record, stdout and stderr, ``--json``, the reports made from
the record (the table, ``--wide``, ``--csv``, ``--json``, HTML, PNG, SVG), the TUI's screens on the
engine process ``specload tui`` ships (the dashboard with its log tail, the crash excerpts), the
engine process's output file, and every process's command line (``ps``). Each check also finds the
masked form, so a planted line that was never read cannot pass.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from specload.record.reader import read_record
from specload.ui.widgets.crashes import CrashTable
from tests import processes
from tests.processes import specload
from tests.ui.conftest import live_app, load_running, quit_app, screen_text, wait_for
from tests.waiting import running, wait_until

PLANTED = {
    "log": "pw-log-1138",
    "stats": "pw-stats-2187",
    "frame": "pw-frame-3301",
    "message": "pw-msg-4471",
    "consequence": "pw-cons-5530",
}
HTTP_PASSWORD = "pw-http-6602"
MASKED = "alice:***@"


def planted_lines() -> str:
    """What the server logs: a line, a stats line, then its crash (with the parent's sigquit)."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    p = PLANTED
    return (
        f"[{ts}] INFO: loading adapter from url=http://alice:{p['log']}@hub.internal/lora\n"
        f"[{ts} TP0] Decode batch. #running-req: 2, #token: 90, token usage: 0.01, gen throughput "
        f"(token/s): 180.00, #queue-req: 0, kv=http://alice:{p['stats']}@kv.internal\n"
        f"[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/srv/sglang/kv_store.py", line 88, in connect\n'
        f'    self.store = open_store("http://alice:{p["frame"]}@kv.internal:9000/kv")\n'
        f"RuntimeError: cannot reach url=http://alice:{p['message']}@kv.internal:9000/kv (connection refused)\n"
        "\n"
        f"[{ts}] Received sigquit from a child process. It usually means the child failed. "
        f"store=http://alice:{p['consequence']}@kv.internal\n"
    )


def leaks(text: str | bytes, secrets: tuple[str, ...] = (*PLANTED.values(), HTTP_PASSWORD)) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [s for s in secrets if s.encode() in data]


def command_lines() -> str:
    return processes.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True, timeout=60).stdout


def _requests(record: Path) -> int:
    try:
        return record.read_bytes().count(b'"type":"request"')
    except OSError:
        return 0


def _report_outputs(record: Path, tmp_path: Path) -> dict[str, str | bytes]:
    """Every report made from the record, printed and written: the table (--wide), HTML, PNG, CSV,
    SVG and JSON, in three runs of ``specload report``."""
    html, png, svg = tmp_path / "r.html", tmp_path / "r.png", tmp_path / "r.svg"
    outs: dict[str, str | bytes] = {}
    for args in (("--wide", "--html", str(html), "--plot", str(png)), ("--csv", "--plot", str(svg)), ("--json",)):
        res = specload("report", str(record), *args)
        assert res.returncode == 0, (args, res.stderr)
        outs[f"report {args[0]}"] = res.stdout + res.stderr
    outs["html"], outs["png"], outs["svg"] = html.read_text(), png.read_bytes(), svg.read_text()
    assert MASKED in outs["html"] and MASKED in str(outs["report --wide"])  # the crash is there, masked
    return outs


def test_planted_url_passwords_reach_no_headless_output(tmp_path: Path) -> None:
    log, record = tmp_path / "server.log", tmp_path / "r.jsonl"
    log.touch()
    proc = processes.popen(
        [sys.executable, "-m", "specload.cli", "run", "-c", "2", "-d", "8", "--max-tokens", "8",
         "--sim-args", f"--log-file {log} --ttft-ms 5 --itl-ms 5 --spec-tokens 0 --log-interval 0.3",
         "--server-log", str(log), "--on-crash", "continue", "--record", str(record), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the load runs: the log is being tailed
        wait_until(lambda: running(proc) and _requests(record) >= 3, 60, "the load to start")
        with log.open("a") as f:
            f.write(planted_lines())
        wait_until(lambda: b'"type":"crash"' in record.read_bytes() or proc.poll() is not None, 20,
                   "the crash in the record")
        commands = command_lines()
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    summary = orjson.loads(stdout)
    assert len(summary["crashes"]) == 1, summary["crashes"]  # the RuntimeError, the sigquit its consequence
    (crash,) = summary["crashes"]
    assert crash["message"] == f"cannot reach url=http://{MASKED}kv.internal:9000/kv (connection refused)"
    assert "SERVER CRASH" in stderr and MASKED in stderr
    data = read_record(str(record))
    line = data.crashes[-1]  # (a crash line is written again as its consequences join)
    assert f'open_store("http://{MASKED}kv.internal:9000/kv")' in line["excerpt"]
    assert [c["message"] for c in line["consequences"]] == [
        f"Received sigquit from a child process. It usually means the child failed. store=http://{MASKED}kv.internal"]
    artefacts: dict[str, str | bytes] = {"stdout (--json)": stdout, "stderr": stderr, "record": record.read_bytes(),
                                         "ps": commands, **_report_outputs(record, tmp_path)}
    for where, text in artefacts.items():
        assert not leaks(text), f"{leaks(text)} in {where}"


async def test_a_url_password_in_an_http_error_body_reaches_no_output(hostile, tmp_path: Path) -> None:
    server = await hostile()
    server.mode, server.params = "status", {"status": 502, "body": orjson.dumps(
        {"error": {"message": f"upstream http://alice:{HTTP_PASSWORD}@10.0.0.7:8001 refused"}})}
    record = tmp_path / "r.jsonl"
    run = await processes.exec_async(
        sys.executable, "-m", "specload.cli", "run", server.url, "--api", "chat", "-c", "1", "-n", "3",
        "--max-tokens", "4", "--no-health", "--metrics-url", "off", "--record", str(record), "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(run.communicate(), 90)
    stdout, stderr = out.decode(), err.decode()
    details = [r["error"]["detail"] for r in read_record(str(record)).requests]
    assert details and all(f"upstream http://{MASKED}10.0.0.7:8001 refused" in d for d in details), details
    artefacts = {"stdout (--json)": stdout, "stderr": stderr, "record": record.read_text()}
    for args in ((), ("--wide",), ("--json",)):
        res = specload("report", str(record), *args)
        artefacts[f"report {' '.join(args)}"] = res.stdout + res.stderr
    for where, text in artefacts.items():
        assert not leaks(text), f"{leaks(text)} in {where}"


@pytest.mark.timeout(180)
async def test_planted_url_passwords_never_reach_the_tui_or_its_engine_process(tmp_path: Path) -> None:
    log, record = tmp_path / "server.log", tmp_path / "t.jsonl"
    log.touch()
    # slow requests (3 s each, one log line each): the planted lines stay in the log tail on screen for
    # about 15 s after they are written (with 0.5 s requests they scrolled off before a busy machine's
    # dashboard pulled the tail)
    app = live_app("-c", "1", "-d", "90", "--max-tokens", "4", "--record", str(record),
                   "--sim-args", f"--log-file {log} --ttft-ms 1000 --itl-ms 500 --spec-tokens 0 --log-interval 30",
                   "--server-log", str(log), "--on-crash", "continue")
    engine = app.source.proc
    async with app.run_test(size=(160, 48)) as pilot:
        await load_running(pilot, app, started=2, timeout=60)
        with log.open("a") as f:
            f.write(planted_lines())
        await wait_for(pilot, lambda: app.query_one(CrashTable).crashes, "the planted crash on screen", timeout=30)
        # the log tail is pulled once a second
        await wait_for(pilot, lambda: "open_store(" in screen_text(app), "the planted lines in the log tail", timeout=30)
        screens = {"dashboard": screen_text(app)}
        # the excerpts show the crashes of the frame in hand when e is pressed: its consequence first
        await wait_for(pilot, lambda: "↳ then server_fatal" in screen_text(app), "the consequence in the crash table")
        await pilot.press("e")  # the crash excerpts
        await wait_for(pilot, lambda: "Server crashes" in (t := screen_text(app)) and "then server_fatal:" in t,
                       "the excerpts", timeout=30)
        screens["excerpts"] = screen_text(app)
        await pilot.press("escape")
        commands = command_lines()
        engine_output = Path(f"/proc/{engine.pid}/fd/1").read_bytes()  # its stdout and stderr, one file
        await quit_app(pilot, app)
    assert f'open_store("http://{MASKED}kv.internal:9000/kv")' in screens["dashboard"]  # the log tail
    assert f"store=http://{MASKED}kv.internal" in screens["excerpts"]
    assert "open_store" in screens["excerpts"]
    artefacts = {**{f"screen: {k}": v for k, v in screens.items()}, "engine process output": engine_output,
                 "ps": commands, "record": record.read_bytes()}
    for where, text in artefacts.items():
        assert not leaks(text), f"{leaks(text)} in {where}"


def test_a_url_password_in_a_launched_server_last_words_reaches_no_output(tmp_path: Path) -> None:
    # the server dies before it is ready; its last lines are in the error (stderr, the record's end)
    boot = tmp_path / "boot.log"
    boot.write_text("loading weights\nconnecting to postgres://app:pw-start-7781@db.internal/models\n")
    record = tmp_path / "r.jsonl"
    res = specload("run", "http://127.0.0.1:9", "--launch", f"cat {boot}; exit 3", "-n", "1",
                    "--record", str(record))
    assert res.returncode != 0 and "postgres://app:***@db.internal/models" in res.stderr, res.stderr
    for where, text in (("stderr", res.stderr), ("stdout", res.stdout), ("record", record.read_text())):
        assert "pw-start-7781" not in text, where
