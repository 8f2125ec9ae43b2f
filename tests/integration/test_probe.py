"""``--api auto`` and the default model: what the server speaks, found by asking it."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from specload.engine.probe import TargetError, discover
from specload.record.reader import read_record
from specload.session import Session
from tests.conftest import make_config


async def test_auto_picks_chat_and_the_first_model(sim) -> None:
    server = await sim(ttft_ms=1, itl_ms=1, model_name="my-model")
    assert await discover(server.url) == ("chat", "my-model")


async def _serve(routes: dict) -> tuple[web.AppRunner, str]:
    app = web.Application()
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_auto_falls_back_to_sglang_generate() -> None:
    async def generate(request: web.Request) -> web.Response:
        return web.Response(text='data: {"text":"x","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\n',
                            content_type="text/event-stream")

    runner, url = await _serve({("POST", "/generate"): generate})
    try:
        sent: list[dict] = []
        assert await discover(url, sent=sent) == ("generate", None)
        assert sent == [{"path": "/generate", "status": 200}]  # no /v1/models: /generate first
    finally:
        await runner.cleanup()


async def test_auth_failure_is_a_one_line_target_error() -> None:
    async def denied(request: web.Request) -> web.Response:
        return web.json_response({"error": "no"}, status=401)

    runner, url = await _serve({("GET", "/v1/models"): denied})
    try:
        with pytest.raises(TargetError, match="HTTP 401"):
            await discover(url)
    finally:
        await runner.cleanup()


async def test_every_probe_request_is_reported() -> None:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def completions(request: web.Request) -> web.Response:
        return web.Response(text="data: [DONE]\n\n", content_type="text/event-stream")

    runner, url = await _serve({("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions})
    try:
        sent: list[dict] = []
        assert await discover(url, sent=sent) == ("completions", "m")
        assert sent == [{"path": "/v1/chat/completions", "status": 404}, {"path": "/v1/completions", "status": 200}]
        sent.clear()
        assert await discover(url, api="completions", sent=sent) == ("completions", "m")
        assert sent == []  # a given flavour is not probed
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("api", "probes"), [("auto", [{"path": "/v1/chat/completions", "status": 200}]),
                                             ("chat", None)])
async def test_the_record_says_which_probe_requests_the_server_saw(sim, tmp_path, api, probes) -> None:
    server = await sim(ttft_ms=1, itl_ms=1)
    rec = tmp_path / "run.jsonl"
    cfg = make_config(server.url, api=api, concurrency=(2,), requests_per_level=4, drain=True, max_duration_s=30,
                      max_tokens=5, ignore_eos=True, metrics_url="off", path=str(rec))
    result = await asyncio.wait_for(Session(cfg).run(), 30)
    assert result.reason == "completed"
    data = read_record(str(rec))
    assert [e["value"]["requests"] for e in data.events if e["kind"] == "probe"] == ([probes] if probes else [])
    assert len(data.requests) == 4  # the probes are not among the run's requests
