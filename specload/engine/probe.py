"""Finding out what a server speaks before the load starts: its model and its API flavour; for a
server specload launched, also that a real request is answered (``wait_answered``) and what the
server says about itself (``server_info``).

``--model`` defaults to the first model of ``/v1/models``; ``--api auto`` sends one tiny streamed
request per flavour (chat, then completions, then SGLang ``/generate``) and keeps the first that
answers 2xx with an event stream, or with one JSON body (a server that ignores ``"stream": true``:
said at once, in ``notes``). A 2xx web page or other non-API answer is not that flavour, and a
redirect is followed by no request specload sends (the API key would go with it to where it
points): either is a one-line ``TargetError`` when nothing else answers, raised before any load, as
an unreachable server is. Probe requests are not part of the run's statistics, but the server counts
them, so each one is reported (``sent``) and the session records them as a ``probe`` event.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlparse

import aiohttp
import orjson

from specload.config import RequestConfig
from specload.engine.api import CHAT, COMPLETIONS, GENERATE, PATHS, build_body
from specload.neterrors import connect_reason, speaks_tls


class TargetError(Exception):
    """The target cannot be used; the message is one line for the user."""


_PROBE_REQUEST = RequestConfig(max_tokens=1)  # the tiny request that finds the API
# no compression asked for (aiohttp's default "gzip, deflate" invites it; a body compressed anyway is
# still decoded); the streaming client sends the same
IDENTITY = {"Accept-Encoding": "identity"}
_SNIFF_BYTES = 4096  # the start of a probe's answer, enough to tell a stream, JSON and a web page


def _redirect(url: str, r: aiohttp.ClientResponse) -> TargetError:
    where = r.headers.get("Location", "(no Location)")[:200]
    return TargetError(f"{url} redirects (HTTP {r.status}) to {where}: specload follows no redirect (the API "
                       "key would go there too); give it the final URL")


def _answer_kind(r: aiohttp.ClientResponse, head: bytes) -> str:
    """What a 2xx answer to a streamed request is: "stream", "json", or why it is neither."""
    ctype = r.headers.get("Content-Type", "")
    start = head.lstrip()[:16].lower()
    if "event-stream" in ctype or start.startswith((b"data:", b"event:", b":")):
        return "stream"
    if "html" in ctype or start.startswith(b"<"):
        return f"HTTP {r.status} {ctype.split(';')[0] or 'text/html'}: a web page, not an inference API"
    if "json" in ctype or start.startswith(b"{"):
        return "json"
    return f"HTTP {r.status} {ctype.split(';')[0] or 'without a Content-Type'}: neither an event stream nor JSON"


def _reason(e: BaseException) -> str:
    if isinstance(e, aiohttp.ClientConnectorError | TimeoutError):
        return connect_reason(e)
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:200]


async def _tls_on_plain_http(base_url: str) -> str | None:
    """A message when an ``http://`` URL names a port where the server speaks TLS."""
    u = urlparse(base_url)
    if u.scheme != "http" or not u.hostname:
        return None
    if await speaks_tls(u.hostname, u.port or 80):
        return (f"{base_url} answers with TLS, not plain HTTP: use "
                f"https://{u.netloc}{u.path}")
    return None


