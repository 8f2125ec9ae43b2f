"""Themes as data (shipped, user, broken, unknown, live switch) and the dashboard's reactions to events
(a new crash alerts and opens in a modal; keys before the load starts only notify), on fixed data."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specload.datatypes import CrashConsequence
from specload.sources.static import StaticSource
from specload.ui.app import create_app
from specload.ui.messages import CrashReported, MessageListener
from specload.ui.screens import CrashScreen, parse_concurrency
from specload.ui.themes import DEFAULT_THEME, load_themes, shipped_themes_dir, user_themes_dir
from specload.ui.widgets.crashes import CrashTable, crash_message_lines
from specload.ui.widgets.levels import LevelTable
from tests.ui.conftest import notices, wait_for
from tests.ui.fixed_data import CRASH, T0, idle_source, mid_run_source

REPO_THEMES = Path(__file__).resolve().parents[2] / "themes"


def test_shipped_themes_load_with_their_variables() -> None:
    assert shipped_themes_dir() is not None
    found = load_themes([REPO_THEMES])
    assert found.problems == []
    assert {"specload-dark", "specload-light", "specload-contrast"} <= set(found.themes)
    assert found.themes["specload-light"].dark is False
    contrast = found.themes["specload-contrast"]
    # good/bad are blue/orange there, not green/red
    assert contrast.variables["specload-good"] != contrast.variables["specload-bad"]
    assert contrast.success == contrast.variables["specload-good"]


def test_user_themes_override_and_broken_files_are_reported(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    d = user_themes_dir()
    assert d == tmp_path / "specload" / "themes"
    d.mkdir(parents=True)
    (d / "mine.toml").write_text('name = "mine"\nprimary = "#123456"\ndark = false\n')
    (d / "bad-colour.toml").write_text('name = "bad"\nprimary = "not-a-colour"\n')
    (d / "bad-toml.toml").write_text("name = \n")
    found = load_themes()
    assert "mine" in found.themes and "specload-dark" in found.themes
    assert len(found.problems) == 2
    assert any("not a colour" in p for p in found.problems)


async def test_unknown_theme_falls_back_with_a_notice() -> None:
    app = create_app(source=idle_source(), theme="no-such-theme")
    said = notices(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.theme == DEFAULT_THEME
        assert any("unknown theme" in n for n in said)


async def test_broken_user_theme_does_not_stop_the_app(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    d = tmp_path / "specload" / "themes"
    d.mkdir(parents=True)
    (d / "broken.toml").write_text('name = "broken"\nprimary = 12\n')
    app = create_app(source=mid_run_source(), theme="broken")
    said = notices(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.theme == DEFAULT_THEME
        messages = " ".join(said)
        assert "broken.toml" in messages and "unknown theme 'broken'" in messages


async def test_theme_switches_live_including_builtin_ones() -> None:
    app = create_app(source=mid_run_source(), theme="specload-light")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.current_theme.dark is False
        app.theme = "specload-contrast"
        await pilot.pause()
        assert app.get_css_variables()["specload-bad"].upper() == "#FF7A00"
        app.theme = "textual-dark"  # knows nothing of specload-*: the defaults fill in
        await pilot.pause()
        assert "specload-throughput" in app.get_css_variables()


async def test_new_crash_alerts_and_opens_its_excerpt() -> None:
    source = mid_run_source(with_crash=False)
    app = create_app(source=source)
    said = notices(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one(CrashTable)
        assert table.row_count == 0
        # the crash is in the run's state (the frame) and, once, announced (the message)
        source.set_frame(mid_run_source(with_crash=True).frame())
        app.post_message(CrashReported(CRASH))
        await wait_for(pilot, lambda: table.row_count == 1, "the crash row")
        assert table.has_class("-alert")  # the flash
        assert any("SERVER CRASH" in n for n in said)
        # at 80x24 the crashes panel is brought to the front
        assert app.query_one("Dashboard").shown_panel == "crashes"
        assert table.get_row(CRASH.signature)[:3] == ["✖ AttributeError", "3", "TP0, TP1"]
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), "the crash excerpt")
        excerpt = str(app.screen.query_one("#crash-excerpt").render())
        assert "Traceback" in excerpt and "draft_tokens" in excerpt
        head = str(app.screen.query_one("#crash-head").render())
        assert "first seen +01:35" in head  # relative to the run's start
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CrashScreen), "the excerpt to close")


class Refusing:
    """A RunControl that fails the test if anything reaches it."""

    def __getattr__(self, name: str):
        raise AssertionError(f"{name} reached the control before the load started")


async def test_keys_without_a_running_load_only_notify() -> None:
    source = idle_source()
    source.control = Refusing()  # type: ignore[assignment]
    app = create_app(source=source)
    said = notices(app)
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("up", "space", "n", "h", "c", "m", "f", "b", "right_square_bracket"):
            await pilot.press(key)
        assert app.screen.is_current and type(app.screen).__name__ == "Screen"
        assert any("not started" in n for n in said)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "q to exit without a session")


async def test_static_levels_fill_the_table_with_stable_keys() -> None:
    app = create_app(source=mid_run_source())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = app.query_one(LevelTable)
        assert table.row_count == 5
        # the same level reported again (message after sample) updates in place
        table.show_level(app.source.frame().stats.levels[-1])
        assert table.row_count == 5


def test_parse_concurrency_and_messages() -> None:
    assert parse_concurrency(" 12 ") == 12
    for bad in ("", "0", "-3", "2.5", "abc", "100001"):
        assert parse_concurrency(bad) is None
    posted: list[object] = []
    MessageListener(posted.append).crash(CRASH)
    assert isinstance(posted[0], CrashReported) and posted[0].crash is CRASH


LONG = replace(
    CRASH,
    signature="e5f6",
    exception_type="torch.OutOfMemoryError",
    message="CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of 79.15 GiB of which "
    "1.02 GiB is free. Including non-PyTorch memory, this process has 78.1 GiB memory in use.",
    processes=("TP0", "TP1", "TP2", "TP3", "TP4", "TP5", "TP6", "TP7"),
    count=2,
    consequences=(CrashConsequence("9", "server_fatal", "Received sigquit from a child process.", (), 1),),
)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 48)])
async def test_crash_panel_shows_type_message_count_and_ranks_at_every_size(size: tuple[int, int]) -> None:
    source = mid_run_source(with_crash=False)
    app = create_app(source=source)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        frame = source.frame()
        source.set_frame(replace(frame, stats=replace(frame.stats, crashes=(CRASH, LONG))))
        app.post_message(CrashReported(CRASH))
        app.post_message(CrashReported(LONG))
        table = app.query_one(CrashTable)
        await wait_for(pilot, lambda: table.row_count == 2, "the crash rows")
        app.query_one("Dashboard").show_panel("crashes")
        # the consequence named whole at every size ("↳ then server_fat…" at 160x48 before)
        pieces = ("AttributeError", "TP0, TP1", "draft_tokens", "OutOfMemory", "(8)", "↳", "server_fatal")

        def shown() -> str:
            return "\n".join(str(table.render_line(y).text) for y in range(table.region.height))

        try:
            await wait_for(pilot, lambda: all(p in shown() for p in pieces), f"type, count, ranks, message at {size}")
        except AssertionError:
            raise AssertionError(f"{size}:\n{shown()}") from None
        assert table.region.width >= 40
        # the long message wraps over the row's lines instead of running off the panel
        row = table.get_row(LONG.signature)
        assert row[1] == "2" and row[3].count("\n") >= 1 and row[3].replace("\n", " ").startswith("CUDA out of memory.")
        assert all(len(line) <= table.columns["message"].width for line in row[3].split("\n"))
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, CrashScreen), "the crash excerpt")
        head = str(app.screen.query_one("#crash-head").render())
        # the whole message, wrapped, and what followed the cause
        assert "78.1 GiB memory in use." in head.replace("\n", " ") and "then server_fatal" in head


async def test_a_level_cut_by_a_crash_says_so_in_the_table() -> None:
    # issue 11: the cut column appears with the first cut level, before the errors
    from tests.ui.fixed_data import mid_run_snapshot

    snap = mid_run_snapshot(True)
    cut = replace(snap.levels[-1], cut="crash", active_s=6.5, lost=3)
    app = create_app(source=StaticSource(replace(snap, levels=(*snap.levels[:-1], cut)), t0_ns=T0))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = app.query_one(LevelTable)
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[-2:] == ["cut", "errors"]
        assert table.get_row("level-4")[-2] == "crash, 3 lost"
        assert table.get_row("level-0")[-2] == "–"


@pytest.mark.parametrize("width", [16, 18, 22])
def test_a_long_identifier_in_a_crash_message_breaks_after_its_own_separators(width: int) -> None:
    # at 160x48 the crash panel's message column is 18 wide: 'draft_model_runner' (20) broke as
    # 'draft_m / odel_runner'; now after an underscore, and no line is wider than the column
    crash = replace(CRASH, message="'EAGLEWorkerV2' object has no attribute 'draft_model_runner'", consequences=())
    lines = crash_message_lines(crash, width, lines=8)
    assert all(len(line) <= width for line in lines), lines
    # every line ends at a space or right after an underscore (the message has no "_ " of its own)
    assert " ".join(lines).replace("_ ", "_") == crash.message, lines
