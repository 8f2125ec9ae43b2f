"""The real app against the real simulator: keys change the engine, widgets fill, the record has it all.

Each test starts a simulator on 127.0.0.1 (the ``sim`` fixture), builds the app the CLI would (the
session in an engine process of its own), and drives ``SpecloadApp`` with Pilot; what the engine does
is read from its frames and, after the quit, from its record. Every wait is bounded (``wait_for``);
nothing sleeps blindly. Keys that go together share one run (each run costs a process start).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input, Sparkline

from specload.engine.runner import RunnerState
from specload.record.reader import read_record
from specload.ui.app import SpecloadApp
from specload.ui.screens import ConcurrencyScreen, HelpScreen, MarkerScreen
from specload.ui.widgets.header import RunHeader
from specload.ui.widgets.levels import LevelTable
from specload.ui.widgets.metrics import span_text
from specload.ui.widgets.value import ValueLabel
from tests.ui.conftest import live_app, load_running, notices, quit_app, runner, screen_text, wait_for


async def test_levels_fill_the_table_and_sparklines_fill(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "1,2", "-n", "4", "--max-tokens", "8", "--record", str(record))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: table.row_count == 2, "two finished levels in the table",
                       timeout=30)  # the first wait: the engine starts and calibrates first (13 s at load 17)
        assert [str(k.value) for k in table.rows] == ["level-0", "level-1"]  # stable keys, in order
        assert table.get_row("level-1")[0] == "2"  # the C column
        # the ramp is over; the TUI stays open (the user may set a concurrency)
        state = app.query_one(RunHeader).query_one("#h-state", ValueLabel)
        await wait_for(pilot, lambda: "finished" in str(state.render()), "the finished state in the header")
        # per-second series need a completed second: bounded wait for the sparklines
        sparks = list(app.query(Sparkline))
        await wait_for(pilot, lambda: bool(app.query_one("#tp-tok").query_one(Sparkline).data),
                       "throughput sparkline data", timeout=5)
        await wait_for(pilot, lambda: bool(app.query_one("#lat-ttft").query_one(Sparkline).data),
                       "TTFT sparkline data", timeout=5)
        # latencies are drawn in a band with its min–max written on the row (from zero: a solid wall)
        def banded() -> bool:
            ttft = app.query_one("#lat-ttft").query_one(Sparkline).data or [math.nan]
            line = next(r for r in screen_text(app).splitlines() if "TTFT " in r)
            row = line[line.index("TTFT "):]  # the latency panel's row, not the panels beside it
            # a wall is every cell full; a band has lower cells (a step up may fill the cells after it)
            return f" {span_text(min(ttft), max(ttft))} " in row and any(ch in row for ch in "▁▂▃▄▅▆▇")

        await wait_for(pilot, banded, "the TTFT row in its band, with its scale", timeout=5)
        assert len(sparks) >= 5
        assert app.snapshot is not None and app.snapshot.tokens_total >= 8 * 8
        await quit_app(pilot, app)
    assert app.return_code == 0
    data = read_record(str(record))
    assert data.end is not None and len(data.levels) == 2


async def test_each_levels_srv_tok_s_is_the_servers_own_over_that_level(sim, tmp_path) -> None:
    """The levels table's ``srv tok/s`` is the server's generation counter over each level's own span,
    as the record has it: C=1 then C=4 at pinned timing (the second level makes about four times the
    tokens a second), so a level read over the next one's span would be off by about that factor."""
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0)
    record = tmp_path / "run.jsonl"
    app = live_app(server.url, "-c", "1,4", "-d", "3", "--max-tokens", "40", "--metrics-interval", "0.5",
                   "--record", str(record))
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(LevelTable)
        await wait_for(pilot, lambda: table.row_count == 2, "two finished levels in the table", timeout=60)
        shown = [str(table.get_row(f"level-{i}")[3]) for i in (0, 1)]  # the srv tok/s column
        await quit_app(pilot, app)
    levels = read_record(str(record)).levels
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    for cell, lv in zip(shown, levels, strict=True):
        srv = lv["server_gen_tok_s"]
        assert srv is not None and cell == f"{srv:.1f}", (cell, lv)  # the engine's figure, as measured
        # the server's tokens over the level's span against the client's over the same level
        assert 0.5 <= srv / lv["throughput_tok_s"] <= 2.0, lv


