"""Keys that arrive together, as they do over ssh, with auto-repeat or while the app is busy.

Every key and key sequence the dashboard knows is delivered in one burst (``burst``: all events
posted before the app handles the first), and the outcome must be what the same keys typed slowly
give. Two regressions started this file: two tab keys in one read made the compact dashboard's
tab strip and panels reset each other forever (100 % CPU, keys ignored), and the ``c`` dialog lost
the digits typed before it had mounted (``c 7 enter`` gave ``'' is not a concurrency``).
"""

from __future__ import annotations

import pytest

from specload.record.reader import read_record
from specload.ui.app import create_app
from specload.ui.layout import DETAIL_PANELS, Dashboard
from specload.ui.screens import ConcurrencyScreen, HelpScreen
from tests.ui.conftest import burst, live_app, load_running, notices, runner, wait_for
from tests.ui.fixed_data import mid_run_source


async def _settled_panel(pilot, app) -> str:
    """The panel shown once the app has handled everything queued; fails if it never settles."""
    dash = app.query_one(Dashboard)
    calls = 0
    original = dash.show_panel

    def counting(name: str) -> None:
        nonlocal calls
        calls += 1
        original(name)

    dash.show_panel = counting  # type: ignore[method-assign]
    await pilot.pause(0.3)
    before = calls
    await pilot.pause(0.3)
    assert calls == before, f"the panels keep switching by themselves ({calls - before} switches in 0.3 s)"
    return dash.shown_panel


@pytest.mark.slow
async def test_tab_keys_in_one_burst_settle_on_the_right_panel() -> None:
    n = len(DETAIL_PANELS)
    for keys, steps in ((("right", "right"), 2), (("left", "left"), -2), (("right", "left"), 0),
                        (("right",) * 7, 7), (("left", "right", "right"), 1)):
        app = create_app(source=mid_run_source())
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            assert app.query_one(Dashboard).compact
            burst(app, *keys)
            shown = await _settled_panel(pilot, app)
            assert shown == DETAIL_PANELS[steps % n], keys
            assert app.query_one("#panel-tabs").active == f"tab-{shown}"


async def test_every_dashboard_key_in_bursts(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=100, spec_tokens=0)
    record = tmp_path / "keys.jsonl"
    app = live_app(server.url, "-c", "2,4", "-d", "60", "--max-tokens", "8", "--record", str(record))
    said = notices(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await load_running(pilot, app)
        # the concurrency dialog's digits typed before it had mounted
        for keys, want in ((("c", "7", "enter"), 7), (("c", "1", "2", "enter"), 12),
                           (("c", "backspace", "3", "enter"), 3)):
            burst(app, *keys)
            await wait_for(pilot, lambda w=want: not isinstance(app.screen, ConcurrencyScreen)
                           and runner(app).target == w, f"C={want} after {' '.join(keys)}")
            assert not [n for n in said if "not a concurrency" in n], keys
        app.key_settle_s = 0.05
        steps: list[tuple[tuple[str, ...], object]] = [
            (("up", "up", "plus"), lambda: runner(app).target == 6),
            (("down", "minus"), lambda: runner(app).target == 4),
            (("right_square_bracket", "right_square_bracket"), lambda: runner(app).target == 16),
            (("left_square_bracket", "down"), lambda: runner(app).target == 7),
            # a dialog's result is applied before the key after enter is looked at
            (("c", "1", "2", "enter", "up"), lambda: runner(app).target == 13),
            (("space", "space", "space"), lambda: runner(app).paused),
            (("space",), lambda: not runner(app).paused),
            (("m", "n", "o", "t", "e", "enter"), lambda: "note" in record.read_text()),
            # keys a dialog takes as text are not dashboard keys: q, c, h and n typed into the note
            (("m", "q", "c", "h", "n", "enter"), lambda: '"qchn"' in record.read_text()),
            (("question_mark", "escape", "h"), lambda: not runner(app).held),
            (("question_mark", "q"), lambda: not isinstance(app.screen, HelpScreen)),
            (("c", "left", "left", "9", "escape", "n"), lambda: runner(app).level_number >= 1),
        ]
        for keys, done in steps:
            burst(app, *keys)
            await wait_for(pilot, done, " ".join(keys))
            await wait_for(pilot, lambda: len(app.screen_stack) == 1 and app.pending_target is None,
                           f"the dashboard back after {' '.join(keys)}")
        assert app.return_code is None  # no q reached the dashboard from a dialog
        burst(app, "c", "ctrl+c")  # ctrl+c quits from a dialog too, as q does
        # the clean quit's bound, as quit_app's: cancelling and closing the engine process take long at load 12
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit after ctrl+c", timeout=30)
    markers = [e["value"] for e in read_record(str(record)).events if e["kind"] == "marker"]
    assert markers == ["note", "qchn"]
