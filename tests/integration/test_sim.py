"""The simulated server over real HTTP on 127.0.0.1: formats, exact counts, pinned timing, faults, CLI.

Every wait is bounded (``asyncio.wait_for`` or a polling deadline); nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specload.sim.model import estimate_chat_tokens, estimate_text_tokens
from specload.sim.serverlog import CRASH_EXCEPTION_LINE, SIGQUIT_MESSAGE
from tests import processes
from tests.integration.conftest import read_sse
from tests.waiting import until

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


async def stream(session: aiohttp.ClientSession, url: str, body: dict) -> list[tuple[float, Any]]:
    t0 = time.perf_counter()
    async with session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        return await asyncio.wait_for(read_sse(resp, t0), 10)


def n_words(text: str) -> int:
    # every simulated token is one vocabulary word with a leading space
    return len(text.split())


async def metrics(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    async with session.get(base + "/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "position" in s.labels or "finished_reason" in s.labels:
                continue
            out[s.name] = s.value
    return out


@pytest.fixture
async def session():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as s:
        yield s


# --- simple endpoints ---------------------------------------------------------------------------


async def test_health_and_models(sim, session):
    server = await sim(model_name="my-model")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.url) and server.port > 0
    async with session.get(server.url + "/health") as r:
        assert r.status == 200 and await r.json() == {"status": "ok"}
    async with session.get(server.url + "/v1/models") as r:
        data = await r.json()
    assert [m["id"] for m in data["data"]] == ["my-model"]


# --- OpenAI chat / completions ------------------------------------------------------------------


async def test_chat_stream_vllm_shape_with_continuous_usage_and_multi_token_chunks(sim, session):
    server = await sim(ttft_ms=5, itl_ms=2, spec_tokens=4, accept_rate=0.8)
    messages = [{"role": "user", "content": "Tell me a story about a fox."}]
    body = {
        "messages": messages,
        "max_tokens": 80,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = await stream(session, server.url + CHAT, body)
    objs = [e for _, e in events]
    assert objs[-1] == "[DONE]"
    role, *content, finish, usage_chunk, _ = objs
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"] == {}
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    prompt = estimate_chat_tokens(messages)
    assert usage == {"prompt_tokens": prompt, "completion_tokens": 80, "total_tokens": prompt + 80}
    # continuous usage: every chunk carries the running total; its increments are the chunk's tokens
    prev = 0
    per_chunk = []
    for c in content:
        text = c["choices"][0]["delta"]["content"]
        k = c["usage"]["completion_tokens"] - prev
        prev = c["usage"]["completion_tokens"]
        assert k == n_words(text) >= 1
        per_chunk.append(k)
    assert sum(per_chunk) == 80 == server.stats.completion_tokens_sent
    assert per_chunk[0] == 1  # the prefill token
    assert max(per_chunk) > 1  # speculation: several tokens in one chunk
    assert max(per_chunk) <= 5  # at most K + 1
    assert len({c["id"] for c in objs[:-1]}) == 1


async def test_completions_stream_and_non_stream(sim, session):
    server = await sim(ttft_ms=2, itl_ms=1)
    prompt = "The quick brown fox jumps over the lazy dog"
    body = {"prompt": prompt, "max_tokens": 30, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    objs = [e for _, e in await stream(session, server.url + COMPLETIONS, body)]
    assert objs[-1] == "[DONE]" and objs[-2]["choices"] == []
    assert objs[-2]["usage"]["completion_tokens"] == 30
    assert objs[-2]["usage"]["prompt_tokens"] == estimate_text_tokens(prompt)
    text = "".join(o["choices"][0]["text"] for o in objs[:-2])
    assert n_words(text) == 30
    assert objs[-3]["choices"][0]["finish_reason"] == "length" and objs[-3]["choices"][0]["text"] == ""
    assert all(o["object"] == "text_completion" for o in objs[:-1])

    async with session.post(server.url + COMPLETIONS, json={"prompt": prompt, "max_tokens": 7}) as r:
        whole = await r.json()
    assert whole["usage"]["completion_tokens"] == n_words(whole["choices"][0]["text"]) <= 7
    async with session.post(server.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 5, "ignore_eos": True}) as r:
        chat = await r.json()
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 5
    assert n_words(chat["choices"][0]["message"]["content"]) == 5


async def test_no_usage_chunk_unless_asked(sim, session):
    server = await sim(ttft_ms=1, itl_ms=1)
    objs = [e for _, e in await stream(session, server.url + CHAT, {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "stream": True, "ignore_eos": True})]
    assert objs[-1] == "[DONE]"
    assert all("usage" not in o for o in objs[:-1])


async def test_max_tokens_and_eos(sim, session):
    server = await sim(ttft_ms=1, itl_ms=1, eos_prob=1.0, spec_tokens=0)
    base = {"prompt": "x", "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}}
    objs = [e for _, e in await stream(session, server.url + COMPLETIONS, base)]
    assert objs[-2]["usage"]["completion_tokens"] == 1 and objs[-3]["choices"][0]["finish_reason"] == "stop"
    objs = [e for _, e in await stream(session, server.url + COMPLETIONS, {**base, "ignore_eos": True})]
    assert objs[-2]["usage"]["completion_tokens"] == 12 and objs[-3]["choices"][0]["finish_reason"] == "length"


async def test_seed_makes_output_reproducible(sim, session):
    a = await sim(ttft_ms=1, itl_ms=1, seed=42)
    b = await sim(ttft_ms=1, itl_ms=1, seed=42)
    body = {"prompt": "p", "max_tokens": 40, "ignore_eos": True}
    texts = []
    for s in (a, b):
        async with session.post(s.url + COMPLETIONS, json=body) as r:
            texts.append((await r.json())["choices"][0]["text"])
    assert texts[0] == texts[1]


# --- SGLang /generate ---------------------------------------------------------------------------


async def test_generate_stream_sglang_shape(sim, session):
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=3, accept_rate=0.9)
    body = {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 25, "ignore_eos": True},
            "stream": True}
    objs = [e for _, e in await stream(session, server.url + "/generate", body)]
    assert objs[-1] == "[DONE]"
    chunks = objs[:-1]
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b["text"].startswith(a["text"])  # cumulative text
        assert b["meta_info"]["completion_tokens"] > a["meta_info"]["completion_tokens"]
    last = chunks[-1]
    meta = last["meta_info"]
    assert meta["completion_tokens"] == 25 == n_words(last["text"])
    assert meta["prompt_tokens"] == estimate_text_tokens("Once upon a time")
    assert meta["finish_reason"] == {"type": "length", "length": 25}
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    # every decode step is one verify step; the prefill token is not
    assert meta["spec_verify_ct"] == len(chunks) - 1 < 24


# --- timing -------------------------------------------------------------------------------------


async def test_pinned_ttft_and_itl(sim, session):
    server = await sim(ttft_ms=80, itl_ms=20, spec_tokens=0)
    events = await stream(session, server.url + CHAT, {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "ignore_eos": True, "stream": True})
    text_times = [t for t, e in events if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content")]
    assert len(text_times) == 10
    ttft = text_times[0]
    # never early: each token at its deadline or later (a client read late on a busy machine, by any
    # amount, with this loop that also runs the server); the deadlines are absolute, so lateness does
    # not add up. How close to its deadline a token comes is benchmarks/timing_truth.py's to measure
    assert 0.080 - 0.002 <= ttft <= 0.080 + 1.0, ttft
    for i, t in enumerate(text_times):
        assert t >= 0.080 + i * 0.020 - 0.002, (i, text_times)
    assert text_times[-1] <= 0.080 + 9 * 0.020 + 1.0, text_times


async def test_batching_queue_beyond_max_batch(sim, session):
    server = await sim(max_batch=3, step_ms=5, spec_tokens=0, eos_prob=0.0)
    body = {"prompt": "x", "max_tokens": 60, "stream": True}
    tasks = [asyncio.ensure_future(stream(session, server.url + COMPLETIONS, body)) for _ in range(5)]

    async def saturated() -> bool:
        m = await metrics(session, server.url)
        return m["vllm:num_requests_running"] == 3 and m["vllm:num_requests_waiting"] == 2

    try:
        await until(saturated, what="3 running and 2 waiting")
    finally:
        await asyncio.wait_for(asyncio.gather(*tasks), 15)
    m = await metrics(session, server.url)
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert m["vllm:generation_tokens_total"] == 5 * 60


async def test_server_log_lines(sim, session, tmp_path: Path):
    log = tmp_path / "sim.log"
    server = await sim(ttft_ms=30, itl_ms=10, spec_tokens=2, log_file=str(log), log_interval=0.05)
    await stream(session, server.url + CHAT, {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 30, "ignore_eos": True, "stream": True})
    text = log.read_text()
    m = re.search(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] Finish request: id=chatcmpl-sim-\d+ status=200 outcome=length "
        r"prompt_tokens=\d+ completion_tokens=30 ttft_ms=(\d+\.\d{3}) tpot_ms=(\d+\.\d{3}) "
        r"e2e_ms=\d+\.\d{3} spec_verify_ct=\d+$",
        text,
        re.M,
    )
    assert m, text
    assert 29.0 <= float(m.group(1)) <= 90.0
    decode = re.findall(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch\. #running-req: (\d+), #token: \d+, "
        r"token usage: \d\.\d\d, accept len: \d+\.\d\d, gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0$",
        text,
        re.M,
    )
    assert decode and "1" in decode, text


# --- metrics ------------------------------------------------------------------------------------


async def test_metrics_spec_counters_match_tokens(sim, session):
    server = await sim(ttft_ms=1, itl_ms=1, spec_tokens=3, accept_rate=0.6)
    total = 0
    for n in (17, 33, 50):
        objs = [e for _, e in await stream(session, server.url + CHAT, {
            "messages": [{"role": "user", "content": "x"}], "max_tokens": n, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}})]
        total += objs[-2]["usage"]["completion_tokens"]
    assert total == 100
    m = await metrics(session, server.url)
    st = server.stats
    assert m["vllm:generation_tokens_total"] == total == st.completion_tokens_sent
    assert m["vllm:spec_decode_num_accepted_tokens_total"] == st.accepted_tokens
    assert m["vllm:spec_decode_num_drafts_total"] == st.drafts
    assert m["vllm:spec_decode_num_draft_tokens_total"] == 3 * st.drafts
    # each request: 1 prefill token + one token per verify step + the accepted drafts
    assert total == 3 + st.drafts + st.accepted_tokens
    assert 0 < st.accepted_tokens < st.draft_tokens
    assert m["vllm:prompt_tokens_total"] == st.prompt_tokens > 0
    assert m["vllm:kv_cache_usage_perc"] == 0.0


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"prompt": "x", "max_tokens": -5}, "max_tokens must be at least 1"),
        ({"prompt": "x", "max_tokens": "ten"}, "max_tokens must be an integer"),
        ({"prompt": "x", "max_tokens": 2.5}, "max_tokens must be an integer"),
        ({"prompt": "word " * 200, "max_tokens": 5},
         "request (400 tokens) exceeds the available context size (100 tokens)"),  # " word" is 2 tokens
    ],
)
async def test_bad_requests_get_400_json(sim, session, body, fragment):
    server = await sim(context_size=100)
    async with session.post(server.url + COMPLETIONS, json=body) as r:
        assert r.status == 400
        err = (await r.json())["error"]
    assert fragment in err["message"] and err["code"] == 400


async def test_malformed_json_gets_400(sim, session):
    server = await sim()
    async with session.post(server.url + CHAT, data=b'{"messages": [', headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == 400


# --- faults -------------------------------------------------------------------------------------


async def test_fail_rate_gives_500_json(sim, session):
    server = await sim(fail_rate=1.0)
    async with session.post(server.url + CHAT, json={"messages": [{"role": "user", "content": "x"}],
                                                      "stream": True}) as r:
        assert r.status == 500
        err = await r.json()
    assert err["error"]["type"] == "server_error" and err["error"]["code"] == 500 and err["error"]["message"]


async def test_disconnect_mid_stream(sim, session):
    server = await sim(ttft_ms=1, itl_ms=1, disconnect_rate=1.0, spec_tokens=0)
    got: list[bytes] = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.post(server.url + COMPLETIONS, json={"prompt": "x", "max_tokens": 100,
                                                                 "ignore_eos": True, "stream": True}) as r:
            assert r.status == 200
            async for line in r.content:
                got.append(line)
    texts = [orjson.loads(x[6:]) for x in got if x.startswith(b"data: {")]
    assert 1 <= len(texts) <= 6 and not any(x.startswith(b"data: [DONE]") for x in got)
    assert server.stats.disconnects == 1
    assert server.stats.completion_tokens_sent == len(texts)


async def test_stall_keeps_connection_open_without_data(sim, session):
    server = await sim(ttft_ms=1, itl_ms=1, stall_rate=1.0, spec_tokens=0)
    async with session.post(server.url + COMPLETIONS, json={"prompt": "x", "max_tokens": 100,
                                                             "ignore_eos": True, "stream": True}) as r:
        assert r.status == 200
        # EOF would mean the server closed the stream: a stall must not
        assert await read_until_silent(r, silence=0.3, deadline=3.0) == "silent"
        assert 1 <= server.stats.completion_tokens_sent <= 6
    assert server.stats.stalls == 1


async def test_crash_after_writes_traceback_then_hangs(sim, session, tmp_path: Path):
    log = tmp_path / "crash.log"
    server = await sim(ttft_ms=1, itl_ms=2, crash_after=2, log_file=str(log), spec_tokens=0)
    long_body = {"prompt": "x", "max_tokens": 5000, "ignore_eos": True, "stream": True}
    async with session.post(server.url + COMPLETIONS, json=long_body) as long_resp:
        assert (await asyncio.wait_for(long_resp.content.readline(), 2)).startswith(b"data: ")
        for _ in range(2):
            async with session.post(server.url + COMPLETIONS, json={"prompt": "x", "max_tokens": 3}) as r:
                assert r.status == 200
        await asyncio.wait_for(server.crashed.wait(), 2)
        # the in-flight stream (a chunk every 2 ms until now) stops sending but is not closed
        assert await read_until_silent(long_resp, silence=0.3, deadline=3.0) == "silent"
        sent = server.stats.completion_tokens_sent

    async def crash_logged() -> bool:
        return SIGQUIT_MESSAGE in log.read_text()

    await until(crash_logged, what="the crash in the log")
    lines = log.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if "Scheduler hit an exception" in ln)
    assert re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Scheduler hit an exception: Traceback", lines[i])
    assert lines[i + 1].startswith('  File "')
    exc = next(j for j in range(i, len(lines)) if lines[j] == CRASH_EXCEPTION_LINE)
    assert lines[exc + 2].endswith("] " + SIGQUIT_MESSAGE)
    async with aiohttp.ClientSession() as fresh:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(fresh.get(server.url + "/health"), 0.3)
    assert server.stats.completion_tokens_sent == sent


async def read_until_silent(resp: aiohttp.ClientResponse, silence: float, deadline: float) -> str:
    """Read lines until none comes for ``silence`` s ("silent"), EOF ("eof") or ``deadline`` ("busy")."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            line = await asyncio.wait_for(resp.content.readline(), silence)
        except TimeoutError:
            return "silent"
        if line == b"":
            return "eof"
    return "busy"


