"""``--api auto`` and the default model: what the server speaks, found by asking it."""

from __future__ import annotations

import pytest
from aiohttp import web

from specload.engine.probe import TargetError, discover


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
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


async def test_auto_falls_back_to_sglang_generate() -> None:
    async def generate(request: web.Request) -> web.Response:
        return web.Response(text='data: {"text":"x","meta_info":{"completion_tokens":1}}\n\ndata: [DONE]\n\n',
                            content_type="text/event-stream")

    runner, url = await _serve({("POST", "/generate"): generate})
    try:
        assert await discover(url) == ("generate", None)
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
