"""The UI cannot delay the load (issue 11): the live session runs on an event loop of its own.

A UI handler that blocks the app's loop for half a second (what a slow repaint, a resize or a
modal did for 46-122 ms, on a loop the load shared) must not show up in what the engine measures:
its own loop-lag samples stay small and requests keep finishing while the UI is blocked. Before the
engine had a thread of its own, the block was the engine's too: its loop lag read >= 500 ms and no
request finished during it.
"""

from __future__ import annotations

import threading
import time

from specload.record.reader import read_record
from specload.ui.app import create_app
from tests.ui.conftest import tui_config, wait_for

BLOCK_S = 0.5
# generous: the engine's loop normally lags < 2 ms; a busy 2-core CI machine may add scheduling
# delay, but never the UI's whole half second
ENGINE_LAG_BOUND_MS = 100.0


async def test_a_blocked_ui_loop_does_not_stall_the_engine(tmp_path) -> None:
    # the built-in simulator, a process of its own: a simulator on the test's loop (the app's) would
    # stop answering while that loop is held, and no request could finish, engine thread or not
    record = tmp_path / "run.jsonl"
    cfg = tui_config("-c", "4", "-d", "60", "--max-tokens", "8", "--record", str(record),
                     "--sim-args", "--ttft-ms 5 --itl-ms 5 --spec-tokens 0 --quiet")
    app = create_app(cfg)
    blocked: list[tuple[int, int]] = []  # the block's (start, end) on the session's clock
    async with app.run_test(size=(120, 40)) as pilot:
        session = app.source.session
        clock = session.clock
        # block once the load runs and the loop-lag monitor has reported its first interval (which
        # holds the session's start: the collection before the load, first calls)
        await wait_for(pilot, lambda: (rs := app.source.frame().runner) is not None and rs.started >= 8
                       and session.watch is not None and session.watch.load.last is not None, "the load to run")

        def block_the_ui() -> None:  # a UI handler that holds the app's loop (and sleeps, GIL released)
            assert threading.current_thread() is threading.main_thread()
            t0 = clock.now_ns()
            time.sleep(BLOCK_S)
            blocked.append((t0, clock.now_ns()))

        app.call_later(block_the_ui)
        await wait_for(pilot, lambda: bool(blocked), "the UI's handler to have run")
        # the loop-lag interval that covers the block has been reported once the next one starts
        end_of_block = blocked[0][1]
        await wait_for(pilot, lambda: session.watch is not None and session.watch.load.last is not None
                       and session.watch.load.last.t_ns > end_of_block + 1.2e9, "the next loop-lag sample",
                       timeout=15)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after q", timeout=30)

    t_block0, t_block1 = blocked[0]
    assert t_block1 - t_block0 >= BLOCK_S * 1e9  # the UI's loop really was held that long
    data = read_record(str(record))
    assert data.end is not None
    t0 = session.t0_ns
    # the engine's per-second samples (worst wake-up delay of its loop) over the block and after it
    during = [c for c in data.clients if c["t_s"] * 1e9 + t0 >= t_block0]
    assert during, "no loop-lag sample was recorded after the block"
    worst = max(c["loop_lag_ms"] for c in during[:2])
    lags = [(round(c["t_s"] - (t_block0 - t0) / 1e9, 2), c["loop_lag_ms"]) for c in data.clients]
    assert worst < ENGINE_LAG_BOUND_MS, f"the engine's loop lagged {worst} ms while the UI was blocked: {lags}"
    # and its streams kept being read: requests finished while the UI's loop was held
    finished = [r for r in data.requests if t_block0 < r["end_s"] * 1e9 + t0 < t_block1]
    assert len(finished) >= 4, f"only {len(finished)} requests finished while the UI was blocked"


async def test_an_app_closed_without_a_quit_still_ends_the_run_and_its_thread(sim, tmp_path) -> None:
    # the app goes away under the run (a test's end, the app's own error): the run is quit as 'q'
    # quits it, on the engine's loop, and the app's close waits for its teardown (bounded)
    server = await sim(ttft_ms=5, itl_ms=50, spec_tokens=0)
    record = tmp_path / "run.jsonl"
    cfg = tui_config(server.url, "-c", "4", "-d", "60", "--max-tokens", "50", "--record", str(record))
    app = create_app(cfg)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: (rs := app.source.frame().runner) is not None and rs.in_flight > 0,
                       "the load to run")
        engine = app.source.engine
        assert engine.loop is not None and engine.loop.is_running()
    engine.join(10)
    assert not engine._thread.is_alive()
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "interrupted"
    assert any(r["error"] and r["error"]["kind"] == "cancelled" for r in data.requests)  # in flight at the close
