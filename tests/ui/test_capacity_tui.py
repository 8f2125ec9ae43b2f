"""The capacity search in the dashboard, against the real simulator: f starts it from the current load,
the probes, bracket and result show on the load panel and the chart, the objective on the latency
rows, f stops it, b holds the load at the best point. What the search finds is tested in virtual time
(tests/integration/test_capacity_virtual.py); here the keys and the screen."""

from __future__ import annotations

import pytest

from specload.record.reader import read_record
from specload.ui.widgets.levels import GOODPUT_COLUMNS, KneeChart, LevelTable, chart_title
from specload.ui.widgets.metrics import LimitSparkline
from tests.ui.conftest import live_app, load_running, quit_app, runner, wait_for

# how long a search may take: the run's own bound (--max-duration 120); a busy 2-core machine (load 10)
# took over 60 s to the search's first bracket
SEARCH_S = 110.0
# the search is what is under test, not the server watch: on a busy machine /health timed out, the
# server counted down and the search ended void ("the server went down")
NO_WATCH = ("--no-health", "--metrics-url", "off")


def _text(app, selector: str) -> str:  # the app
    return str(app.query_one(selector).render())


@pytest.mark.slow
@pytest.mark.timeout(300)  # the run's own bound is 120 s; each wait below is bounded; at load 17 it took over 120 s
async def test_f_runs_a_search_that_shows_on_screen_and_b_holds_its_best_point(sim, tmp_path) -> None:
    # 4 slots, pinned timing: past C=4 requests queue, so the TTFT objective fails from C=16 (117 ms
    # measured) and brackets the search there, whatever the client's noise (without it the search
    # went on to C=32 and 64, measuring only the client: 12 probes, 21 s of search at load 10, past
    # 110 s at load 15)
    server = await sim(ttft_ms=5, itl_ms=4, spec_tokens=0, max_batch=4)
    record = tmp_path / "tui-search.jsonl"
    app = live_app(server.url, "-c", "2", "-d", "60", "--max-tokens", "10", "--ignore-eos",
                   "--slo", "tpot_p50<=1s,ttft_p50<=100ms", "--record", str(record), "--max-duration", "120",
                   *NO_WATCH)
    async with app.run_test(size=(160, 48)) as pilot:
        await load_running(pilot, app)
        # the objectives are drawn on their rows: the sparkline has the limit, the text the mark
        assert app.query_one("#lat-tpot").query_one(LimitSparkline).limit == 1000.0
        assert app.query_one("#lat-ttft").query_one(LimitSparkline).limit == 100.0
        assert app.query_one("#lat-e2e").query_one(LimitSparkline).limit is None
        await wait_for(pilot, lambda: "≤1s" in _text(app, "#lat-tpot .metric-value"), "the objective on TPOT")

        await pilot.press("f")
        await wait_for(pilot, lambda: app.source.frame().searching, "the search to start")
        await wait_for(pilot, lambda: "probe" in _text(app, "#load-level"), "the probe on the load panel")
        # a bracket (or already the end: a probe the client could not measure is measured again)
        await wait_for(pilot, lambda: app.search is not None and (app.search.bracket[1] is not None
                                                                  or app.search.result is not None),
                       "a bracket", timeout=SEARCH_S)
        if app.search.result is None:
            assert chart_title(app.search).startswith("search: ")
        await wait_for(pilot, lambda: app.search is not None and app.search.result is not None, "the search to end",
                       timeout=SEARCH_S)
        result = app.search.result
        assert result is not None
        if result.best is None and any(p.client == "starved" for p in (*result.probes, *result.excluded)):
            # the product's answer on a machine too busy to measure (said in its message); the keys
            # below need a best point, which only a client that could measure finds
            pytest.skip(f"the client was starved on this busy machine: {result.message}")
        assert result.best is not None, result
        assert not app.source.frame().searching
        assert chart_title(app.search).startswith(f"best C={result.best.value:g}")
        chart = app.query_one(KneeChart)
        assert chart.search is app.search
        # the level table grew the goodput columns, every probe a row (the last probe's level reaches
        # the table with a later frame than the search's result can: the engine runs in its own process)
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: set(GOODPUT_COLUMNS) <= set(table.columns_shown)
                       and table.row_count >= len(result.probes) + 1,
                       "a table row for every probe")

        await pilot.press("b")
        await wait_for(pilot, lambda: runner(app).held and runner(app).target == int(result.best.value),
                       "the load held at the best point", timeout=30)
        await wait_for(pilot, lambda: runner(app).in_flight > 0, "requests at the best point", timeout=30)
        await quit_app(pilot, app)
    data = read_record(str(record))
    phases = [e["value"]["phase"] for e in data.events if e.get("kind") == "search"]
    assert phases[0] == "start" and "result" in phases


async def test_f_again_stops_the_search_with_what_it_confirmed(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=20, spec_tokens=0, max_batch=64)
    app = live_app(server.url, "-c", "2", "-d", "60", "--max-tokens", "10", "--ignore-eos", "--max-duration", "120",
                   *NO_WATCH)
    async with app.run_test(size=(80, 24)) as pilot:
        await load_running(pilot, app)
        await pilot.press("f")
        await wait_for(pilot, lambda: app.source.frame().searching, "the search to start")
        await wait_for(pilot, lambda: (sv := app.source.frame().search) is not None and len(sv.probes) >= 1,
                       "a first probe", timeout=60)
        await pilot.press("f")
        await wait_for(pilot, lambda: not app.source.frame().searching, "the search to stop")
        search = app.source.frame().search
        result = search.result if search is not None else None
        assert result is not None and result.reason == "stopped by the user" and result.best is not None
        # the levels are the user's again: a key sets a held level of its own, no probe follows
        app.key_settle_s = 0.05
        want = runner(app).target + 1
        await pilot.press("up")
        await wait_for(pilot, lambda: runner(app).target == want and not runner(app).sourced, f"C={want} by hand")
        assert runner(app).held and not app.source.frame().searching
        await quit_app(pilot, app)


def test_chart_title_and_ticks_say_where_the_search_is() -> None:
    from specload.engine.capacity import SearchView
    from specload.engine.search import ProbePlan
    from specload.ui.widgets.levels import tick_loads
    from specload.ui.widgets.load import probe_text

    plan = ProbePlan(5, 12.0, 48, 192, "bisect", (8.0, 16.0))
    running = SearchView("concurrency", "bisect", (8.0, 16.0), plan, (), None, "tpot_p50<=45ms")
    assert chart_title(running) == "search: bisect C=8..C=16"
    assert probe_text(running) == "probe 5 bisect C=12 · [8..16]"
    first = SearchView("rate", "grow", (None, None), ProbePlan(1, 4.0, 44, 176, "grow", (None, None)), (), None,
                       None)
    assert chart_title(first) == "search: probing 4/s" and probe_text(first) == "probe 1 grow 4/s"
    assert chart_title(None) == "throughput vs concurrency"
    # a bisection's close loads are not all labelled: the ends and the powers of two are
    assert tick_loads([1, 2, 4, 8, 12, 13, 14, 16]) == [1, 2, 4, 8, 16]
    assert tick_loads([2, 4, 8]) == [2, 4, 8]
