"""The session's server watch end to end: crashes from a log file, a log command and a launched
server reach the run within a second and act on it; health, /metrics and log stats are recorded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specload.config import RunConfig, WatchConfig
from specload.datatypes import CrashEvent
from specload.exitcode import ExitCode
from specload.record.reader import read_record
from specload.session import NullListener, Session
from tests.conftest import Heard, make_config
from tests.integration.conftest import free_port
from tests.waiting import until


def cfg(url: str | None, record: Path, *, watch: WatchConfig, levels=(4,), n=10_000, duration=None,
        max_tokens=20, sim_args=()) -> RunConfig:
    return make_config(
        url, stall_timeout_s=5, concurrency=tuple(levels), requests_per_level=None if duration else n,
        duration_per_level_s=duration, drain=True, max_tokens=max_tokens, watch=watch, path=str(record),
        sim_args=tuple(sim_args),
    )


async def test_crash_in_a_followed_log_file_stops_the_run_within_a_second(sim, tmp_path) -> None:
    log = tmp_path / "server.log"
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=25, log_file=str(log), log_interval=0.2)
    rec = tmp_path / "run.jsonl"
    crashes: list[tuple[float, CrashEvent]] = []

    class Listener(NullListener):
        def crash(self, crash: CrashEvent) -> None:
            crashes.append((time.monotonic(), crash))

    listener = Listener()

    session = Session(cfg(server.url, rec, watch=WatchConfig(server_log=str(log), on_crash="stop",
                                                              metrics_url="off")), listener=listener)
    task = asyncio.ensure_future(session.run())
    await asyncio.wait_for(server.crashed.wait(), 30)
    crashed_at = time.monotonic()
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "crashed" and result.exit_code == ExitCode.CRASHED
    # one failure: the root cause first and only, the parent's sigquit line grouped under it (issue 11)
    assert {c.exception_type for _, c in crashes} == {"AttributeError"}
    assert crashes[0][1].new and not any(c.new for _, c in crashes[1:])
    attr = crashes[-1][1]
    assert "EAGLEWorkerV2" in attr.message and attr.processes == ("TP0",) and attr.count == 1
    assert [c.exception_type for c in attr.consequences] == ["server_fatal"]
    assert min(t for t, _ in crashes) - crashed_at < 1.0  # seen within a second of being written
    data = read_record(str(rec))
    assert {c["exception_type"] for c in data.crashes} == {"AttributeError"}
    assert [c["exception_type"] for c in data.crashes[-1]["consequences"]] == ["server_fatal"]
    assert data.end["reason"] == "crashed"
    # the followed log also fed the server stats (SGLang-style Decode batch lines)
    assert any(s["source"].startswith("log:sglang") for s in data.servers)


async def test_crash_pauses_the_load_when_asked(sim, tmp_path) -> None:
    log = tmp_path / "server.log"
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=10, log_file=str(log))
    session = Session(cfg(server.url, tmp_path / "r.jsonl",
                          watch=WatchConfig(server_log=str(log), on_crash="pause", metrics_url="off")),
                      stay_open=True)
    task = asyncio.ensure_future(session.run())
    try:
        await until(lambda: session.runner is not None and session.runner.paused and session.stats.snapshot().crashes)
        assert session.state_label() in ("paused", "server down")
    finally:
        session.interrupt()
        result = await asyncio.wait_for(task, 30)
    # a quit after the crash ends the run as crashed, with its exit status (issue 11: the TUI's record
    # said interrupted while the TUI exited 3)
    assert result.reason == "crashed" and result.exit_code == ExitCode.CRASHED


async def test_crash_read_through_a_log_command(sim, tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=15, log_file=str(log))
    rec = tmp_path / "run.jsonl"
    session = Session(cfg(server.url, rec, watch=WatchConfig(server_log_cmd=f"tail -n 0 -F {log}",
                                                              on_crash="stop", metrics_url="off")))
    result = await asyncio.wait_for(session.run(), 40)
    assert result.reason == "crashed"
    assert any(c["exception_type"] == "AttributeError" for c in read_record(str(rec)).crashes)


async def test_launched_server_expect_log_metrics_and_death(tmp_path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = (f"{sys.executable} -m specload.sim --port {port} --ttft-ms 5 --itl-ms 10 --spec-tokens 3 "
           f"--accept-rate 0.6 --log-interval 0.2")
    rec = tmp_path / "run.jsonl"
    watch = WatchConfig(launch=cmd, ready_timeout_s=30, stop_grace_s=2,
                        expect_log=("listening on", "Spec v2 is enabled"), expect_timeout_s=0.5,
                        on_crash="stop", down_timeout_s=1.0)
    session = Session(cfg(url, rec, watch=watch, max_tokens=200))
    task = asyncio.ensure_future(session.run())
    await until(lambda: session.runner is not None and session.runner.started >= 8)
    await until(lambda: session.stats.snapshot().server is not None)
    pid = session.supervisor.launched.pid

    def scraped_acceptance() -> bool:  # two /metrics scrapes have seen speculative counters move
        m = session.watch.metrics
        return m is not None and m.last_sample is not None and (m.last_sample.accept_len or 0) > 1

    await until(scraped_acceptance)
    os.kill(pid, signal.SIGKILL)  # the server dies without a word
    result = await asyncio.wait_for(task, 30)
    assert result.reason == "server down" and result.exit_code == ExitCode.SERVER_DOWN
    data = read_record(str(rec))
    expects = {e["value"]["pattern"]: e["value"]["seen"] for e in data.events if e["kind"] == "expect"}
    assert expects == {"listening on": True, "Spec v2 is enabled": False}
    health = [e["value"] for e in data.events if e["kind"] == "health"]
    assert health[0] == "up" and "down" in health
    kinds = {(r["error"] or {}).get("kind") for r in data.requests if not r["ok"]}
    assert kinds & {"disconnect", "connect", "cancelled"}
    metrics = [s for s in data.servers if s["source"] == "metrics"]
    assert metrics and any(0 < s.get("accept_rate", 0) <= 1 for s in metrics)
    assert any(s.get("accept_len", 0) > 1 for s in metrics)
    assert data.end["reason"] == "stopped"


async def test_server_dying_while_starting_is_reported_with_its_crash(tmp_path) -> None:
    script = tmp_path / "bad_server.py"
    script.write_text(
        "import sys\n"
        "print('INFO loading model', flush=True)\n"
        "print('Traceback (most recent call last):')\n"
        "print('  File \"/srv/model_runner.py\", line 88, in load_weights')\n"
        "print('    raise ValueError(bad)')\n"
        "print('ValueError: checkpoint shard 3 of 8 is missing', flush=True)\n"
        "sys.exit(3)\n"
    )
    rec = tmp_path / "run.jsonl"
    url = f"http://127.0.0.1:{free_port()}"
    heard = Heard()
    session = Session(cfg(url, rec, watch=WatchConfig(launch=f"{sys.executable} {script}", ready_timeout_s=20)),
                      listener=heard.listener)
    result = await asyncio.wait_for(session.run(), 30)
    assert result.reason == "error" and result.exit_code == 1
    assert "exited with code 3" in result.message and "\n" not in result.message
    crashes = heard.of("crash")
    assert [c.exception_type for c in crashes] == ["ValueError"]
    assert crashes[0].innermost_frame == "model_runner.py:88 in load_weights"
    data = read_record(str(rec))
    assert data.crashes[0]["message"].startswith("checkpoint shard")
    assert data.end["reason"] == "crashed"


async def test_interrupt_while_waiting_for_a_slow_server(tmp_path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing will ever listen there
    session = Session(cfg(url, tmp_path / "r.jsonl", watch=WatchConfig(launch="sleep 60", ready_timeout_s=900,
                                                                      stop_grace_s=1)))
    task = asyncio.ensure_future(session.run())
    await until(lambda: session.phase == "waiting for server" and session.supervisor.launched is not None
                     and session.supervisor.launched.pid is not None)
    pid = session.supervisor.launched.pid
    session.interrupt()
    result = await asyncio.wait_for(task, 15)
    assert result.reason == "interrupted" and result.exit_code == 130
    assert session.supervisor.launched.exit is not None  # the launched server was stopped, not left behind
    assert pid is not None


@contextlib.asynccontextmanager
async def _openai_server(chat, *, model: str, health=None) -> AsyncIterator[str]:
    """A small OpenAI-shaped server on 127.0.0.1 (port 0): ``chat`` answers the completions, ``health``
    (if given) GET /health; yields its URL."""
    from aiohttp import web

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": model}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    if health is not None:
        app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_a_server_without_health_endpoint_is_not_taken_for_dead(tmp_path) -> None:
    from aiohttp import web

    sse = (b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
           b'data: {"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":2}}\n\ndata: [DONE]\n\n')

    async def chat(request: web.Request) -> web.Response:
        return web.Response(body=sse, content_type="text/event-stream")

    heard = Heard()
    async with _openai_server(chat, model="proxy-model") as url:
        session = Session(cfg(url, tmp_path / "r.jsonl", watch=WatchConfig(metrics_url="off"), levels=(2,), n=6),
                          listener=heard.listener)
        result = await asyncio.wait_for(session.run(), 30)
    assert result.reason == "completed" and session.stats.snapshot().requests_ok == 6
    assert any("health not watched" in n for n in heard.of("notice"))
    assert session.stats.snapshot().health == "unknown"


async def test_a_server_slow_to_answer_health_while_it_streams_is_not_down(tmp_path, monkeypatch) -> None:
    # overloaded servers answer /health late while their streams go on (a bench server at C=10000
    # did): that is slow, not down, and the load is never paused for it
    from aiohttp import web

    from specload.datatypes import HealthChanged, LoadControl
    from specload.watch import health

    monkeypatch.setattr(health, "INTERVAL_S", 0.1)
    monkeypatch.setattr(health, "TIMEOUT_S", 0.3)
    calls = [0]

    async def slow_health(request: web.Request) -> web.Response:
        calls[0] += 1
        if calls[0] > 2:  # the first answers in time (the run starts with the server up), then late
            await asyncio.sleep(1.0)
        return web.Response(text="ok")

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(10):
            await asyncio.sleep(0.03)
            await resp.write(b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
        await resp.write(b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n')
        return resp

    heard = Heard()
    async with _openai_server(chat, model="busy-model", health=slow_health) as url:
        session = Session(cfg(url, tmp_path / "r.jsonl", watch=WatchConfig(metrics_url="off", gpu_metrics="off"),
                              levels=(2,), duration=2.5), listener=heard.listener)
        result = await asyncio.wait_for(session.run(), 30)
    assert result.reason == "completed"
    assert calls[0] >= 4  # checks timed out during the load
    events = heard.of("run_event")
    assert [e.state for e in events if isinstance(e, HealthChanged)] == ["up"], events
    assert not [e for e in events if isinstance(e, LoadControl) and e.action == "pause"], events
    assert session.stats.snapshot().requests_ok >= 4


async def test_a_crash_line_printed_in_a_loop_is_one_record_line(sim, tmp_path) -> None:
    # a server (or a wrapper script) printing the same crash line 20,000 times: one failure, one crash
    # line in the record (each line used to write one, 310,000 lines in 15 s with the client saturated)
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    rec = tmp_path / "run.jsonl"
    session = Session(cfg(server.url, rec, levels=(1,), duration=3, watch=WatchConfig(
        server_log_cmd="yes 'Segmentation fault (core dumped)' | head -n 20000; sleep 30",
        on_crash="continue", metrics_url="off")))
    result = await asyncio.wait_for(session.run(), 40)
    assert result.reason == "completed"
    assert session.logs.seq == 20_000  # every line was read during the 3 s level
    crashes = read_record(str(rec)).crashes
    assert [(c["exception_type"], c["count"]) for c in crashes] == [("SIGSEGV", 1)]


@pytest.mark.slow
async def test_a_flood_of_stats_lines_is_sampled_at_the_scrape_interval(sim, tmp_path) -> None:
    # 50,000 SGLang stats lines at once: one record line per --metrics-interval, not one per line
    # (100,017 server lines in 10 s before)
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    rec = tmp_path / "run.jsonl"
    line = ("[2025-01-01 00:00:00 TP0] Decode batch. #running-req: 32, #token: 7275, token usage: 0.03, "
            "accept len: 2.62, gen throughput (token/s): 968.31, #queue-req: 0")
    session = Session(cfg(server.url, rec, levels=(1,), duration=60, watch=WatchConfig(
        server_log_cmd=f"yes '{line}' | head -n 50000; sleep 60", metrics_url="off", metrics_interval_s=0.5)))
    started = time.monotonic()
    task = asyncio.ensure_future(session.run())
    try:  # the run lasts until every line was read (a second alone, many on a busy machine)
        await until(lambda: session.logs.seq == 50_000, timeout=50,
                    what="the 50,000 lines read")
    finally:
        session.interrupt()
        result = await asyncio.wait_for(task, 30)
    elapsed = time.monotonic() - started
    assert result.reason == "interrupted", result
    servers = [s for s in read_record(str(rec)).servers if s["source"] == "log:sglang"]
    # at most one per interval while the run lasted
    assert 1 <= len(servers) <= elapsed / 0.5 + 1


async def test_a_crash_that_pauses_the_load_cuts_the_level_to_its_active_time(sim, tmp_path) -> None:
    # issue 11: after the crash the sim's streams hang; those seconds stretched the level (129 tok/s
    # read as 29). The level now counts its time up to the crash, says it was cut, and what it lost.
    log = tmp_path / "server.log"
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=10, log_file=str(log))
    rec = tmp_path / "r.jsonl"
    session = Session(cfg(server.url, rec, watch=WatchConfig(server_log=str(log), on_crash="pause", metrics_url="off"),
                          max_tokens=200), stay_open=True)
    task = asyncio.ensure_future(session.run())
    try:
        await until(lambda: session.runner is not None and session.runner.paused and session.stats.snapshot().crashes)
        paused_at = time.monotonic()
        assert session.runner.in_flight > 0  # streams hung by the crash
        await until(lambda: time.monotonic() - paused_at > 1.5)  # the hung streams stretch the level
    finally:
        session.interrupt()
        result = await asyncio.wait_for(task, 30)
    (level,) = result.levels
    assert level.cut == "crash"
    assert level.active_s is not None and level.active_s < level.wall_s - 1.4
    assert level.throughput_tok_s == pytest.approx(level.output_tokens / level.active_s, rel=0.01)
    assert level.lost == level.requests - level.ok and level.lost >= 1  # the hung streams, cancelled at the quit
    (line,) = read_record(str(rec)).levels
    assert (line["cut"], line["active_s"], line["lost"]) == ("crash", level.active_s, level.lost)


async def test_a_quit_after_the_server_went_down_skips_the_last_metrics_scrape(sim, tmp_path) -> None:
    # the last /metrics scrape before the server is stopped is for the last interval's counters; of a
    # server found down it only waited out its 3 s timeout: a quit after a crash took 5.3 s, now 2.3
    log = tmp_path / "server.log"
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=10, log_file=str(log))
    rec = tmp_path / "r.jsonl"
    session = Session(cfg(server.url, rec, watch=WatchConfig(server_log=str(log), on_crash="pause")), stay_open=True)
    task = asyncio.ensure_future(session.run())
    tried: list[bool] = []
    try:
        await until(lambda: session.watch is not None)
        assert session.watch is not None
        final_scrape = session.watch.final_scrape

        async def spy() -> None:
            tried.append(session.policy.server_down)
            await final_scrape()

        session.watch.final_scrape = spy  # type: ignore[method-assign]
        await until(lambda: session.policy.server_down)
    finally:
        session.interrupt()
        result = await asyncio.wait_for(task, 30)
    assert result.reason in ("server down", "crashed", "interrupted"), result
    assert tried == [], "the teardown scraped /metrics of a server it had found down"


async def test_a_line_the_server_logs_after_the_last_answer_is_recorded(sim, tmp_path) -> None:
    # llama-server prints a request's timings and draft acceptance after the answer's last byte, and
    # later when it waits for a CPU: a followed file is read until the log is quiet, not once as the
    # load ends (a real-server test under load missed 1 of 82 draft lines that way)
    log = tmp_path / "server.log"
    log.write_text("")
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    rec = tmp_path / "run.jsonl"
    late = ("0.05.000.000 I slot print_timing: id  3 | task 77 | draft acceptance = 0.75000 "
            "(    3 accepted /     4 generated), mean len = 4.00\n")
    loop = asyncio.get_running_loop()

    def log_late() -> None:
        with log.open("a") as f:
            f.write(late)

    class Listener(NullListener):
        def level_done(self, summary) -> None:  # the load is over: the server logs 50 ms later
            loop.call_later(0.05, log_late)

    session = Session(cfg(server.url, rec, levels=(1,), n=3, watch=WatchConfig(
        server_log=str(log), metrics_url="off")), listener=Listener())
    result = await asyncio.wait_for(session.run(), 30)
    assert result.reason == "completed"
    spec = [s for s in read_record(str(rec)).servers if s["source"] == "log:llamacpp"]
    assert [(s["extra"]["accepted_tokens"], s["extra"]["drafted_tokens"]) for s in spec] == [(3, 4)]
