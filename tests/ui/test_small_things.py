"""The smaller points of issue 11, each as a user met it: texts cut, a help line naming a palette entry
that is not there, a key that ended a load without a word, sparklines that made a wobble a cliff."""

from __future__ import annotations

import math
import re

from specload.engine.runner import MAX_CONCURRENCY
from specload.ui.app import create_app
from specload.ui.screens import ConcurrencyScreen, HelpScreen
from tests.ui.conftest import notices, screen_text, wait_for
from tests.ui.fixed_data import mid_run_source


def _flat(text: str) -> str:
    """The screen's text with box drawing and line breaks as single spaces (a wrapped line reads on)."""
    return re.sub(r"[\s│┃▌▐█]+", " ", text)


async def test_the_concurrency_dialog_shows_its_limit_and_whole_error() -> None:
    app = create_app(source=mid_run_source())
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(ConcurrencyScreen(4))
        await pilot.pause()
        assert f"1 to {MAX_CONCURRENCY}" in screen_text(app)  # before anything is typed
        for key in ("backspace", "a", "b", "c", "enter"):
            await pilot.press(key)
        whole = f"'abc' is not a concurrency: type a whole number from 1 to {MAX_CONCURRENCY}"
        # wrapped in the dialog, whole (it was cut at 'fro')
        await wait_for(pilot, lambda: whole in _flat(screen_text(app)), "the whole error in the dialog")


async def test_a_dialog_is_not_covered_by_information_toasts() -> None:
    # at 80x24 the start-up toast covered the right half of the 'c' dialog for the run's first
    # seconds: information toasts wait behind a dialog and are back when it closes; errors show over it
    app = create_app(source=mid_run_source())
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.notify("\n".join(f"start-up note {i} " + "x" * 12 for i in range(8)), timeout=60)
        await wait_for(pilot, lambda: "start-up note 0" in screen_text(app), "the toast on the dashboard")
        await app.push_screen(ConcurrencyScreen(4))
        app.notify("the server crashed", severity="error", timeout=60)
        # the dialog's toasts are drawn together: once the error shows, the start-up toast would too
        await wait_for(pilot, lambda: "the server crashed" in screen_text(app), "an error toast over the dialog")
        text = screen_text(app)
        assert f"1 to {MAX_CONCURRENCY} · enter: apply · escape: cancel" in text and "start-up note" not in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: "start-up note 0" in screen_text(app), "the toast back on the dashboard")


async def test_help_names_the_palette_entry_as_it_is() -> None:
    app = create_app(source=mid_run_source())
    async with app.run_test(size=(100, 40)) as pilot:
        names = [c.title for c in app.get_system_commands(app.screen)]
        await app.push_screen(HelpScreen())
        await pilot.pause()
        text = screen_text(app)
        quoted = re.findall(r"'([^']+)' entry", text)
        assert quoted and all(q in names for q in quoted), (quoted, names)


async def test_the_help_box_fits_its_keys_and_keeps_its_hint_on_a_small_screen() -> None:
    from textual.containers import Vertical

    from specload.ui.screens import KEYS_HELP

    for size in ((80, 24), (160, 48)):
        app = create_app(source=mid_run_source())
        async with app.run_test(size=size) as pilot:
            await app.push_screen(HelpScreen())
            await pilot.pause()
            assert "escape or ?: close" in screen_text(app), size  # the hint is never scrolled away
            box = app.screen.query_one(Vertical)
            # as tall as its keys (plus title, hint, padding and border), not a box of empty rows
            assert box.outer_size.height <= len(KEYS_HELP) + 4 + 10, (size, box.outer_size)


async def test_h_at_the_end_of_the_plan_says_so(sim, tmp_path) -> None:
    from tests.ui.conftest import live_app, notices, runner

    server = await sim(ttft_ms=5, itl_ms=20, spec_tokens=0)
    app = live_app(server.url, "-c", "1", "-n", "2", "--max-tokens", "8", "--record", str(tmp_path / "h.jsonl"))
    said = notices(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: (rs := app.source.frame().runner) is not None and rs.state == "finished",
                       "the ramp to finish", timeout=30)
        await pilot.press("h")
        assert not runner(app).held
        assert any("nothing to hold" in n for n in said)
        # a level set by hand after the ramp is held; h releases it, and the load ends: said so
        await pilot.press("c", "backspace", "3", "enter")
        await wait_for(pilot, lambda: runner(app).target == 3 and runner(app).in_flight > 0, "C=3 running")
        await pilot.press("h")
        await wait_for(pilot, lambda: runner(app).state == "finished", "the load to end", timeout=20)
        assert any("the load stops here" in n for n in said)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, "the app to exit", timeout=30)


