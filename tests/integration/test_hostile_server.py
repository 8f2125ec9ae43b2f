"""Hostile servers (``tests/hostile.py``) against the real client and runner over real HTTP.

The rule under test: whatever a server sends and whatever a request body holds, each request sent
ends as exactly one record (malformed, with the reason), and a failure inside a request task is
never lost: the runner accounts for every task it started, so no drain waits forever for a slot
that was never released and no summary says "all ok" for requests that vanished.
"""

from __future__ import annotations

import asyncio
import sys

import orjson
import pytest

from specload.config import RequestConfig
from specload.datatypes import ErrorKind, RequestRecord
from specload.engine.level_end import Level
from specload.engine.probe import discover
from specload.engine.prompts import PromptSource
from specload.engine.runner import Runner
from specload.plan import build_plan
from tests import processes
from tests.conftest import make_client, unchecked
from tests.hostile import chunk, usage

WRONG = [
    (b'{"choices":"abc"}', "choices is not a list"),
    (b'{"choices":[5]}', "choices[0] is not an object"),
    (b'{"choices":{"a":1}}', "choices is not a list"),
    (b'{"choices":[{"delta":"text"}]}', "delta is not an object"),
    (b'{"choices":[],"usage":5}', "usage is not an object"),
    (usage('"7"'), "completion_tokens is not a token count"),
    (b"[1,2]", "not a JSON object"),
    (usage("1e308"), "not a token count"),
    (usage(str(2**64 + 5)), "not a token count"),
    (usage("-4"), "not a token count"),
]


async def _run(url: str, *, opts: RequestConfig | None = None, levels=(4,), n: int = 8, drain: bool = True,
               duration: float | None = None) -> tuple[Runner, list[RequestRecord], str]:
    records: list[RequestRecord] = []
    opts = opts or RequestConfig(max_tokens=8)
    async with make_client(url, stall_timeout_s=5, request=opts) as client:
        plan = build_plan(levels, requests_per_level=None if duration else n, duration_per_level=duration,
                          drain=drain)
        runner = Runner(client, PromptSource.from_options(prompt="x"), plan, on_record=records.append)
        reason = await asyncio.wait_for(runner.run(), 30)
    return runner, records, reason


@pytest.mark.parametrize(("raw", "reason"), WRONG, ids=[r for _, r in WRONG])
async def test_wrong_shaped_chunks_end_as_one_malformed_record_each(hostile, raw: bytes, reason: str) -> None:
    server = await hostile()
    server.mode, server.params = "events", {"events": [chunk("a"), raw]}
    runner, records, end = await _run(server.url)
    assert end == "completed"
    assert len(records) == server.requests == 8
    assert len({r.request_id for r in records}) == 8
    for r in records:
        assert r.error_kind is ErrorKind.MALFORMED, (r.error_kind, r.error_detail)
        assert reason in r.error_detail
    assert runner.in_flight == 0


async def test_no_drain_run_counts_every_request_the_server_got(hostile) -> None:
    # before: the tasks died silently, the run said "48/48 ok" while the server got 64 requests
    server = await hostile()
    server.mode, server.params = "events", {"events": [chunk("a"), b'{"choices":[5]}']}
    runner, records, _ = await _run(server.url, levels=(4, 4), drain=False, duration=0.3)
    assert len(records) == server.requests > 0
    assert not any(r.ok for r in records)


async def test_a_request_body_that_cannot_be_serialised_is_recorded_not_lost(hostile) -> None:
    server = await hostile()
    # past orjson's 64-bit integers: a value RequestConfig refuses, as if it had got past the checks
    opts = unchecked(RequestConfig, max_tokens=10**23)
    runner, records, _ = await _run(server.url, opts=opts, n=3, levels=(2,))
    assert len(records) == 3 and server.requests == 0
    assert all(r.error_kind is ErrorKind.CLIENT and "specload" in r.error_detail for r in records)
    assert runner.lost == 3 and runner.in_flight == 0


async def test_a_request_cancelled_before_it_started_is_recorded_as_cancelled(hostile) -> None:
    server = await hostile()
    server.mode, server.params = "stall", {"max_s": 20.0}
    records: list[RequestRecord] = []
    async with make_client(server.url, max_tokens=8) as client:
        plan = build_plan((3,), requests_per_level=3, duration_per_level=None)
        runner = Runner(client, PromptSource.from_options(prompt="x"), plan, on_record=records.append)
        run = asyncio.ensure_future(runner.run())
        while server.requests < 3:
            await asyncio.sleep(0.005)
        runner.stop("interrupted")
        runner.cancel_in_flight()
        await asyncio.wait_for(run, 10)
        # and tasks cancelled in the very turn they were started, before their coroutine ran (the
        # runner's private start of one request: nothing public starts one without a turn between)
        level = Level(plan.levels[0], 0, runner.clock)
        runner._launch(level)
        runner._launch(level)
        runner.cancel_in_flight()
        await asyncio.wait_for(runner.cancel_and_wait(), 10)
    assert sorted(r.request_id for r in records) == [0, 1, 2, 3, 4]
    assert all(r.error_kind is ErrorKind.CANCELLED for r in records)
    assert runner.in_flight == 0


@pytest.mark.parametrize("body", [b'{"data": null}', b'{"data": 5}', b'{"data": [5, {"id": 7}]}', b"[]", b"{"])
async def test_a_models_list_of_the_wrong_shape_means_no_model_name(hostile, body: bytes) -> None:
    server = await hostile()
    server.models_body = body
    assert await asyncio.wait_for(discover(server.url), 10) == ("chat", None)
    server.models_body = b'{"data": [{"id": "m1"}, {"id": "m2"}]}'
    assert await asyncio.wait_for(discover(server.url), 10) == ("chat", "m1")


async def test_an_answer_not_streamed_has_no_tpot_and_says_why(hostile) -> None:
    # before: --extra-body '{"stream": false}' gave TPOT 0.0 ms without a word
    server = await hostile()
    server.mode, server.params = "json", {"n": 16}
    proc = await processes.exec_async(
        sys.executable, "-m", "specload.cli", "run", server.url, "--api", "chat", "-c", "1", "-n", "2",
        "--max-tokens", "16", "--extra-body", '{"stream": false}', "--json", "--no-health", "--metrics-url", "off",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    level = orjson.loads(out)["levels"][0]
    assert level["ok"] == 2 and level["tpot_ms_p50"] is None and level["ttft_ms_p50"] is not None
    assert err.decode().count("in one piece (not streamed") == 1


async def test_a_path_left_out_of_the_url_is_said(hostile) -> None:
    # before: http://host/v1 lost its /v1 without a word (a proxy path or an API version query too)
    server = await hostile()
    proc = await processes.exec_async(
        sys.executable, "-m", "specload.cli", "run", server.url + "/v1?api-version=2", "--api", "chat", "-c", "1",
        "-n", "1", "--max-tokens", "4", "--no-health", "--metrics-url", "off",
        "--prompt", "hello",  # a fixed prompt: no prompt-length calibration request besides the one counted
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert f"the URL's '/v1?api-version=2' is not used: specload sends to {server.url} +" in err.decode()
    assert server.requests == 1