# --- llama.cpp quirks ---------------------------------------------------------------------------


async def test_close_after_stream_advertises_keep_alive_then_closes(sim):
    server = await sim(ttft_ms=1, itl_ms=1, close_after_stream=True)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = orjson.dumps({"prompt": "x", "max_tokens": 4, "stream": True})
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    data = await asyncio.wait_for(reader.read(-1), 5)  # returns only at EOF: the server closed
    writer.close()
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    assert b"keep-alive: timeout=5, max=100" in head
    assert b"connection: close" not in head
    assert data.endswith(b"0\r\n\r\n") and b"data: [DONE]" in data


async def test_usage_in_last_chunk_llama_style(sim, session):
    server = await sim(ttft_ms=1, itl_ms=1, usage_in_last_chunk=True)
    objs = [e for _, e in await stream(session, server.url + COMPLETIONS, {
        "prompt": "x", "max_tokens": 9, "ignore_eos": True, "stream": True})]
    assert objs[-1] == "[DONE]"
    last = objs[-2]
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["text"]
    assert last["usage"]["completion_tokens"] == 9 and last["timings"]["predicted_n"] == 9
    assert all(o["choices"] for o in objs[:-1])  # no empty-choices usage chunk


# --- max speed ----------------------------------------------------------------------------------


