"""The runner against the simulator: ramp, drain, live concurrency changes, pause, warm-up, open loop."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from specload.datatypes import ErrorKind, RequestRecord, RunEvent
from specload.engine.prompts import PromptSource
from specload.engine.runner import Runner, scaled
from specload.plan import LevelSpec, LoadPlan, build_plan
from specload.stats.levels import LevelSummary
from tests.conftest import make_client
from tests.waiting import until


class Sink:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.events: list[RunEvent] = []
        self.levels: list[LevelSummary] = []
        self.max_in_flight: dict[int, int] = {}


def make_runner(url: str, plan: LoadPlan, *, max_tokens: int = 10, stay_open: bool = False) -> tuple[Runner, Sink]:
    sink = Sink()
    client = make_client(url, max_tokens=max_tokens, ignore_eos=True)
    runner = Runner(
        client,
        PromptSource(["hello"]),
        plan,
        on_record=sink.records.append,
        on_event=sink.events.append,
        on_level=sink.levels.append,
        stay_open=stay_open,
    )
    return runner, sink



async def test_ramp_with_drain_covers_the_requests_each_level_started(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=3, spec_tokens=0)
    plan = build_plan((1, 2, 4), requests_per_level=6, duration_per_level=None, warmup_requests=2, drain=True)
    runner, sink = make_runner(server.url, plan)
    await runner.client.start()
    try:
        reason = await asyncio.wait_for(runner.run(), 30)
    finally:
        await runner.client.close()
    assert reason == "completed"
    warm = [r for r in sink.records if r.warmup]
    assert len(warm) == 2 and all(r.level_index == -1 for r in warm)
    assert [s.concurrency for s in sink.levels] == [1, 2, 4]
    assert [s.requests for s in sink.levels] == [6, 6, 6]
    assert all(s.ok == 6 for s in sink.levels)
    by_level = {i: [r for r in sink.records if r.level_index == i] for i in range(3)}
    for i in (0, 1):
        # drain: the next level starts only after every request of this one ended
        assert max(r.end_ns for r in by_level[i]) <= min(r.start_ns for r in by_level[i + 1])
    for i, conc in enumerate((1, 2, 4)):
        recs = by_level[i]
        # never more than C in flight within a level
        points = sorted([(r.start_ns, 1) for r in recs] + [(r.end_ns, -1) for r in recs], key=lambda p: (p[0], p[1]))
        cur = peak = 0
        for _, d in points:
            cur += d
            peak = max(peak, cur)
        assert peak <= conc
        assert peak == conc  # and the level really ran at C
    assert server.stats.requests == 2 + 18
    kinds = [e.kind for e in sink.events]
    assert kinds.count("level") == 3


async def test_raising_and_lowering_concurrency_live_never_cancels(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=10, spec_tokens=0)
    plan = LoadPlan(levels=(LevelSpec(2),), drain_between_levels=False, max_requests=400)
    runner, sink = make_runner(server.url, plan, max_tokens=15, stay_open=True)
    await runner.client.start()
    task = asyncio.ensure_future(runner.run())
    try:
        await until(lambda: runner.in_flight == 2)
        runner.set_target(6)
        await until(lambda: runner.in_flight == 6)
        assert runner.target == 6 and runner.held  # a user change holds the ramp
        runner.set_target(1)
        n_before = len(sink.records)
        await until(lambda: runner.in_flight == 1 and len(sink.records) >= n_before + 5)
        # lowering the target let the extra requests finish: none was cancelled
        assert all(r.error_kind is not ErrorKind.CANCELLED for r in sink.records)
        runner.set_target(scaled(runner.requested, 2.0))  # the TUI's ']'
        assert runner.requested == 2
        runner.stop("interrupted")
        runner.cancel_in_flight()
        reason = await asyncio.wait_for(task, 10)
    finally:
        await runner.client.close()
    assert reason == "interrupted"
    conc_values = [e.value for e in sink.events if e.kind == "concurrency"]
    assert conc_values[:2] == [6, 1]
    levels = [s.concurrency for s in sink.levels]
    assert levels[:3] == [2, 6, 1]


async def test_pause_stops_new_requests_and_resume_continues(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    plan = LoadPlan(levels=(LevelSpec(3),), drain_between_levels=False, max_requests=500)
    runner, sink = make_runner(server.url, plan, stay_open=True)
    await runner.client.start()
    task = asyncio.ensure_future(runner.run())
    try:
        await until(lambda: len(sink.records) >= 3)
        runner.pause()
        await until(lambda: runner.in_flight == 0)
        started = runner.started
        await asyncio.sleep(0.2)  # a quiet interval in which nothing may start
        assert runner.started == started and runner.state == "paused"
        runner.resume()
        await until(lambda: runner.started > started + 3)
        runner.stop("interrupted")
        runner.cancel_in_flight()
        await asyncio.wait_for(task, 10)
    finally:
        await runner.client.close()
    kinds = [e.kind for e in sink.events]
    assert "pause" in kinds and "resume" in kinds


async def test_next_level_and_hold(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    plan = build_plan((1, 3), requests_per_level=1000, duration_per_level=None, drain=False)
    runner, sink = make_runner(server.url, plan)
    await runner.client.start()
    task = asyncio.ensure_future(runner.run())
    try:
        await until(lambda: runner.started >= 2)
        runner.set_hold(True)
        assert runner.state in ("holding", "ramping")
        runner.next_level()
        await until(lambda: runner.target == 3 and runner.in_flight == 3)
        runner.stop("interrupted")
        runner.cancel_in_flight()
        await asyncio.wait_for(task, 10)
    finally:
        await runner.client.close()
    assert [s.concurrency for s in sink.levels] == [1, 3]
    assert any(e.kind == "hold" and e.value is True for e in sink.events)


async def test_duration_levels_end_on_time(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    plan = build_plan((2, 4), requests_per_level=None, duration_per_level=0.4, drain=True)
    runner, sink = make_runner(server.url, plan, max_tokens=5)
    await runner.client.start()
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(runner.run(), 20)
    finally:
        await runner.client.close()
    took = time.monotonic() - t0
    assert 0.8 <= took < 5
    assert [s.concurrency for s in sink.levels] == [2, 4]
    for s in sink.levels:
        assert 0.35 <= s.wall_s <= 1.0


async def test_open_loop_rate_is_roughly_honoured(sim) -> None:
    server = await sim(ttft_ms=2, itl_ms=2, spec_tokens=0)
    plan = build_plan((50,), requests_per_level=None, duration_per_level=1.0, rate=40.0)
    runner, sink = make_runner(server.url, plan, max_tokens=3)
    await runner.client.start()
    try:
        await asyncio.wait_for(runner.run(), 20)
    finally:
        await runner.client.close()
    n = len(sink.records)
    assert 20 <= n <= 65, n  # Poisson with mean 40 over 1 s


async def test_max_duration_bounds_a_run_whose_requests_stall(sim) -> None:
    # every stream stalls and the stall timeout is long: only --max-duration can end the run
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, stall_rate=1.0)
    plan = build_plan((3,), requests_per_level=100, duration_per_level=None, drain=True, max_duration_s=1.0)
    sink = Sink()
    client = make_client(server.url, max_tokens=50, ignore_eos=True, stall_timeout_s=60)
    runner = Runner(client, PromptSource(["x"]), plan, on_record=sink.records.append, on_level=sink.levels.append)
    await client.start()
    t0 = time.monotonic()
    try:
        reason = await asyncio.wait_for(runner.run(), 20)
    finally:
        await client.close()
    assert time.monotonic() - t0 < 3.0
    assert reason == "completed"
    assert [r.error_kind for r in sink.records] == [ErrorKind.CANCELLED] * 3


async def test_max_duration_bounds_a_paused_run(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    plan = build_plan((2,), requests_per_level=10_000, duration_per_level=None, drain=False, max_duration_s=0.8)
    runner, sink = make_runner(server.url, plan)
    await runner.client.start()
    t0 = time.monotonic()
    try:
        task = asyncio.ensure_future(runner.run())
        await until(lambda: runner.started >= 2)
        runner.pause()
        await asyncio.wait_for(task, 20)
    finally:
        await runner.client.close()
    assert time.monotonic() - t0 < 3.0


async def test_many_stale_connections_never_fail_a_request(sim) -> None:
    # a server closing after every stream leaves up to C dead connections in the pool at once
    server = await sim(ttft_ms=1, itl_ms=1, spec_tokens=0, close_after_stream=True)
    plan = build_plan((16,), requests_per_level=480, duration_per_level=None)
    runner, sink = make_runner(server.url, plan, max_tokens=3)
    await runner.client.start()
    try:
        await asyncio.wait_for(runner.run(), 60)
    finally:
        await runner.client.close()
    failed = [r.error_detail for r in sink.records if not r.ok]
    assert not failed, failed[:3]
    assert server.stats.requests == 480  # retries are not new requests


async def test_level_figures_follow_the_pinned_server(sim) -> None:
    """The level's figures come from its requests, and those from the server's pinned timing.

    The client can only add time (loopback, a busy event loop), so each request is checked against
    the server's schedule from below, whatever the load: a wrong start gives times below it. The
    schedule's deadlines are absolute (a token late on a busy machine is followed by ones that
    catch up), so per-token figures of a delayed request may read below 10 ms and are checked by
    their definitions instead (a wrong divisor or unit fails those). How close the figures come to
    the server's on a quiet machine is benchmarks/timing_truth.py's job.
    """
    # 4 streams x 3 rounds of 30 tokens: TTFT 40 ms then 29 steps of 10 ms = 330 ms per request
    server = await sim(ttft_ms=40, itl_ms=10, spec_tokens=0)
    plan = build_plan((4,), requests_per_level=12, duration_per_level=None, drain=True)
    runner, sink = make_runner(server.url, plan, max_tokens=30)
    await runner.client.start()
    try:
        await asyncio.wait_for(runner.run(), 30)
    finally:
        await runner.client.close()
    (lv,) = sink.levels
    recs = sink.records
    assert lv.ok == 12 and lv.output_tokens == 360
    e2e_s = [r.e2e_ns / 1e9 for r in recs]
    wall_s = (max(r.end_ns for r in recs) - min(r.start_ns for r in recs)) / 1e9
    assert lv.per_request_tok_s == pytest.approx(statistics.mean(30 / e for e in e2e_s), rel=1e-3)
    assert lv.throughput_tok_s == pytest.approx(360 / wall_s, rel=1e-3)
    assert lv.ttft_ms_p50 == pytest.approx(statistics.median(r.ttft_ns / 1e6 for r in recs), abs=0.001)
    assert lv.tpot_ms_p50 == pytest.approx(statistics.median(r.tpot_ns / 1e6 for r in recs), abs=0.001)
    # never before the server's schedule: the first token 40 ms after the request was sent, the last
    # 330 ms; a busy machine may only make them later (and nothing outlasts the level)
    assert all(r.ttft_ns >= 40e6 * 0.99 for r in recs)
    assert all(0.330 * 0.99 <= e <= wall_s for e in e2e_s)
    # TPOT: what followed the first token over the 29 steps after it
    assert all(r.tpot_ns == pytest.approx((r.e2e_ns - r.ttft_ns) / 29) for r in recs)
    # ITL: the median of the per-token gaps, in ms (within the histogram's 0.5 % bins)
    # one gap per token after the first burst: a busy loop may read the second token with the first
    itl = sorted(x for r in recs for x in r.itl_per_token_ns())
    after_first = [sum(o != r.chunk_offsets_ns[0] for o in r.chunk_offsets_ns) for r in recs]
    assert len(itl) == sum(after_first) and 12 * 29 * 0.9 <= len(itl) <= 12 * 29
    rank = (len(itl) - 1) / 2
    low, high = itl[int(rank)] / 1e6, itl[-int(-rank)] / 1e6
    assert lv.itl_ms_p50 is not None and low * 0.99 <= lv.itl_ms_p50 <= high * 1.01


class ScriptedSource:
    """A level source that plays a fixed list of levels and asks for ``extra`` more requests once."""

    def __init__(self, specs: list[LevelSpec], extra: dict[int, int]) -> None:
        self.specs = list(specs)
        self.extra = dict(extra)
        self.asked: list[tuple[int, int]] = []
        self.indices: list[int] = []

    async def next_level(self, level_index: int) -> LevelSpec | None:
        if not self.specs:
            return None
        self.indices.append(level_index)
        return self.specs.pop(0)

    async def more_requests(self, level_index: int, started: int) -> int:
        await asyncio.sleep(0)  # a source may await (think in a thread) while requests stream on
        self.asked.append((level_index, started))
        return self.extra.pop(level_index, 0)


async def test_a_level_source_decides_levels_extends_them_and_hands_back_to_the_plan(sim) -> None:
    server = await sim(ttft_ms=2, itl_ms=2, spec_tokens=0)
    # the plan's own level (C=1, 3 requests) runs after the source has no more levels
    plan = build_plan((1,), requests_per_level=3, duration_per_level=None, drain=False)
    source = ScriptedSource([LevelSpec(2, 6, drain=True), LevelSpec(8, 10, rate=200.0, drain=True)], {0: 4})
    runner, sink = make_runner(server.url, plan, max_tokens=3)
    runner.source = source
    await runner.client.start()
    try:
        reason = await asyncio.wait_for(runner.run(), 30)
    finally:
        await runner.client.close()
    assert reason == "completed"
    assert source.indices == [0, 1]
    # level 0 was asked at its quota of 6 and got 4 more; then asked again at 10 and ended
    assert source.asked[:2] == [(0, 6), (0, 10)]
    assert [(s.level_index, s.concurrency, s.requests) for s in sink.levels] == [(0, 2, 10), (1, 8, 10), (2, 1, 3)]
    by_level = {i: [r for r in sink.records if r.level_index == i] for i in range(3)}
    # the source's levels drain although the plan does not
    assert max(r.end_ns for r in by_level[0]) <= min(r.start_ns for r in by_level[1])
    assert max(r.end_ns for r in by_level[1]) <= min(r.start_ns for r in by_level[2])
    level_events = [e.value for e in sink.events if e.kind == "level"]
    assert level_events[0]["probe"] is True and level_events[0]["manual"] is False
    assert level_events[1]["rate"] == 200.0
    assert "probe" not in level_events[2]


async def test_setting_a_source_ends_the_current_level(sim) -> None:
    server = await sim(ttft_ms=2, itl_ms=5, spec_tokens=0)
    plan = build_plan((2,), requests_per_level=10_000, duration_per_level=None, drain=False, max_requests=2000)
    runner, sink = make_runner(server.url, plan, max_tokens=5, stay_open=True)
    await runner.client.start()
    task = asyncio.ensure_future(runner.run())
    try:
        await until(lambda: runner.started >= 4)
        runner.set_hold(True)
        source = ScriptedSource([LevelSpec(3, 6, drain=True)], {})
        runner.set_source(source)
        assert not runner.held
        await until(lambda: len(sink.levels) >= 2)
        await until(lambda: runner.source is None and runner.state == "finished")
        runner.stop("interrupted")
        await asyncio.wait_for(task, 10)
    finally:
        await runner.client.close()
    assert [s.concurrency for s in sink.levels][:2] == [2, 3]
    assert sink.levels[1].requests == 6


@pytest.mark.slow
async def test_ramp_up_spreads_the_connections_the_server_sees(sim, tmp_path) -> None:
    """``--ramp-up 1`` at C=10: the runner starts the k-th request no sooner than (k-1)/10 s into the
    level (exactly, from the record), and the server (behind a proxy that notes each accepted
    connection) sees the ten opens spread over most of the second, not in one burst. Each request
    outlasts the ramp, so every start is a new connection."""
    from specload.record.reader import read_record
    from specload.session import Session
    from tests.conftest import make_config

    server = await sim(ttft_ms=5, itl_ms=20, spec_tokens=0)
    opens: list[float] = []
    port = int(server.url.rsplit(":", 1)[1])

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()

    async def accepted(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        opens.append(time.monotonic())
        ur, uw = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    proxy = await asyncio.start_server(accepted, "127.0.0.1", 0)
    try:
        rec = tmp_path / "ramp.jsonl"
        cfg = make_config(f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}", concurrency=(10,),
                          requests_per_level=10, ramp_up_s=1.0, max_tokens=100, health=False, metrics_url="off",
                          gpu_metrics="off", path=str(rec))
        result = await asyncio.wait_for(Session(cfg).run(), 60)
    finally:
        proxy.close()
    assert result.reason == "completed"
    data = read_record(str(rec))
    level_t = next(e["t_s"] for e in data.events if e["kind"] == "level")
    starts = sorted(r["start_s"] for r in data.requests)
    assert len(starts) == 10 and all(r["ok"] for r in data.requests)
    for k, t in enumerate(starts):
        assert t - level_t >= 0.1 * k - 1e-3, (k, t - level_t)
    load = opens[-10:]  # the opens before them measured the prompt lengths
    assert len(opens) >= 10
    assert load[-1] - load[0] >= 0.5  # 0.9 s apart unless the first open was itself held up
