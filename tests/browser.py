"""A headless-Chromium harness for tests that look at a page as a person would.

It starts the operating system's Chromium (Debian's ``chromium``; ``$SPECLOAD_CHROMIUM`` names
another binary) with a fresh profile and the flags that work on a machine without a network, and
drives it over the DevTools protocol with aiohttp's websocket client: Python only, no
playwright/puppeteer download. A ``Page`` collects what a person would notice: console errors,
uncaught exceptions, failed loads and every URL the page asked for, and can evaluate JavaScript and
take a screenshot.

    async with Chromium.start(tmp_path) as browser:
        page = await browser.new_page()
        await page.goto("file:///.../report.html")
        await page.wait_for("window.specloadReady === true")
        png = await page.screenshot(tmp_path / "shot.png")
        assert not page.errors

Tests that use it are marked ``browser`` and skipped with a reason when no Chromium is installed
(``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests import processes

# flags that work here (and in CI): the machine has no network but the loopback, so every
# background fetch (updates, sync, safe browsing, Google's DNS) is turned off
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-port=0",
    # no name resolves but the loopback: a page that asks for anything else fails at once rather
    # than sending a lookup off the machine (tests only ever talk to 127.0.0.1)
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
)

DEADLINE = 30.0


def find_chromium() -> str | None:
    env = os.environ.get("SPECLOAD_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def require_chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("no Chromium installed (apt-get install chromium, or set SPECLOAD_CHROMIUM); .ci/run installs it")
    return path


@dataclass
class ConsoleEntry:
    source: str  # console, exception, log, network
    level: str
    text: str

    def __str__(self) -> str:
        return f"[{self.source}/{self.level}] {self.text}"


class CDPError(Exception):
    pass


class Page:
    """One tab, attached through a flattened DevTools session."""

    def __init__(self, browser: Chromium, session_id: str, target_id: str) -> None:
        self.browser = browser
        self.session_id = session_id
        self.target_id = target_id
        self.console: list[ConsoleEntry] = []
        self.requests: list[str] = []
        self.websockets: list[str] = []  # URLs of the websockets the page opened
        self.ws_frames_received = 0
        self._load = asyncio.Event()

    @property
    def errors(self) -> list[ConsoleEntry]:
        """What a person with the console open would call an error."""
        return [e for e in self.console if e.level in ("error", "exception")]

    async def send(self, method: str, params: dict | None = None, timeout: float = DEADLINE) -> dict:
        return await self.browser.send(method, params, session_id=self.session_id, timeout=timeout)

    def _on_event(self, method: str, params: dict) -> None:
        if method == "Runtime.consoleAPICalled":
            text = " ".join(
                str(a.get("value", a.get("description", a.get("type")))) for a in params.get("args", [])
            )
            self.console.append(ConsoleEntry("console", params.get("type", "log"), text))
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            text = (d.get("exception") or {}).get("description") or d.get("text", "")
            self.console.append(ConsoleEntry("exception", "exception", text))
        elif method == "Log.entryAdded":
            e = params.get("entry", {})
            self.console.append(ConsoleEntry("log", e.get("level", "info"), f"{e.get('text', '')} {e.get('url', '')}"))
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Network.loadingFailed":
            if not params.get("canceled"):
                self.console.append(ConsoleEntry("network", "error", params.get("errorText", "load failed")))
        elif method == "Network.webSocketCreated":
            self.websockets.append(params.get("url", ""))
        elif method == "Network.webSocketFrameReceived":
            self.ws_frames_received += 1
        elif method == "Page.loadEventFired":
            self._load.set()

    async def goto(self, url: str, timeout: float = DEADLINE) -> None:
        self._load.clear()
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CDPError(f"navigating to {url}: {result['errorText']}")
        await asyncio.wait_for(self._load.wait(), timeout)

    async def evaluate(self, expression: str, timeout: float = DEADLINE) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            d = result["exceptionDetails"]
            raise CDPError((d.get("exception") or {}).get("description") or d.get("text", "evaluate failed"))
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = DEADLINE) -> Any:
        """Poll a JavaScript expression until it is truthy (bounded)."""

        async def poll() -> Any:
            while True:
                value = await self.evaluate(expression)
                if value:
                    return value
                await asyncio.sleep(0.05)

        return await asyncio.wait_for(poll(), timeout)

    async def set_viewport(self, width: int, height: int) -> None:
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    async def screenshot(self, path: Path, *, full_page: bool = True) -> bytes:
        params: dict = {"format": "png"}
        if full_page:
            m = await self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params["captureBeyondViewport"] = True
        result = await self.send("Page.captureScreenshot", params, timeout=60)
        data = base64.b64decode(result["data"])
        Path(path).write_bytes(data)
        return data


@dataclass
class Chromium:
    proc: subprocess.Popen
    ws: aiohttp.ClientWebSocketResponse
    http: aiohttp.ClientSession
    profile: tempfile.TemporaryDirectory
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _pending: dict[int, asyncio.Future] = field(default_factory=dict)
    _pages: dict[str, Page] = field(default_factory=dict)
    _reader: asyncio.Task | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, binary: str | None = None) -> AsyncIterator[Chromium]:
        binary = binary or require_chromium()
        profile = tempfile.TemporaryDirectory(prefix="specload-chromium-")
        proc = processes.popen(  # a group of its own: its zygote and renderers go with it at the end
            [binary, *FLAGS, f"--user-data-dir={profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        http = aiohttp.ClientSession()
        browser: Chromium | None = None
        try:
            # Chromium writes the port it bound and the browser target's path into the profile
            port_file = Path(profile.name) / "DevToolsActivePort"

            async def port_ready() -> list[str]:
                while True:
                    if proc.poll() is not None:
                        raise CDPError(f"{binary} exited with status {proc.returncode} before it listened")
                    if port_file.exists():
                        lines = port_file.read_text().split()
                        if len(lines) >= 2:
                            return lines
                    await asyncio.sleep(0.05)

            port, path = await asyncio.wait_for(port_ready(), DEADLINE)
            ws = await http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
            browser = cls(proc=proc, ws=ws, http=http, profile=profile)
            browser._reader = asyncio.create_task(browser._read())
            yield browser
        finally:
            if browser is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(browser.send("Browser.close"), 5)
                if browser._reader is not None:
                    browser._reader.cancel()
                with contextlib.suppress(Exception):
                    await browser.ws.close()
            await http.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                processes.kill_group(proc.pid)
                proc.wait(timeout=5)
            profile.cleanup()

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    if "error" in data:
                        fut.set_exception(CDPError(f"{data['error'].get('message')}"))
                    else:
                        fut.set_result(data.get("result", {}))
            else:
                page = self._pages.get(data.get("sessionId", ""))
                if page is not None:
                    page._on_event(data.get("method", ""), data.get("params", {}))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(CDPError("the browser closed the DevTools connection"))

    async def send(
        self, method: str, params: dict | None = None, *, session_id: str | None = None, timeout: float = DEADLINE
    ) -> dict:
        msg_id = next(self._ids)
        msg: dict = {"id": msg_id, "method": method, "params": params or {}}
        if session_id:
            msg["sessionId"] = session_id
        fut = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        await self.ws.send_str(json.dumps(msg))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(msg_id, None)

    async def new_page(self, width: int = 1400, height: int = 1000) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"], target["targetId"])
        self._pages[page.session_id] = page
        for domain in ("Page", "Runtime", "Log", "Network"):
            await page.send(f"{domain}.enable")
        await page.set_viewport(width, height)
        return page