def model_ids(body: bytes) -> list[str]:
    """The model names of a ``/v1/models`` answer; anything of another shape (``{"data": null}``,
    ``{"data": 5}``, not JSON) has none, and the load is sent without a model name."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [m["id"][:200] for m in entries if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]


async def discover(
    base_url: str,
    *,
    api: str = "auto",
    model: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 15.0,
    sent: list[dict] | None = None,
    notes: list[str] | None = None,
) -> tuple[str, str | None]:
    """Return (flavour, model); each probe request sent is appended to ``sent`` (path, answer), and
    what the user must know before the load (one line each) to ``notes``."""
    sent = [] if sent is None else sent
    notes = [] if notes is None else notes
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    hdrs = {**IDENTITY, **(headers or {})}
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(force_close=True)) as s:
        found_model = model
        models_ok = False
        try:
            async with s.get(base_url + "/v1/models", headers=hdrs, allow_redirects=False) as r:
                if 300 <= r.status < 400:
                    raise _redirect(base_url + "/v1/models", r)
                if r.status == 200 and "html" not in r.headers.get("Content-Type", ""):
                    models_ok = True
                    ids = model_ids(await r.read())
                    if found_model is None and ids:
                        found_model = ids[0]
                elif r.status in (401, 403):
                    raise TargetError(f"{base_url} refused the request: HTTP {r.status} (check the API key)")
        except aiohttp.ClientError as e:
            if isinstance(e, aiohttp.ClientConnectorError):
                raise TargetError(f"cannot connect to {base_url}: {_reason(e)}") from None
            # an answer that is not HTTP at all: an https:// server addressed with http://?
            if (tls := await _tls_on_plain_http(base_url)) is not None:
                raise TargetError(tls) from None
        except TimeoutError:
            raise TargetError(f"cannot connect to {base_url}: no answer within {timeout_s:g} s") from None
        if api != "auto":
            return api, found_model
        order = (CHAT, COMPLETIONS, GENERATE) if models_ok else (GENERATE, CHAT, COMPLETIONS)
        tried: list[tuple[str, str]] = []
        for flavour in order:
            body = build_body(flavour, "Hello", _PROBE_REQUEST, found_model)
            url = base_url + PATHS[flavour]
            try:
                async with s.post(url, data=orjson.dumps(body), headers={**hdrs, "Content-Type": "application/json"},
                                  allow_redirects=False) as r:
                    head = await r.content.read(_SNIFF_BYTES)
                    sent.append({"path": PATHS[flavour], "status": r.status})
                    if r.status in (401, 403):
                        raise TargetError(f"{base_url} refused the request: HTTP {r.status} (check the API key)")
                    if 300 <= r.status < 400:
                        raise _redirect(url, r)
                    # 404/405/501: not this flavour. Any other error (even 400 or 500) means the
                    # endpoint exists; the load will show what it does with real requests.
                    kind = _answer_kind(r, head) if r.status < 300 else f"HTTP {r.status}"
                    if kind == "json":
                        notes.append(f"{url} answers in one JSON body though asked to stream (\"stream\": true): "
                                     "TTFT will be the whole answer's time, TPOT and ITL cannot be measured")
                    if kind in ("stream", "json") or r.status >= 400 and r.status not in (404, 405, 501):
                        return flavour, found_model
                    tried.append((PATHS[flavour], kind))
            except (aiohttp.ClientError, TimeoutError) as e:
                sent.append({"path": PATHS[flavour], "error": _reason(e)})
                tried.append((PATHS[flavour], _reason(e)))
        why = {kind for _, kind in tried}
        raise TargetError(f"{base_url} speaks none of chat, completions, /generate: " + (
            f"each answers {why.pop()}" if len(why) == 1 else "; ".join(f"{path} {kind}" for path, kind in tried)))


# A launched server is ready when a real request is answered, not at its first health 200: a router in
# front of an engine still loading, or a server whose /health is up before its scheduler, answers the
# models endpoint and generation with 503 (llama-server: "Loading model"), 502 or 504 meanwhile, and a
# discovery run then would take a 503 from /generate for an API that exists.
NOT_READY_STATUSES = frozenset({502, 503, 504})
READY_POLL_S = 0.5


async def wait_answered(base_url: str, *, timeout_s: float, api: str | None = None, model: str | None = None,
                        headers: dict[str, str] | None = None, sent: list[dict] | None = None,
                        alive: Callable[[], bool] = lambda: True) -> float:
    """Until the server answers: ``/v1/models`` (``api`` None), or a one-token request of that API (read
    to its end). Refused connections and 502/503/504 mean "not yet"; any other answer is an answer (the
    load shows what the server does with real requests). The seconds it took; TargetError after
    ``timeout_s``, or as soon as ``alive()`` says the server's process is gone."""
    import asyncio

    sent = [] if sent is None else sent
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    path = "/v1/models" if api is None else PATHS[api]
    body = None if api is None else orjson.dumps(build_body(api, "Hello", _PROBE_REQUEST, model))
    hdrs = {**IDENTITY, **(headers or {}), **({"Content-Type": "application/json"} if body else {})}
    last = "no answer"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        while True:
            timeout = aiohttp.ClientTimeout(total=max(1.0, min(30.0, timeout_s - (loop.time() - t0))))
            try:
                async with s.request("GET" if body is None else "POST", base_url + path, data=body, headers=hdrs,
                                     allow_redirects=False, timeout=timeout) as r:
                    await r.read()
                    if body is not None:
                        sent.append({"path": path, "status": r.status, "ready_check": True})
                    if r.status not in NOT_READY_STATUSES:
                        return loop.time() - t0
                    last = f"HTTP {r.status}"
            except (aiohttp.ClientError, TimeoutError) as e:
                last = _reason(e)
                if body is not None:
                    sent.append({"path": path, "error": last, "ready_check": True})
            if not alive():
                raise TargetError(f"the server exited before it answered {path} (last: {last})")
            if loop.time() - t0 + READY_POLL_S > timeout_s:
                raise TargetError(f"{base_url} answers its health check but not {path} within {timeout_s:.0f} s "
                                  f"(last: {last})")
            await asyncio.sleep(READY_POLL_S)


# What a server says about itself: SGLang's server args, vLLM's version, llama.cpp's properties.
INFO_PATHS = ("/get_server_info", "/version", "/props")
INFO_MAX_BYTES = 256 * 1024


async def server_info(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> dict[str, dict]:
    """Path -> the JSON object it answered (2xx, at most 256 kB); paths that answer otherwise are left out."""
    import asyncio

    hdrs = {**IDENTITY, **(headers or {})}

    async def one(s: aiohttp.ClientSession, path: str) -> dict | None:
        try:
            async with s.get(base_url + path, headers=hdrs, allow_redirects=False) as r:
                data = await r.content.read(INFO_MAX_BYTES + 1)
                if r.status >= 300 or len(data) > INFO_MAX_BYTES:
                    return None
            obj = orjson.loads(data)
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, ValueError):
            return None
        return obj if isinstance(obj, dict) else None

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(force_close=True)) as s:
        answers = await asyncio.gather(*(one(s, p) for p in INFO_PATHS))
    return {p: a for p, a in zip(INFO_PATHS, answers, strict=True) if a is not None}
