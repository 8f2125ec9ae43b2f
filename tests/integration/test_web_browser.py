"""``specload tui --web``: the dashboard served with textual-serve, opened in headless Chromium.

The page loads from 127.0.0.1 only (no web font fetched from elsewhere), its websocket connects and
streams the dashboard, which runs the load and writes the record; a second browser is turned away
(it would start a second load); closing the page quits as 'q' does (the record gets its end line),
and a reload after that starts no second run over the record. The footer shows its keys before
the page is ever clicked (Textual leaves it blank while the app is blurred, as a web page starts).

Marked ``browser``; skipped with a reason when no Chromium or no textual-serve is installed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specload.record.reader import read_record
from tests import processes
from tests.browser import Chromium, Page, require_chromium
from tests.integration.conftest import free_port, listening
from tests.integration.test_report_browser import shots_dir
from tests.waiting import until

pytestmark = pytest.mark.browser


async def footer_drawn(page: Page, shot: Path, rows: int, box: list[float]) -> bool:
    """The left half of the terminal's last row (the footer) holds more than its background."""
    from PIL import Image

    await page.screenshot(shot, full_page=False)
    cell = box[1] / rows
    strip = Image.open(shot).convert("RGB").crop((0, int(cell * (rows - 1)) + 1, int(box[0] / 2), int(cell * rows) - 1))
    counts = sorted(strip.getcolors(1 << 20) or [], reverse=True)
    return sum(n for n, _ in counts[1:]) > 0.02 * strip.width * strip.height


def stop(proc: subprocess.Popen) -> None:
    """End a ``tui --web`` server as Ctrl+C does (its process group), killed if it does not go."""
    if proc.poll() is None:
        processes.kill_group(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            processes.kill_group(proc.pid)
            proc.wait(timeout=5)


def record_lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.exists() else 0


@pytest.mark.timeout(300)  # every wait is bounded; on a loaded 2-core machine the steps take a while
async def test_dashboard_in_a_browser(tmp_path: Path) -> None:
    pytest.importorskip("textual_serve", reason='textual-serve is the [web] extra: pip install "specload[web]"')
    pytest.importorskip("PIL", reason='Pillow (with the [report] extra) reads the screenshot')
    chromium = require_chromium()
    port = free_port()
    rec = tmp_path / "web.jsonl"
    server = processes.popen(
        [sys.executable, "-m", "specload.cli", "tui", "--web", "--port", str(port), "-c", "2", "-d", "60",
         "--max-tokens", "40", "--record", str(rec), "--sim-args", "--ttft-ms 20 --itl-ms 10 --quiet"],
        stdout=(tmp_path / "web.out").open("w"), stderr=(tmp_path / "web.err").open("w"),
    )
    try:
        await until(lambda: listening(port) or server.poll() is not None, timeout=60)
        assert server.poll() is None, (tmp_path / "web.err").read_text()
        token = re.search(r"\?token=([\w-]+)", (tmp_path / "web.err").read_text())
        assert token, (tmp_path / "web.err").read_text()
        url = f"http://127.0.0.1:{port}/?token={token.group(1)}"
        async with Chromium.start(chromium) as browser:
            page = await browser.new_page(width=1400, height=900)
            await page.goto(url)
            # textual.js marks the page once the dashboard's first bytes arrive over the websocket
            await page.wait_for("document.body.classList.contains('-first-byte')", timeout=60)
            await until(lambda: '"type":"request"' in (rec.read_text() if rec.exists() else ""), timeout=60)
            # the footer's key hints are drawn though the page was never clicked (nothing focused it)
            shot = shots_dir(tmp_path) / "web-dashboard.png"
            rows = int(re.search(r"height=(\d+)", page.websockets[0]).group(1))
            box = await page.evaluate("(() => { const r = document.querySelector('.xterm-screen')"
                                      ".getBoundingClientRect(); return [r.width, r.height]; })()")
            assert box[0] <= 1400 and box[1] <= 900, box  # the whole terminal fits the window, clock included
            await until(lambda: footer_drawn(page, shot, rows, box), timeout=30, what="the footer's keys")
            assert len(page.websockets) == 1 and page.websockets[0].startswith(f"ws://127.0.0.1:{port}/ws?")
            assert page.ws_frames_received > 10
            assert all(u.startswith(f"http://127.0.0.1:{port}/") for u in page.requests), page.requests
            assert not page.errors, [str(e) for e in page.errors]

            # a second viewer is turned away: its socket gets the note and closes
            second = await browser.new_page(width=1000, height=600)
            await second.goto(url)
            await second.wait_for("document.body.classList.contains('-closed')", timeout=60)
            assert second.ws_frames_received == 1

            # closing the first page quits the dashboard as 'q' does: the record gets its end line
            await browser.send("Target.closeTarget", {"targetId": page.target_id})
            await until(lambda: '"type":"end"' in rec.read_text(), timeout=60)
            kept = rec.read_bytes()

            # a reload after it is told where the record is, and starts no second run over it
            again = await browser.new_page(width=1000, height=600)
            await again.goto(url)
            await again.wait_for("document.body.classList.contains('-closed')", timeout=60)
            assert again.ws_frames_received == 1
            assert rec.read_bytes() == kept
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "interrupted"
        assert data.requests and data.run is not None and data.run["target"].startswith("http://127.0.0.1:")
    finally:
        stop(server)
    out, err = (tmp_path / "web.out").read_text(), (tmp_path / "web.err").read_text()
    assert "open to this machine only (127.0.0.1)" in err, err[-500:]
    assert "Traceback" not in out + err, (out + err)[-1500:]


def test_web_without_textual_serve_names_the_extra(tmp_path: Path) -> None:
    # a Python whose import of textual_serve fails: the one-line error names the extra
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    (tmp_path / "textual_serve.py").write_text("raise ImportError('not here')\n")
    p = processes.run([sys.executable, "-m", "specload.cli", "tui", "--web"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == ('specload: error: --web needs textual-serve, which is not installed: '
                                'pip install "specload[web]"')
