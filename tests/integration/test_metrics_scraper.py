"""MetricsScraper and probe_metrics against an aiohttp server on 127.0.0.1 port 0: failures noticed
once, deltas kept across them, a closed port only noticed. (The exposition texts' parsing: the unit
tier's test_metrics_parse.py.)"""

from __future__ import annotations

import asyncio

from aiohttp import web

from specload.watch.metrics import MetricsScraper, probe_metrics
from tests.unit.test_metrics_parse import LLAMA_1, V1, S, vllm_text
from tests.waiting import until


class StepClock:
    """Each reading is one second after the previous one: exact Δt per scrape, no sleeping."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        self.ns += S
        return self.ns

    def wall_time(self) -> float:
        return self.ns / S


async def serve(responses: list[web.Response]) -> tuple[web.AppRunner, str]:
    """/metrics answers with each response in turn, then repeats the last one."""
    calls = {"n": 0}

    async def metrics(request: web.Request) -> web.Response:
        i = min(calls["n"], len(responses) - 1)
        calls["n"] += 1
        r = responses[i]
        return web.Response(body=r.body, status=r.status, content_type=r.content_type)

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>hi</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/html", html)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def prom(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/plain")


async def test_scraper_survives_errors_and_keeps_deltas() -> None:
    v3 = vllm_text(
        gen=(2600, 4400), prompt=(700, 700), drafts=(200, 200), draft_tokens=(1000, 1000), accepted=(600, 600)
    )
    runner, base = await serve(
        [prom(V1), web.Response(status=500, text="boom"), web.Response(text="<html>x</html>"), prom(v3)]
    )
    samples: list = []
    notices: list[str] = []
    scraper = MetricsScraper(
        f"{base}/metrics",
        interval=0.01,
        clock=StepClock(),
        on_sample=samples.append,
        on_notice=notices.append,
    )
    task = asyncio.create_task(scraper.run())
    try:
        await until(lambda: len(samples) >= 2)
    finally:
        await scraper.stop()
        await asyncio.wait_for(task, 5.0)
        await runner.cleanup()
    # one notice when it started failing (not one per failed scrape), one when it recovered
    assert notices == ["/metrics unavailable (HTTP 500); still trying", "/metrics answering again"]
    assert scraper.failures == 2
    first, second = samples[:2]
    assert (first.t_ns, second.t_ns) == (1 * S, 4 * S)  # clock read once per answer, failures included
    assert second.gen_tok_s == 4000 / 3  # 4000 tokens over the 3 s between the good scrapes
    assert second.accept_rate == 600 / 1000 and second.accept_len == 1 + 600 / 200


async def test_scraper_on_a_closed_port_only_notices() -> None:
    runner, base = await serve([prom(V1)])
    await runner.cleanup()  # the port is closed now
    notices: list[str] = []
    scraper = MetricsScraper(f"{base}/metrics", interval=0.01, on_notice=notices.append)
    task = asyncio.create_task(scraper.run())
    try:
        await until(lambda: scraper.failures >= 3)
    finally:
        await scraper.stop()
        await asyncio.wait_for(task, 5.0)
    assert notices == ["/metrics unavailable (connection refused); still trying"]
    assert scraper.last_sample is None


async def test_probe_metrics() -> None:
    runner, base = await serve([prom(LLAMA_1)])
    try:
        assert await probe_metrics(f"{base}/metrics") is True
        assert await probe_metrics(f"{base}/html") is False
        assert await probe_metrics(f"{base}/missing") is False
    finally:
        await runner.cleanup()
    assert await probe_metrics(f"{base}/metrics", timeout=1.0) is False  # closed port
