"""The simulator's llamacpp flavour over real HTTP on 127.0.0.1, checked against what the real
llama-server does (shared/real-server/REPORT.md): SSE shapes, ``timings`` arithmetic, ``llamacpp:*``
/metrics, slot log lines read by specload's own parser, error bodies, close-after-stream, the SIGTERM
hang (``--hang-on-sigterm``), and specload itself run end to end against it.

Every wait is bounded (``asyncio.wait_for`` or a polling deadline); nothing sleeps and hopes. The only
fixed window is the one that proves silence: no byte may arrive in it.
"""

from __future__ import annotations

import asyncio
import math
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

from specload.sim.config import SimConfig
from specload.sim.model import estimate_chat_tokens, estimate_text_tokens
from specload.watch.server_stats import parse_stats_line
from tests import processes
from tests.waiting import until

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
ID_RE = re.compile(r"chatcmpl-[A-Za-z0-9]{32}")
# M.SS.mmm.uuu LEVEL component(4) function(12): text
LOG_RE = re.compile(r"^\d+\.\d{2}\.\d{3}\.\d{3} [IWE] (slot|srv ) [ \w()]{12}: ")
MESSAGES = [{"role": "user", "content": "Tell me about the quick brown fox."}]


async def read_sse(resp: aiohttp.ClientResponse, t0: float) -> list[tuple[float, Any]]:
    events: list[tuple[float, Any]] = []
    async for raw in resp.content:
        line = raw.strip()
        if line.startswith(b"data: "):
            payload = line[6:]
            events.append((time.perf_counter() - t0, "[DONE]" if payload == b"[DONE]" else orjson.loads(payload)))
    return events


async def stream(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[list[tuple[float, Any]], Any]:
    t0 = time.perf_counter()
    async with session.post(url, json={**body, "stream": True}) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        return await asyncio.wait_for(read_sse(resp, t0), 10), resp.headers


async def stream_reads(session: aiohttp.ClientSession, url: str, body: dict) -> list[int]:
    """The content tokens in each read of the streamed response, in order."""
    async with session.post(url, json={**body, "stream": True}) as resp:
        assert resp.status == 200, await resp.text()
        counts, rest = [], b""
        async for data in resp.content.iter_any():
            *lines, rest = (rest + data).split(b"\n")
            counts.append(sum(1 for ln in lines if b'"delta":{"content":"' in ln.replace(b" ", b"")))
        return counts


@pytest.fixture
async def session():
    # a new connection per request: the llamacpp flavour closes the connection after every stream
    conn = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=15)) as s:
        yield s


def ratio(a: float, b: float) -> object:
    """What the server writes for a / b: JSON null for a division by 0 (as nlohmann::json writes NaN)."""
    return None if b == 0 else pytest.approx(a / b)


def check_timings(t: dict, prompt_n: int, predicted_n: int) -> None:
    # (a loop late by several steps, on a busy machine, hands them out at one instant: predicted_ms
    # may then be 0, and the rates null)
    assert t["cache_n"] == 0 and t["prompt_n"] == prompt_n and t["predicted_n"] == predicted_n
    n = predicted_n
    # generation figures divide by n - 1, as the real server's 448.163 ms / 5 tokens -> 112.04 shows
    assert t["predicted_per_token_ms"] == pytest.approx(t["predicted_ms"] / (n - 1))
    assert t["predicted_per_second"] == ratio(1000.0 * (n - 1), t["predicted_ms"])
    assert t["prompt_per_token_ms"] == pytest.approx(t["prompt_ms"] / prompt_n)
    assert t["prompt_per_second"] == ratio(1000.0 * prompt_n, t["prompt_ms"])
    for k in ("prompt_ms", "predicted_ms"):  # whole microseconds, as llama.cpp measures
        assert round(t[k] * 1000) == pytest.approx(t[k] * 1000, abs=1e-6)


# --- response shapes ----------------------------------------------------------------------------