async def test_a_small_wobble_of_throughput_is_not_drawn_as_a_cliff() -> None:
    # Textual's sparkline scales from the series' lowest value: 98 vs 100 tok/s drew ▁ vs █
    import io

    from rich.console import Console
    from textual.app import App

    from specload.ui.widgets.metrics import LimitSparkline

    class One(App[None]):
        def compose(self):
            yield LimitSparkline([100.0, 98.0, 100.0, 99.0], summary_function=max)

    app = One()
    async with app.run_test(size=(4, 1)) as pilot:
        await pilot.pause()
        spark = app.query_one(LimitSparkline)
        out = io.StringIO()
        Console(file=out, width=4, color_system=None).print(spark.render(), end="")
    bars = out.getvalue()
    assert bars == "████", bars  # on a scale from zero, 98 and 99 are (nearly) full bars


def _bars(data: list[float], width: int, band: bool = True, limit: float | None = None) -> str:
    import io

    from rich.console import Console
    from rich.style import Style

    from specload.ui.widgets.metrics import _LimitBars

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(
        _LimitBars(data, width, limit, Style(), Style(), band), end="")
    return out.getvalue()


def test_a_steady_latency_is_a_low_line_with_its_scale_not_a_wall() -> None:
    # from zero, a steady 26-28 ms TTFT filled the row: a solid wall that hid a doubling
    steady = [26.0, 27.0, 28.0, 26.5] * 10
    row = _bars(steady, 40)
    assert row.endswith(" 26–28"), row  # the band's min–max (ms, as the row's numbers) at the row's end
    bars = row[: -len(" 26–28")]
    assert len(bars) == 34 and set(bars) <= set("▁▂▃▄"), bars  # low, not full
    spiked = _bars([26.0] * 30 + [52.0] * 10, 40)
    assert spiked.startswith("▁" * 10) and "█" in spiked and spiked.endswith(" 26–52"), spiked
    flat = _bars([8.75] * 40, 40)  # a steady row once, not "8.8–8.8" beside its "p50 8.75 ms"
    assert flat.endswith("▁ 8.8") and "–" not in flat, flat
    narrow = _bars(steady, 10)
    assert len(narrow) == 10 and "–" not in narrow, narrow  # no room for the scale: the bars alone
    # an objective keeps its scale from zero (the limit at a fixed height), and no band is drawn
    assert "–" not in _bars(steady, 40, limit=100.0)


async def test_long_server_log_lines_wrap_instead_of_being_cut() -> None:
    from specload.sources.static import StaticSource
    from tests.ui.fixed_data import T0, mid_run_snapshot

    long = "AttributeError: " + "x" * 150 + " THE-END"
    source = StaticSource(mid_run_snapshot(True), t0_ns=T0, log_lines=["short line", long])
    app = create_app(source=source)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: "short line" in screen_text(app), "the log on screen")
        assert "THE-END" in screen_text(app)
        # its continuation lines hang under the first (each log line reads as one)

        def hanging() -> bool:
            rows = screen_text(app).splitlines()
            at = [i for i, r in enumerate(rows) if "AttributeError: " in r and "'NoneType'" not in r]
            if not at or at[-1] + 1 >= len(rows):
                return False
            first, nxt = rows[at[-1]].index("AttributeError"), rows[at[-1] + 1]
            return nxt[first:first + 2] == "  " and nxt[first + 2:first + 6] == "xxxx"

        await wait_for(pilot, hanging, "a hanging indent under the log line", timeout=5)