class _Run:
    """A dashboard driving a real session in its engine process against a slow simulator (Pilot waits
    for idle, up to 1 s, after each key: a slow stream keeps the process mostly idle), on the first
    of its long levels."""

    def __init__(self, pilot: Pilot, app: SpecloadApp, record: Path, said: list[str]) -> None:
        self.pilot, self.app, self.record, self.said = pilot, app, record, said

    @property
    def runner(self) -> RunnerState:
        return runner(self.app)

    def events(self, kind: str) -> list[object]:
        """The values of the record's events of ``kind`` (read once the app has quit)."""
        return [e["value"] for e in read_record(str(self.record)).events if e["kind"] == kind]


@contextlib.asynccontextmanager
async def _running(sim, tmp_path: Path) -> AsyncIterator[_Run]:
    """The app on its first level (levels 2,4,8 of 60 s each), quit with 'q' at the end."""
    server = await sim(ttft_ms=5, itl_ms=100, spec_tokens=0)
    record = tmp_path / "keys.jsonl"
    app = live_app(server.url, "-c", "2,4,8", "-d", "60", "--max-tokens", "8", "--record", str(record))
    app.key_settle_s = 0.05
    said = notices(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app)
        yield _Run(pilot, app, record, said)
        await quit_app(pilot, app)


async def test_concurrency_keys_set_held_manual_levels_and_q_records_in_flight_requests_cancelled(sim, tmp_path) -> None:
    async with _running(sim, tmp_path) as run:
        for key, want in (("up", 3), ("plus", 4), ("down", 3), ("minus", 2), ("right_square_bracket", 4),
                          ("left_square_bracket", 2)):
            await run.pilot.press(key)
            # handed to the runner when no further key follows within key_settle_s
            await wait_for(run.pilot, lambda w=want: run.runner.target == w, f"C={want} after {key}")
            assert run.app.pending_target is None
            assert run.runner.held  # a user-set concurrency is a held manual level
        assert run.runner.in_flight > 0
    assert run.events("concurrency") == [3, 4, 3, 2, 4, 2]
    data = read_record(str(run.record))
    assert run.app.return_code == 0
    # the ramp was not done: the quit interrupted it, in-flight requests recorded as cancelled
    assert data.end is not None and data.end["reason"] == "interrupted"
    assert any((r.get("error") or {}).get("kind") == "cancelled" for r in data.requests)


async def test_dialogs_c_and_m_set_a_concurrency_and_a_marker(sim, tmp_path) -> None:
    async with _running(sim, tmp_path) as run:
        pilot, app = run.pilot, run.app
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConcurrencyScreen), "the concurrency modal")
        app.screen.query_one(Input).value = ""
        await pilot.press("a", "b", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConcurrencyScreen)  # bad input keeps the dialog
        assert any("not a concurrency" in n for n in run.said)
        app.screen.query_one(Input).value = ""
        await pilot.press("0", "enter")
        assert isinstance(app.screen, ConcurrencyScreen)  # zero is not a concurrency either
        app.screen.query_one(Input).value = ""
        await pilot.press("5", "enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConcurrencyScreen), "the modal to close")
        await wait_for(pilot, lambda: run.runner.target == 5, "C=5 typed")
        level = run.runner.level_index
        for typed in (("n", "o", "t", "e", "enter"), ("enter",)):  # 'n' is typed, not 'next level'
            await pilot.press("m")
            await wait_for(pilot, lambda: isinstance(app.screen, MarkerScreen), "the marker modal")
            await pilot.press(*typed)
            await wait_for(pilot, lambda: not isinstance(app.screen, MarkerScreen), "the marker modal to close")
        assert run.runner.level_index == level  # the typed 'n' did not start the next level
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), "the help screen to close")
    assert run.events("concurrency")[:1] == [5]
    assert run.events("marker") == ["note", ""]


