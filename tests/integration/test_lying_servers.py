"""Servers that answer something else than they were asked, met by ``specload run`` before the load.

Each case is a real hostile server on 127.0.0.1 (``tests/hostile.py``) and the real CLI: a redirect
to another origin is followed by no request (probe, tokenizer, calibration, load, /metrics, /health),
so the API key never reaches it; a web page answering 200 is not taken for the API; a server that
ignores ``"stream": true`` is said to, at once, in one line, before the load.
"""

from __future__ import annotations

import asyncio
import os
import sys

import orjson

from tests import processes
from tests.hostile import HostileServer

KEY = "sk-lying-server-secret"


async def specload(*args: str, timeout: float = 90) -> tuple[int, str, str]:
    proc = await processes.exec_async(
        sys.executable, "-m", "specload.cli", "run", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "OPENAI_API_KEY": KEY},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


async def test_no_request_follows_a_redirect_to_another_origin(hostile) -> None:
    server: HostileServer = await hostile()
    other: HostileServer = await hostile()
    server.mode, server.params = "redirect", {"location": other.url, "everywhere": True}
    # --api auto: the probe meets the redirect first and says so, before any load
    code, _, err = await specload(server.url, "-c", "1", "-n", "2", "--max-tokens", "4",
                                  "--no-health", "--metrics-url", "off")
    assert code == 1, err
    line = one_line_error(err)
    assert f"{server.url}/v1/models redirects (HTTP 307) to {other.url}/v1/models" in line
    assert "follows no redirect" in line and KEY not in err
    assert other.hits == 0
    # /v1/models answering, a given API: the tokenizer and calibration requests, the load and /metrics
    # each meet a 307 to the other origin, and none follows it (/health's monitor never did)
    server.params["but"] = ("/v1/models",)
    hits = server.hits
    code, out, err = await specload(server.url, "--api", "chat", "-c", "1", "-n", "2", "--max-tokens", "4",
                                    "--no-health", "--json")
    assert code == 5, err  # every request failed
    assert orjson.loads(out)["errors"] == {"redirect": 2}
    assert server.hits - hits >= 6, err  # models, two tokenizers, calibration, the load, metrics
    assert other.hits == 0, err  # the key went nowhere else
    assert KEY not in err + out


async def test_a_web_page_is_not_taken_for_the_api(hostile) -> None:
    server: HostileServer = await hostile()
    server.mode = "html"  # 200 text/html on every path: a UI's port, a proxy's login page
    code, out, err = await specload(server.url, "-c", "1", "-n", "4", "--max-tokens", "4", "--no-health",
                                    "--metrics-url", "off")
    assert code == 1, err
    line = one_line_error(err)
    assert line == (f"specload: error: {server.url} speaks none of chat, completions, /generate: each answers "
                    "HTTP 200 text/html: a web page, not an inference API")
    assert "every request failed" not in err
    assert server.hits == 4  # /v1/models and one probe per flavour: no load was sent


async def test_a_server_that_ignores_stream_true_is_said_before_the_load(hostile) -> None:
    server: HostileServer = await hostile()
    server.mode, server.params = "json", {"n": 16}
    code, out, err = await specload(server.url, "-c", "1", "-n", "2", "--max-tokens", "16", "--prompt", "hello",
                                    "--json", "--no-health", "--metrics-url", "off")
    assert code == 0, err
    note = f"{server.url}/v1/chat/completions answers in one JSON body though asked to stream"
    assert err.count(note) == 1, err
    assert err.count("in one piece") == 0  # said once, by the probe, not again at the first answer
    assert err.index(note) < err.index("specload: target ")  # before the load
    level = orjson.loads(out)["levels"][0]
    assert level["ok"] == 2 and level["tpot_ms_p50"] is None


async def test_a_server_that_gzips_though_asked_not_to_is_read(hostile) -> None:
    # before: 48 of 48 requests were malformed ("stream ended without [DONE]") against such a server
    server: HostileServer = await hostile()
    server.mode, server.params = "gzip_always", {"n": 5}
    code, out, err = await specload(server.url, "-c", "2", "-n", "6", "--max-tokens", "5", "--json", "--no-health",
                                    "--metrics-url", "off")
    assert code == 0, err
    level = orjson.loads(out)["levels"][0]
    assert level["ok"] == 6 and level["output_tokens"] == 30, level
    assert all(h["Accept-Encoding"] == "identity" for h in server.seen_headers)  # probe and load alike