async def test_at_120x40_the_crashes_and_the_log_stay_in_view_with_the_levels() -> None:
    from specload.ui.layout import Dashboard
    from specload.ui.widgets.crashes import CrashTable
    from specload.ui.widgets.levels import LevelTable
    from specload.ui.widgets.logtail import LogTail

    def visible(app, cls) -> bool:
        w = app.query_one(cls)
        return w.display and w.region.height >= 5

    app = create_app(source=mid_run_source())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.query_one(Dashboard).compact
        assert all(visible(app, c) for c in (LevelTable, CrashTable, LogTail))
        text = screen_text(app)
        assert "AttributeError" in text and "Decode batch" in text and "402.7" in text
        await pilot.press("right")  # the chart takes the top; the crashes and the log stay
        await pilot.pause()
        assert not app.query_one(LevelTable).display
        assert all(visible(app, c) for c in (CrashTable, LogTail))
    app = create_app(source=mid_run_source())
    async with app.run_test(size=(80, 24)) as pilot:  # too small: one panel at a time, as before
        await pilot.pause()
        assert visible(app, LevelTable) and not app.query_one(CrashTable).display


async def test_the_palettes_screenshot_is_saved_here_and_says_where(tmp_path, monkeypatch) -> None:
    """Textual saved it in ~/Downloads, which a server has not: it failed. Now the current directory,
    and a notification names the file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "no-home"))
    app = create_app(source=mid_run_source())
    said = notices(app)
    async with app.run_test(size=(100, 30)) as pilot:
        (shot,) = [c for c in app.get_system_commands(app.screen) if c.title == "Screenshot"]
        shot.callback()
        await wait_for(pilot, lambda: list(tmp_path.glob("*.svg")), "the screenshot in the current directory",
                       timeout=10)
        (svg,) = tmp_path.glob("*.svg")
        await wait_for(pilot, lambda: any(svg.name in n for n in said), "where it is")
        assert "<svg" in svg.read_text()[:500]


def test_the_throughput_axis_has_even_round_ticks_from_zero() -> None:
    """plotext's own y ticks skipped one (625, 521, 417, 208, 104): the chart now sets round, evenly
    spaced ones from 0 to just above the highest level."""
    from specload.ui.widgets.levels import nice_ticks

    for top in (0.3, 1.0, 104.0, 687.5, 9500.0, 48213.0):
        ticks = nice_ticks(top)
        steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}
        assert ticks[0] == 0 and ticks[-1] >= top and ticks[-2] < top and len(steps) == 1, (top, ticks)
        (step,) = steps
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(abs(mantissa - m) < 1e-9 for m in (1, 2, 2.5, 5)), (top, step)
        assert 3 <= len(ticks) <= 6


async def test_a_level_that_started_no_request_leaves_no_empty_row() -> None:
    """Quick key changes (12, 13, 14 pressed in a row) ended levels before any request of theirs and
    left "12 – – –" rows: a level with no request gets none."""
    import dataclasses

    from specload.sources.static import StaticSource
    from specload.ui.widgets.levels import LevelTable
    from tests.ui.fixed_data import LEVELS, T0, level, mid_run_snapshot

    empty = dataclasses.replace(level(len(LEVELS), 12, 0.0, 20.0, 10.0), requests=0, ok=0, output_tokens=0)
    snap = dataclasses.replace(mid_run_snapshot(False), levels=(*LEVELS, empty))
    app = create_app(source=StaticSource(snap, t0_ns=T0))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: table.row_count == len(LEVELS), "the levels' rows")
        await pilot.pause()
        assert table.row_count == len(LEVELS)
        assert not any(line.lstrip("│ ").startswith("12 ") for line in screen_text(app).splitlines())


async def test_the_start_up_notices_are_one_toast_without_stale_lines(sim, tmp_path) -> None:
    # eight toasts, one per start-up step, covered half of an 80x24 screen for 10 s
    from specload.ui.app import STARTING
    from tests.ui.conftest import live_app, notifications, quit_app

    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    app = live_app(server.url, "-c", "1", "-d", "30", "--max-tokens", "8", "--record", str(tmp_path / "n.jsonl"))
    made = notifications(app)

    def starting() -> list:
        return [n for n in made if n.title == STARTING]

    def alive() -> list:
        # one start-up toast at a time, each note replacing the one before. The notifications the
        # app holds are private to Textual, and nothing public can stand in for them: the toasts on
        # the screen (run_test shows none unless asked) lag them, a replaced one still mounted
        # while its successor is, so counting those races
        return [n for n in app._notifications if n.title == STARTING]

    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: any("prompt lengths in the server's tokens" in n.message for n in starting()),
                       "the prompt-length result in the start-up toast", timeout=40)
        toast = starting()[-1]  # the start-up toast now
        assert len(alive()) <= 1, alive()
        assert "asking the server" not in toast.message  # the step its result made stale is gone
        assert len(starting()) >= 2  # it did grow: several notes merged
        assert not [n for n in made if "prompt lengths" in n.message and n.title != STARTING]
        await quit_app(pilot, app)


async def test_a_levels_late_summary_takes_its_place_in_the_levels_order() -> None:
    """A crash cut the last level (its row shown at once) while an earlier level's summary still waited
    for its last scrape: the earlier row, arriving after, goes above the later one, not below it."""
    import dataclasses

    from specload.sources.static import StaticSource
    from specload.ui.widgets.levels import LevelTable, row_key
    from tests.ui.fixed_data import LEVELS, T0, mid_run_snapshot

    late = (LEVELS[0], LEVELS[-1], *LEVELS[1:-1])  # the order the rows arrive in
    app = create_app(source=StaticSource(dataclasses.replace(mid_run_snapshot(False), levels=late), t0_ns=T0))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: table.row_count == len(LEVELS), "the levels' rows")
        await pilot.pause()
        assert [r.key.value for r in table.ordered_rows] == [row_key(s) for s in LEVELS]


async def test_the_load_panel_shows_ten_thousand_in_flight_whole() -> None:
    # at C=10000 the in-flight count was cut off the 38-column label ("in flight " and nothing)
    import dataclasses

    from specload.ui.widgets.load import LoadPanel
    from tests.ui import fixed_data

    runner = dataclasses.replace(fixed_data.RUNNER, target=10000, in_flight=9876, level_concurrency=10000)
    for size in ((80, 24), (120, 40), (160, 48)):
        source = fixed_data.mid_run_source()
        source.set_frame(dataclasses.replace(source.frame(), runner=runner))
        app = create_app(source=source)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda app=app: "in flight 9876" in screen_text(app), f"the whole count at {size}")
            app.query_one(LoadPanel).pending_target = 20000  # keyed in, not applied yet
            await wait_for(pilot, lambda app=app: "target C=10000→20000 · in flight 9876" in screen_text(app),
                           f"the keyed-in target beside it at {size}")


async def test_server_columns_appear_with_the_first_level_that_has_a_figure_in_them() -> None:
    # a server without /metrics or speculation filled "srv tok/s" and "accept" with dashes, which at 80
    # columns pushed TTFT and TPOT off the table
    import dataclasses

    from specload.ui.widgets.levels import LevelTable
    from tests.ui import fixed_data

    bare = {"server_gen_tok_s": None, "accept_len": None, "accept_rate": None, "request_accept_len": None,
            "request_accept_rate": None}
    source = fixed_data.mid_run_source()
    frame = source.frame()
    levels = frame.stats.levels
    plain = tuple(dataclasses.replace(s, **bare) for s in levels)
    source.set_frame(dataclasses.replace(frame, stats=dataclasses.replace(frame.stats, levels=plain[:3])))
    app = create_app(source=source)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: len(table.rows) == 3, "three levels shown")
        labels = [str(c.label) for c in table.columns.values()]
        assert "srv tok/s" not in labels and "accept" not in labels, labels
        assert labels[:5] == ["C", "tok/s", "ok/total", "TTFT p50/90/95/99 ms", "TPOT p50/90/95/99 ms"], labels
        # a level with the server's throughput (not its acceptance): that column comes, for every row
        srv_only = dataclasses.replace(levels[3], accept_len=None, accept_rate=None, request_accept_len=None,
                                       request_accept_rate=None)
        source.set_frame(dataclasses.replace(frame, stats=dataclasses.replace(
            frame.stats, levels=(*plain[:3], srv_only))))
        await wait_for(pilot, lambda: len(table.rows) == 4, "the fourth level shown")
        labels = [str(c.label) for c in table.columns.values()]
        assert "srv tok/s" in labels and "accept" not in labels, labels
        assert table.get_row("level-0")[labels.index("srv tok/s")] == "–"
        assert table.get_row("level-3")[labels.index("srv tok/s")] != "–"