async def test_space_pauses_h_holds_and_n_starts_the_next_level(sim, tmp_path) -> None:
    async with _running(sim, tmp_path) as run:
        await run.pilot.press("space")
        assert run.runner.paused  # the command's ack carried the frame after it ran
        await wait_for(run.pilot, lambda: "paused" in str(run.app.query_one("#h-state", ValueLabel).render()),
                       "the paused state in the header")
        await run.pilot.press("space")
        assert not run.runner.paused
        await run.pilot.press("up")
        await wait_for(run.pilot, lambda: run.runner.target == 3 and run.runner.held, "a held C=3")
        # h releases the hold of the manual level: the plan resumes with its next level
        await run.pilot.press("h")
        assert not run.runner.held
        await wait_for(run.pilot, lambda: run.runner.level_number >= 1, "the plan to resume")
        # h again holds the planned level
        await run.pilot.press("h")
        assert run.runner.held
        before = run.runner.level_index
        await run.pilot.press("n")
        await wait_for(run.pilot, lambda: run.runner.level_index > before, "the next level")
    assert len(run.events("pause")) == 1 and len(run.events("resume")) == 1
    assert run.events("hold") == [False, True]
    assert len(run.events("next")) == 1


async def test_quick_concurrency_keys_make_one_level(sim, tmp_path) -> None:
    """Keys pressed in quick succession are one change: one manual level, no rows of 1-2 requests."""
    server = await sim(ttft_ms=5, itl_ms=100, spec_tokens=0)
    record = tmp_path / "quick.jsonl"
    app = live_app(server.url, "-c", "2", "-d", "60", "--max-tokens", "8", "--record", str(record))
    # keys settle only after a minute: whatever Pilot's pace, the first presses are one burst
    app.key_settle_s = 60.0
    async with app.run_test(size=(120, 40)) as pilot:
        await load_running(pilot, app)
        level = runner(app).level_index
        await pilot.press("up", "up", "up", "right_square_bracket")  # (2 + 3) x 2
        assert app.pending_target == 10
        await wait_for(pilot, lambda: "2→10" in str(app.query_one("#load-conc").render()),
                       "the pending concurrency in the load panel")
        assert runner(app).target == 2 and runner(app).level_index == level  # nothing applied yet
        app.key_settle_s = 0.05
        await pilot.press("down")  # the burst's last key: 9, applied once the keys settle
        await wait_for(pilot, lambda: runner(app).target == 9, "C=9 once the keys settle")
        assert runner(app).level_index == level + 1 and runner(app).held
        assert app.pending_target is None
        await wait_for(pilot, lambda: "→" not in str(app.query_one("#load-conc").render()), "the arrow to go")
        await quit_app(pilot, app)
    levels = [e["value"] for e in read_record(str(record)).events if e["kind"] == "level"]
    assert [(lv["concurrency"], lv["manual"]) for lv in levels] == [(2, False), (9, True)]


async def test_quitting_after_a_crash_records_crashed_as_the_exit_status_says(sim, tmp_path) -> None:
    # issue 11: every TUI record ended "interrupted"; after a crash the TUI exited 3 with its record
    # saying "interrupted". The end reason now says what happened, and matches the exit status.
    log = tmp_path / "server.log"
    server = await sim(ttft_ms=5, itl_ms=5, spec_tokens=0, crash_after=6, log_file=str(log))
    record = tmp_path / "crash.jsonl"
    app = live_app(server.url, "-c", "2", "-d", "60", "--max-tokens", "20", "--server-log", str(log),
                   "--metrics-url", "off", "--record", str(record))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: bool(app.source.frame().stats.crashes), "the crash on screen", timeout=20)
        await quit_app(pilot, app)
    assert app.return_value == 3  # what run_app exits with (return_code is Textual's own)
    data = read_record(str(record))
    assert data.end is not None and data.end["reason"] == "crashed"
    (level,) = data.levels
    assert level["cut"] == "crash" and level["active_s"] < level["wall_s"]
