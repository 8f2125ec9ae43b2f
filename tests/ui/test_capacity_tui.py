"""The capacity search in the dashboard, against the real simulator: f starts it from the current load,
the probes, bracket and result show on the load panel and the chart, the objective on the latency
rows, f stops it, b holds the load at the best point. What the search finds is tested in virtual time
(tests/integration/test_capacity_virtual.py); here the keys and the screen."""

from __future__ import annotations

import pytest

from specload.record.reader import read_record
from specload.ui.app import create_app
from specload.ui.widgets.levels import KneeChart, LevelTable, chart_title
from specload.ui.widgets.metrics import LimitSparkline
from tests.ui.conftest import tui_config, wait_for


def _text(app, selector: str) -> str:  # the app
    return str(app.query_one(selector).render())


@pytest.mark.slow
async def test_f_runs_a_search_that_shows_on_screen_and_b_holds_its_best_point(sim, tmp_path) -> None:
    # 4 slots, pinned timing: throughput stops growing past C=4
    server = await sim(ttft_ms=5, itl_ms=4, spec_tokens=0, max_batch=4)
    record = tmp_path / "tui-search.jsonl"
    cfg = tui_config(server.url, "-c", "2", "-d", "60", "--max-tokens", "10", "--ignore-eos",
                     "--slo", "tpot_p50<=1s", "--record", str(record), "--max-duration", "120")
    app = create_app(cfg)
    async with app.run_test(size=(160, 48)) as pilot:
        session = app.source.session
        await wait_for(pilot, lambda: session.runner is not None and session.runner.in_flight > 0, "the load")
        # the objective is drawn on the TPOT row: its sparkline has the limit, its text the mark
        assert app.query_one("#lat-tpot").query_one(LimitSparkline).limit == 1000.0
        assert app.query_one("#lat-ttft").query_one(LimitSparkline).limit is None
        await wait_for(pilot, lambda: "≤1s" in _text(app, "#lat-tpot .metric-value"), "the objective on TPOT")

        await pilot.press("f")
        await wait_for(pilot, lambda: session.capacity.searching, "the search to start")
        await wait_for(pilot, lambda: "probe" in _text(app, "#load-level"), "the probe on the load panel")
        await wait_for(pilot, lambda: app.search is not None and app.search.bracket[1] is not None,
                       "a bracket", timeout=60)
        assert chart_title(app.search).startswith("search: ")
        await wait_for(pilot, lambda: bool(session.capacity.results), "the search to end", timeout=90)
        result = session.capacity.results[-1]
        assert result.best is not None, result.message
        await wait_for(pilot, lambda: app.search is not None and app.search.result is not None, "the result sampled")
        assert chart_title(app.search).startswith(f"best C={result.best.value:g}")
        chart = app.query_one(KneeChart)
        assert chart.search is app.search
        # the level table grew the goodput columns, every probe a row (the last probe's level reaches
        # the table with a later frame than the search's result can: the engine runs on its own thread)
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: table._goodput and table.row_count >= len(result.probes) + 1,
                       "a table row for every probe")

        await pilot.press("b")
        await wait_for(pilot, lambda: session.runner.held and session.runner.target == int(result.best.value),
                       "the load held at the best point")
        await wait_for(pilot, lambda: session.runner.in_flight > 0, "requests at the best point")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit", timeout=30)
    data = read_record(str(record))
    phases = [e["value"]["phase"] for e in data.events if e.get("kind") == "search"]
    assert phases[0] == "start" and "result" in phases


async def test_f_again_stops_the_search_with_what_it_confirmed(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=20, spec_tokens=0, max_batch=64)
    cfg = tui_config(server.url, "-c", "2", "-d", "60", "--max-tokens", "10", "--ignore-eos", "--max-duration", "120")
    app = create_app(cfg)
    async with app.run_test(size=(80, 24)) as pilot:
        session = app.source.session
        await wait_for(pilot, lambda: session.runner is not None and session.runner.in_flight > 0, "the load")
        await pilot.press("f")
        await wait_for(pilot, lambda: session.capacity.searching, "the search to start")
        await wait_for(pilot, lambda: len(session.capacity.driver.search.probes) >= 1, "a first probe", timeout=60)
        await pilot.press("f")
        await wait_for(pilot, lambda: not session.capacity.searching, "the search to stop")
        result = session.capacity.results[-1]
        assert result.reason == "stopped by the user" and result.best is not None
        assert session.runner.source is None  # the levels are the user's again
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit", timeout=30)


def test_chart_title_and_ticks_say_where_the_search_is() -> None:
    from specload.engine.capacity import SearchView
    from specload.engine.search import ProbePlan
    from specload.ui.widgets.levels import tick_loads
    from specload.ui.widgets.load import probe_text

    plan = ProbePlan(5, 12.0, 48, 192, "bisect", (8.0, 16.0))
    running = SearchView("concurrency", "bisect", (8.0, 16.0), plan, 48, (), None, "tpot_p50<=45ms")
    assert chart_title(running) == "search: bisect C=8..C=16"
    assert probe_text(running) == "probe 5 bisect C=12 · [8..16]"
    first = SearchView("rate", "grow", (None, None), ProbePlan(1, 4.0, 44, 176, "grow", (None, None)), 44, (),
                       None, None)
    assert chart_title(first) == "search: probing 4/s" and probe_text(first) == "probe 1 grow 4/s"
    assert chart_title(None) == "throughput vs concurrency"
    # a bisection's close loads are not all labelled: the ends and the powers of two are
    assert tick_loads([1, 2, 4, 8, 12, 13, 14, 16]) == [1, 2, 4, 8, 16]
    assert tick_loads([2, 4, 8]) == [2, 4, 8]