async def test_chat_stream_one_chunk_per_token_in_bursts_then_finish_usage_done(sim, session):
    k = 4
    server = await sim(flavor="llamacpp", model_name="tiny", ttft_ms=5, itl_ms=25, spec_tokens=k, accept_rate=0.8)
    body = {"messages": MESSAGES, "max_tokens": 24, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    events, headers = await stream(session, server.url + CHAT, body)
    assert headers["Server"] == "llama.cpp" and headers["Keep-Alive"] == "timeout=5, max=100"
    objs = [e for _, e in events]
    role, *content, finish, usage_chunk, done = objs
    assert done == "[DONE]"
    assert role["choices"] == [{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}]
    for c in content:
        assert list(c) == ["choices", "created", "id", "model", "system_fingerprint", "object"]
        (ch,) = c["choices"]
        assert ch["finish_reason"] is None and list(ch["delta"]) == ["content"]
        assert len(ch["delta"]["content"].split()) == 1  # one token, never several
    assert len(content) == 24 == server.stats.completion_tokens_sent
    assert finish["choices"] == [{"finish_reason": "length", "index": 0, "delta": {}}]
    assert "timings" not in finish and "usage" not in finish  # with include_usage they ride the next chunk
    assert usage_chunk["choices"] == []
    prompt = estimate_chat_tokens(MESSAGES)
    assert usage_chunk["usage"] == {"completion_tokens": 24, "prompt_tokens": prompt, "total_tokens": prompt + 24,
                                    "prompt_tokens_details": {"cached_tokens": 0}}
    t = usage_chunk["timings"]
    check_timings(t, prompt, 24)
    assert t["draft_n"] % k == 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    for o in objs[:-1]:
        assert ID_RE.fullmatch(o["id"]) and o["id"] == role["id"]
        assert o["model"] == "tiny" and o["system_fingerprint"] == "b0-unknown"
        assert o["object"] == "chat.completion.chunk"
    # speculation: the tokens of one verify step leave in one write, so they arrive in one read of the
    # socket; the prefill token's write and one per verify step (draft_n / k of them) make at most that
    # many reads (a client late on a busy machine reads several writes at once, never one write in two:
    # a gap between arrival times would split a burst whenever the test process was descheduled)
    drafts = server.stats.drafts
    reads = await stream_reads(session, server.url + CHAT, body)
    steps = server.stats.drafts - drafts  # this request's verify steps
    tokens = [n for n in reads if n]
    assert sum(tokens) == 24 and len(tokens) <= 1 + steps < 24
    assert max(tokens) > 1  # (one write per token would be 24 reads on an idle machine)


async def test_chat_stream_without_include_usage_puts_timings_on_the_finish_chunk(sim, session):
    server = await sim(flavor="llamacpp", ttft_ms=1, itl_ms=4, spec_tokens=0)
    events, _ = await stream(session, server.url + CHAT, {"messages": MESSAGES, "max_tokens": 5, "ignore_eos": True})
    objs = [e for _, e in events]
    assert objs[-1] == "[DONE]"
    finish = objs[-2]
    assert finish["choices"] == [{"finish_reason": "length", "index": 0, "delta": {}}]
    assert "usage" not in finish
    check_timings(finish["timings"], estimate_chat_tokens(MESSAGES), 5)
    assert "draft_n" not in finish["timings"]  # speculation off
    assert len(objs) == 1 + 5 + 1 + 1 and all(o["choices"] for o in objs[:-1])


async def test_completions_stream_extra_final_chunk_carries_finish_usage_timings(sim, session):
    server = await sim(flavor="llamacpp", model_name="tiny", ttft_ms=1, itl_ms=4, spec_tokens=3, accept_rate=0.9)
    prompt = "The quick brown fox"
    events, _ = await stream(session, server.url + COMPLETIONS, {"prompt": prompt, "max_tokens": 12, "ignore_eos": True})
    objs = [e for _, e in events]
    *content, last, done = objs
    assert done == "[DONE]" and len(content) == 12
    for c in content:
        assert list(c) == ["choices", "created", "model", "system_fingerprint", "object", "id"]
        (ch,) = c["choices"]
        assert list(ch) == ["text", "index", "logprobs", "finish_reason"] and ch["finish_reason"] is None
        assert len(ch["text"].split()) == 1
        assert c["object"] == "text_completion" and ID_RE.fullmatch(c["id"])
    # usage comes although include_usage was not asked for, as llama-server does
    assert list(last) == ["choices", "created", "model", "system_fingerprint", "object", "usage", "id", "timings"]
    assert last["choices"] == [{"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}]
    p = estimate_text_tokens(prompt)
    assert last["usage"]["completion_tokens"] == 12 and last["usage"]["prompt_tokens"] == p
    check_timings(last["timings"], p, 12)


async def test_non_stream_bodies(sim, session):
    server = await sim(flavor="llamacpp", model_name="tiny", ttft_ms=1, itl_ms=4, spec_tokens=0)
    async with session.post(server.url + CHAT, json={"messages": MESSAGES, "max_tokens": 6, "ignore_eos": True}) as r:
        chat = await r.json()
    assert chat["object"] == "chat.completion" and ID_RE.fullmatch(chat["id"])
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert len(chat["choices"][0]["message"]["content"].split()) == 6 == chat["usage"]["completion_tokens"]
    check_timings(chat["timings"], estimate_chat_tokens(MESSAGES), 6)
    async with session.post(server.url + COMPLETIONS, json={"prompt": "x", "max_tokens": 4, "ignore_eos": True}) as r:
        comp = await r.json()
    assert comp["object"] == "text_completion" and comp["choices"][0]["finish_reason"] == "length"
    assert comp["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    check_timings(comp["timings"], 1, 4)
    async with session.get(server.url + "/health") as r:
        assert r.status == 200 and await r.json() == {"status": "ok"}
    async with session.get(server.url + "/v1/models") as r:
        assert [m["id"] for m in (await r.json())["data"]] == ["tiny"]
    async with session.post(server.url + "/generate", json={"text": "x"}) as r:
        assert r.status == 404  # SGLang's endpoint; llama-server has none


# --- timings and queueing -----------------------------------------------------------------------


async def test_prompt_ms_excludes_queueing_and_metrics_show_the_deferred_request(sim, session):
    server = await sim(flavor="llamacpp", max_batch=1, ttft_ms=20, itl_ms=5, spec_tokens=0)
    body = {"messages": MESSAGES, "max_tokens": 25, "ignore_eos": True, "stream_options": {"include_usage": True}}

    async def gauges() -> dict[str, float]:
        async with session.get(server.url + "/metrics") as r:
            text = await r.text()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

    first = asyncio.create_task(stream(session, server.url + CHAT, body))

    async def one_processing() -> bool:
        return (await gauges())["llamacpp:requests_processing"] == 1

    await until(one_processing, what="the first request in its slot")
    second = asyncio.create_task(stream(session, server.url + CHAT, body))

    async def one_deferred() -> bool:
        g = await gauges()
        return g["llamacpp:requests_processing"] == 1 and g["llamacpp:requests_deferred"] == 1

    await until(one_deferred)
    results = await asyncio.wait_for(asyncio.gather(first, second), 10)
    (ev1, _), (ev2, _) = results
    ttft2_ms = next(t for t, e in ev2 if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content")) * 1e3
    t1, t2 = ev1[-2][1]["timings"], ev2[-2][1]["timings"]
    # the second waited for the first (25 tokens: 20 ms + 24 x 5 ms) before its slot started it
    assert ttft2_ms > 100
    # prompt_ms runs from the slot starting the request: the queueing (at least the first request's
    # decode, which the second waited behind) is not in it. Compared with the first's own decode
    # time, not a fixed figure, so a loaded machine that stretches every timer cannot fail it.
    assert t2["prompt_ms"] < ttft2_ms - 0.5 * t1["predicted_ms"], (t1, t2, ttft2_ms)
    assert t2["prompt_ms"] >= 15  # the pinned 20 ms prefill (timers may fire up to ~1 ms early)


# --- /metrics -----------------------------------------------------------------------------------

LLAMA_METRICS = {
    "prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total",
    "n_decode_total", "n_tokens_max", "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total", "spec_decode_num_drafts_total", "prompt_tokens_seconds",
    "predicted_tokens_seconds", "requests_processing", "requests_deferred", "n_busy_slots_per_decode",
}


async def test_metrics_names_and_counters_match_tokens_sent(sim, session):
    server = await sim(flavor="llamacpp", ttft_ms=2, itl_ms=2, spec_tokens=3, accept_rate=0.7, max_batch=4)
    prompts = ["a b c d", "the quick brown fox jumps", "x" * 40, "hello", "one two three"]
    bodies = [{"prompt": p, "max_tokens": 10 + 3 * i, "ignore_eos": True} for i, p in enumerate(prompts)]
    results = await asyncio.gather(*(stream(session, server.url + COMPLETIONS, b) for b in bodies))
    finals = [ev[-2][1] for ev, _ in results]
    async with session.get(server.url + "/metrics") as r:
        text = await r.text()
    for name in LLAMA_METRICS:  # each with its HELP and TYPE, unlabelled, llamacpp: prefix
        assert f"# HELP llamacpp:{name} " in text and f"# TYPE llamacpp:{name} " in text
        assert re.search(rf"^llamacpp:{name} [-0-9.e+]+$", text, re.M), name
    assert "vllm:" not in text
    values = {}
    per_pos = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "position" in s.labels:
                per_pos[int(s.labels["position"])] = s.value
            else:
                values[s.name.removeprefix("llamacpp:")] = s.value
    # prometheus_client's parser drops llamacpp:n_tokens_max (a counter whose name lacks _total); the
    # real server writes it the same way, so it is read from the text here
    assert LLAMA_METRICS - {"n_tokens_max"} <= set(values)
    values["n_tokens_max"] = float(re.search(r"^llamacpp:n_tokens_max (\d+)$", text, re.M).group(1))
    st = server.stats
    sent = sum(f["usage"]["completion_tokens"] for f in finals)
    assert values["tokens_predicted_total"] == sent == st.completion_tokens_sent == sum(10 + 3 * i for i in range(5))
    assert values["prompt_tokens_total"] == sum(f["usage"]["prompt_tokens"] for f in finals) == st.prompt_tokens
    assert values["prompt_seconds_total"] == pytest.approx(sum(f["timings"]["prompt_ms"] for f in finals) / 1e3,
                                                           rel=1e-3)
    assert values["tokens_predicted_seconds_total"] == pytest.approx(
        sum(f["timings"]["predicted_ms"] for f in finals) / 1e3, rel=1e-3)
    assert values["spec_decode_num_drafts_total"] == st.drafts == sum(f["timings"]["draft_n"] // 3 for f in finals)
    assert values["spec_decode_num_draft_tokens_total"] == st.draft_tokens == 3 * st.drafts
    assert values["spec_decode_num_accepted_tokens_total"] == st.accepted_tokens == sum(
        f["timings"]["draft_n_accepted"] for f in finals)
    assert sum(per_pos.values()) == st.accepted_tokens and sorted(per_pos) == [0, 1, 2]
    assert values["n_tokens_max"] == max(f["usage"]["total_tokens"] for f in finals)
    assert values["requests_processing"] == 0 and values["requests_deferred"] == 0
    assert values["n_decode_total"] >= 1 and 1 <= values["n_busy_slots_per_decode"] <= 4
    # the rates since the start (this first scrape): tokens over the seconds counted above (0 when a loop
    # late by several steps, on a busy machine, handed every request's tokens out at one instant)
    g_s, p_s = values["tokens_predicted_seconds_total"], values["prompt_seconds_total"]
    assert values["predicted_tokens_seconds"] == (pytest.approx(sent / g_s, rel=1e-3) if g_s else 0.0)
    assert values["prompt_tokens_seconds"] == (
        pytest.approx(values["prompt_tokens_total"] / p_s, rel=1e-3) if p_s else 0.0)
    # the throughput gauges cover the time since the previous scrape: nothing happened since
    async with session.get(server.url + "/metrics") as r:
        again = {s.name: s.value for f in text_string_to_metric_families(await r.text()) for s in f.samples}
    assert again["llamacpp:predicted_tokens_seconds"] == 0 and again["llamacpp:tokens_predicted_total"] == sent


# --- log lines ----------------------------------------------------------------------------------


async def test_log_lines_parsed_by_specload(sim, session, tmp_path: Path):
    log = tmp_path / "llama.log"
    server = await sim(flavor="llamacpp", log_file=str(log), ttft_ms=2, itl_ms=2, spec_tokens=3,
                       accept_rate=0.8, max_batch=2, log_interval=0.05)
    bodies = [{"messages": MESSAGES, "max_tokens": 20 + i, "ignore_eos": True,
               "stream_options": {"include_usage": True}} for i in range(3)]
    results = await asyncio.gather(*(stream(session, server.url + CHAT, b) for b in bodies))
    by_prompt_n = {}
    for ev, _ in results:
        t = ev[-2][1]["timings"]
        by_prompt_n[t["predicted_n"]] = t
    lines = log.read_text().splitlines()
    assert lines and all(LOG_RE.match(x) for x in lines), lines
    assert not any("Decode batch" in x or "Finish request" in x for x in lines)  # no vLLM/SGLang lines
    launches = [x for x in lines if "launch_slot_" in x]
    assert len(launches) == 3 and all(x.endswith("processing task, is_child = 0") for x in launches)
    releases = [x for x in lines if " release: " in x]
    assert len(releases) == 3 and all(re.search(r"stop processing: n_tokens = \d+, truncated = 0$", x)
                                      for x in releases)
    assert {int(re.search(r"id +(\d+) \|", x).group(1)) for x in launches} <= {0, 1}  # 2 slots
    evals, drafts = [], []
    for x in lines:
        s = parse_stats_line(x, 0)
        if s is None:
            continue
        assert s.source.startswith("log:llamacpp")
        kind = s.extra["kind"]
        if kind == "eval":
            evals.append(s)
        elif kind == "spec":
            drafts.append(s)
        else:
            assert kind == "prompt_eval" and s.extra["tokens"] == estimate_chat_tokens(MESSAGES)
    assert len(evals) == 3 and len(drafts) == 3
    for s in evals:
        t = by_prompt_n[s.extra["tokens"]]
        assert s.extra["ms"] == pytest.approx(t["predicted_ms"], abs=0.006)
        # (the log prints a division by 0 as C's printf does: inf)
        want = t["predicted_per_second"]
        assert s.gen_tok_s == (math.inf if want is None else pytest.approx(want, abs=0.006))
    got = sorted((s.extra["accepted_tokens"], s.extra["drafted_tokens"]) for s in drafts)
    want = sorted((t["draft_n_accepted"], t["draft_n"]) for t in by_prompt_n.values())
    assert got == want
    for s in drafts:
        acc, drafted = s.extra["accepted_tokens"], s.extra["drafted_tokens"]
        assert s.accept_rate == pytest.approx(acc / drafted, abs=1e-5)
        assert s.accept_len == pytest.approx(1 + acc / (drafted / 3), abs=0.006)  # tokens per verify step
    # the exact spacing of the real server's lines
    assert any(re.search(r"\| prompt eval time = {1,10}\d+\.\d\d ms / {1,5}\d+ tokens \( {0,8}\d+\.\d\d ms per "
                         r"token, {1,9}\d+\.\d\d tokens per second\)$", x) for x in lines)
    assert any(re.search(r"\| draft acceptance = \d\.\d{5} \( {0,5}\d+ accepted / {0,5}\d+ generated\), "
                         r"mean len = \d+\.\d\d$", x) for x in lines)


async def test_client_gone_logs_cancel_then_release(sim, tmp_path: Path):
    log = tmp_path / "llama.log"
    server = await sim(flavor="llamacpp", log_file=str(log), ttft_ms=2, itl_ms=10, spec_tokens=0)
    async with aiohttp.ClientSession() as s:
        async with s.post(server.url + COMPLETIONS, json={"prompt": "x", "max_tokens": 500, "stream": True}) as r:
            await asyncio.wait_for(r.content.readline(), 5)
    # leaving the block closed the connection: the server cancels the task and frees the slot

    async def logged() -> bool:
        return "release:" in log.read_text()

    await until(logged)
    text = log.read_text()
    m = re.search(r" W srv {10}stop: cancel task, id_task = (\d+)\n.* I slot {6}release: id +\d+ \| task (\d+) \| "
                  r"stop processing: n_tokens = \d+, truncated = 0\n", text)
    assert m and m.group(1) == m.group(2), text
    assert "print_timing" not in text
    assert server.stats.client_gone == 1


# --- errors -------------------------------------------------------------------------------------


async def test_error_bodies_and_context_limits(sim, session, tmp_path: Path):
    log = tmp_path / "llama.log"
    server = await sim(flavor="llamacpp", log_file=str(log), ttft_ms=1, itl_ms=0, spec_tokens=0,
                       context_size=512, max_batch=4)  # 128 tokens per slot
    async with session.post(server.url + COMPLETIONS, json={"prompt": "x", "max_tokens": -5}) as r:
        assert r.status == 400
        assert await r.read() == (b'{"error":{"code":400,"message":"Field \'max_tokens\': Value must be between '
                                  b'-1 <= value <= 2147483647, but got -5","type":"invalid_request_error"}}')
    long_prompt = "word " * 200  # 250 tokens > 128
    n = estimate_text_tokens(long_prompt)
    async with session.post(server.url + COMPLETIONS, json={"prompt": long_prompt, "stream": True}) as r:
        assert r.status == 400 and r.headers["Content-Type"].startswith("application/json")
        err = (await r.json())["error"]
    assert err == {"code": 400, "message": f"request ({n} tokens) exceeds the available context size (128 tokens), "
                   "try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": n, "n_ctx": 128}
    assert f"E srv    send_error: task id = 0, error: request ({n} tokens) exceeds" in log.read_text()
    # -1 and huge max_tokens are accepted: generation stops when the slot's context is full
    for max_tokens in (-1, 100_000_000):
        events, _ = await stream(session, server.url + COMPLETIONS,
                                 {"prompt": "abcd", "max_tokens": max_tokens, "ignore_eos": True})
        usage = events[-2][1]["usage"]
        assert usage["completion_tokens"] == 127 and usage["total_tokens"] == 128
    assert log.read_text().count("truncated = 1") == 2
    async with session.post(server.url + COMPLETIONS, data=b'{"prompt": "x", "max_tok') as r:
        assert r.status == 500 and (await r.json())["error"]["type"] == "server_error"
    async with session.post(server.url + CHAT, json={"messages": MESSAGES, "max_tokens": "many"}) as r:
        assert r.status == 400
        err = (await r.json())["error"]
    assert err["type"] == "invalid_request_error" and "type must be number, but is string" in err["message"]


async def test_connection_closed_after_each_stream(sim):
    server = await sim(flavor="llamacpp", ttft_ms=1, itl_ms=1)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = orjson.dumps({"prompt": "x", "max_tokens": 4, "stream": True})
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(-1), 5)  # returns only at EOF: the server closed
    writer.close()
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    assert b"keep-alive: timeout=5, max=100" in head and b"connection: close" not in head
    assert data.endswith(b"0\r\n\r\n") and b"data: [DONE]" in data


def test_config_validation():
    assert SimConfig(flavor="llamacpp").closes_after_stream
    assert SimConfig(flavor="llamacpp", context_size=4096, max_batch=8).slot_context == 512
    assert SimConfig().slot_context == SimConfig().context_size and not SimConfig().closes_after_stream
    with pytest.raises(ValueError, match="flavor"):
        SimConfig(flavor="sglang")
    with pytest.raises(ValueError, match="slots"):
        SimConfig(flavor="llamacpp", context_size=4, max_batch=4)


# --- CLI: --flavor, --hang-on-sigterm -----------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen:
    return processes.popen([sys.executable, "-m", "specload.sim", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def _url(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    line = (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 10)).decode()
    m = re.fullmatch(r"specload sim listening on (http://127\.0\.0\.1:\d+)\n", line)
    assert m, line
    return m.group(1)


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(5)


def test_cli_help_and_bad_flavor():
    out = processes.run([sys.executable, "-m", "specload.cli", "sim", "--help"], capture_output=True, text=True,
                         timeout=20)
    assert out.returncode == 0 and "--flavor [vllm|llamacpp]" in out.stdout and "--hang-on-sigterm" in out.stdout
    bad = processes.run([sys.executable, "-m", "specload.sim", "--flavor", "tgi"], capture_output=True, text=True,
                         timeout=20)
    assert bad.returncode == 2 and "--flavor" in bad.stderr and "Traceback" not in bad.stderr


async def test_hang_on_sigterm_keeps_streams_silent_until_clients_leave():
    proc = _spawn("--flavor", "llamacpp", "--port", "0", "--hang-on-sigterm", "--ttft-ms", "2", "--itl-ms", "20",
                  "--spec-tokens", "0", "--quiet")
    try:
        url = await _url(proc)
        port = int(url.rsplit(":", 1)[1])
        body = {"prompt": "x", "max_tokens": 900, "ignore_eos": True, "stream": True}
        sessions = [aiohttp.ClientSession() for _ in range(2)]
        try:
            resps = [await s.post(url + COMPLETIONS, json=body) for s in sessions]
            for r in resps:
                assert r.status == 200
                await asyncio.wait_for(r.content.readline(), 5)  # the stream is flowing
            proc.send_signal(signal.SIGTERM)

            async def refused() -> bool:
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                except (ConnectionRefusedError, ConnectionResetError):  # a closing listener may reset
                    return True
                w.close()
                return False

            await until(refused)  # the listener is closed
            for r in resps:
                r.content.read_nowait()  # what was sent before the signal
            # silence: not a byte more on either stream, and neither is closed
            for r in resps:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(r.content.readany(), 0.4)
                assert not r.content.at_eof()
            assert proc.poll() is None
        finally:
            for s in sessions:
                await s.close()  # the clients leave
        assert await asyncio.wait_for(asyncio.to_thread(proc.wait), 5) == 0
    finally:
        _reap(proc)


async def test_hang_on_sigterm_without_open_streams_exits_at_once():
    proc = _spawn("--port", "0", "--hang-on-sigterm", "--quiet")  # any flavour: vllm here
    try:
        url = await _url(proc)
        async with aiohttp.ClientSession() as s, s.get(url + "/health") as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(asyncio.to_thread(proc.wait), 5) == 0
    finally:
        _reap(proc)


# --- specload itself against the llamacpp flavour -----------------------------------------------


async def test_specload_run_end_to_end(tmp_path: Path):
    log = tmp_path / "llama.log"
    rec = tmp_path / "run.jsonl"
    # no EOS: every request must end at max_tokens for the exact counts below (with the default
    # per-token EOS chance about one request in 16 x 32 tokens stops early, depending on the seed)
    proc = _spawn("--flavor", "llamacpp", "--port", "0", "--ttft-ms", "5", "--itl-ms", "2", "--max-batch", "4",
                  "--log-file", str(log), "--seed", "1", "--eos-prob", "0")
    try:
        url = await _url(proc)
        res = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "specload.cli", "run", url, "-c", "4", "-n", "16", "--max-tokens", "32",
             "--record", str(rec), "--server-log", str(log)],
            capture_output=True, text=True, timeout=60,
        )
        assert res.returncode == 0, res.stderr + res.stdout
    finally:
        proc.terminate()
        await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
    lines = [orjson.loads(x) for x in rec.read_bytes().splitlines()]
    reqs = [x for x in lines if x["type"] == "request"]
    assert len(reqs) == 16 and all(r["ok"] for r in reqs)
    for r in reqs:
        assert r["output_tokens"] == 32 and not r["tokens_estimated"]
        t = r["server_timings"]
        assert t["predicted_n"] == 32 and t["prompt_n"] == r["prompt_tokens"]
    sources = {x["source"] for x in lines if x["type"] == "server"}
    assert "metrics" in sources and any(s.startswith("log:llamacpp") for s in sources)
    assert lines[-1]["type"] == "end" and lines[-1]["ok"] == 16