async def test_max_speed_counts_stay_exact(sim, session):
    server = await sim(max_speed=True, burst=16, spec_tokens=3)
    body = {"prompt": "x", "max_tokens": 3000, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    results = await asyncio.wait_for(
        asyncio.gather(*(stream(session, server.url + COMPLETIONS, body) for _ in range(4))), 10
    )
    for events in results:
        objs = [e for _, e in events]
        text = "".join(o["choices"][0]["text"] for o in objs[:-2])
        assert n_words(text) == objs[-2]["usage"]["completion_tokens"] == 3000
    assert server.stats.completion_tokens_sent == 12000


# --- CLI ----------------------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return processes.popen([sys.executable, "-m", "specload.sim", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


async def _first_line(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 10)).decode()


async def test_cli_prints_port_serves_and_exits_on_sigterm(session):
    proc = _spawn("--port", "0", "--quiet")
    try:
        line = await _first_line(proc)
        m = re.fullmatch(r"specload sim listening on (http://127\.0\.0\.1:(\d+))\n", line)
        assert m, line
        async with session.get(m.group(1) + "/health") as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(asyncio.to_thread(proc.wait), 5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_cli_crash_exit(tmp_path: Path):
    log = tmp_path / "sim.log"
    proc = _spawn("--port", "0", "--crash-after", "0", "--crash-exit", "--log-file", str(log))
    try:
        assert await asyncio.wait_for(asyncio.to_thread(proc.wait), 10) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert CRASH_EXCEPTION_LINE in text and SIGQUIT_MESSAGE in text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--accept-rate", "2"], "--accept-rate"),
        (["--port", "notaport"], "--port"),
        (["--fail-rate", "0.6", "--stall-rate", "0.6"], "must not exceed 1"),
    ],
)
def test_cli_bad_options_exit_2(args, fragment):
    res = processes.run([sys.executable, "-m", "specload.sim", *args], capture_output=True, timeout=20)
    assert res.returncode == 2
    err = res.stderr.decode()
    assert fragment in err and "Error" in err and "Traceback" not in err
