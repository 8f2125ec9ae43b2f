"""Finding out what a server speaks before the load starts: its model and its API flavour.

``--model`` defaults to the first model of ``/v1/models``; ``--api auto`` sends one tiny streamed
request per flavour (chat, then completions, then SGLang ``/generate``) and keeps the first that
answers 2xx. Probe requests are not part of the run's statistics, but the server counts them, so
each one is reported (``sent``) and the session records them as a ``probe`` event. An unreachable server is a ``TargetError``
with a one-line reason, raised before any load is sent.
"""

from __future__ import annotations

from urllib.parse import urlparse

import aiohttp
import orjson

from specload.config import RequestConfig
from specload.engine.api import CHAT, COMPLETIONS, GENERATE, PATHS, build_body
from specload.neterrors import connect_reason, speaks_tls


class TargetError(Exception):
    """The target cannot be used; the message is one line for the user."""


_PROBE_REQUEST = RequestConfig(max_tokens=1)  # the tiny request that finds the API


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
) -> tuple[str, str | None]:
    """Return (flavour, model); each probe request sent is appended to ``sent`` (path, answer)."""
    sent = [] if sent is None else sent
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    hdrs = dict(headers or {})
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(force_close=True)) as s:
        found_model = model
        models_ok = False
        try:
            async with s.get(base_url + "/v1/models", headers=hdrs) as r:
                if r.status == 200:
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
        tried = []
        for flavour in order:
            body = build_body(flavour, "Hello", _PROBE_REQUEST, found_model)
            try:
                async with s.post(base_url + PATHS[flavour], data=orjson.dumps(body),
                                  headers={**hdrs, "Content-Type": "application/json"}) as r:
                    await r.read()
                    sent.append({"path": PATHS[flavour], "status": r.status})
                    if r.status in (401, 403):
                        raise TargetError(f"{base_url} refused the request: HTTP {r.status} (check the API key)")
                    # 404/405/501: not this flavour. Any other answer (even 400 or 500) means the
                    # endpoint exists; the load will show what it does with real requests.
                    if r.status not in (404, 405, 501):
                        return flavour, found_model
                    tried.append(f"{PATHS[flavour]} HTTP {r.status}")
            except (aiohttp.ClientError, TimeoutError) as e:
                sent.append({"path": PATHS[flavour], "error": _reason(e)})
                tried.append(f"{PATHS[flavour]} {_reason(e)}")
        raise TargetError(f"{base_url} speaks none of chat, completions, /generate ({'; '.join(tried)})")
