"""``specload tui --replay``: a record made here (in virtual time) played back through ReplaySource with
a fake clock, and in the real dashboard through Pilot: what the panels see, pause and step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specload.clock import FakeClock
from specload.record.reader import read_record
from specload.session import Session
from specload.sources.local import SessionControl
from specload.sources.replay import ReplaySource
from tests import processes
from tests.virtual_runs import virtual_record

# one worker runs this module: its fixture is set up once (xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("replay")


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    async def person(session: Session) -> None:
        while session.phase != "running":
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        SessionControl(session).marker("draft model swapped")  # what the TUI's m does

    return virtual_record(tmp_path_factory.mktemp("replay") / "run.jsonl", levels=(1, 4), n=12, seed=1,
                          sim={"step_ms": 8.0}, script=person)


def test_playback_follows_the_record_clock(record: Path) -> None:
    data = read_record(str(record))
    clock = FakeClock()
    src = ReplaySource(data, speed=2.0, clock=clock)
    first = src.snapshot()
    assert first.requests_total == 0 and first.levels == ()
    level_end = max(r["end_s"] for r in data.requests if r["level_index"] == 0)
    clock.advance(level_end / 2 + 0.1)  # twice real time: past the first level's end
    snap = src.snapshot()
    assert [lv.concurrency for lv in snap.levels] == [1]
    assert snap.requests_total == sum(1 for r in data.requests if r["end_s"] <= src.position_s)
    assert src.runner_state().target == 4  # type: ignore[union-attr]
    assert any("marker: draft model swapped" in line for _, line in src.log_lines)
    # paused: the record's clock stands still
    src.toggle_pause()
    at = src.position_s
    clock.advance(30)
    assert src.snapshot().requests_total == snap.requests_total and src.position_s == at
    assert src.state_label() == "replay paused"
    src.toggle_pause()
    clock.advance(3600)
    end = src.snapshot()
    assert src.state_label() == "replay finished"
    assert [lv.concurrency for lv in end.levels] == [1, 4]
    # every token of the record was fed, spread over the requests' decode spans
    assert end.tokens_total == sum(r["output_tokens"] for r in data.requests if r["ok"] and not r["warmup"])
    assert end.requests_total == len([r for r in data.requests if not r["warmup"]])


def test_next_level_jumps_ahead(record: Path) -> None:
    data = read_record(str(record))
    clock = FakeClock()
    src = ReplaySource(data, speed=1.0, clock=clock)
    src.snapshot()
    src.runner.next_level()  # the first level starts at once; the step goes to the second
    src.runner.next_level()
    starts = [e["t_s"] for e in data.events if e["kind"] == "level"]
    assert src.position_s == pytest.approx(starts[1]) and src.runner.requested == 4
    assert src.snapshot().levels and src.snapshot().levels[0].concurrency == 1


async def test_the_dashboard_plays_a_record(record: Path) -> None:
    from specload.ui.app import create_app
    from specload.ui.widgets.levels import LevelTable

    clock = FakeClock()
    src = ReplaySource(read_record(str(record)), speed=1.0, clock=clock)
    app = create_app(source=src)
    async with app.run_test(size=(160, 48)) as pilot:
        # the footer offers the keys a record answers to (pause, next), not the load's (C±1, hold, ...)
        from tests.ui.conftest import screen_text

        await pilot.pause()
        footer = next((ln for ln in screen_text(app).splitlines() if "Quit" in ln), "")
        assert "Pause" in footer and "Next" in footer and "Quit" in footer
        assert not any(k in footer for k in ("C±1", "Set", "Hold", "Mark")), footer
        clock.advance(1.0)
        app.sample()
        await pilot.press("space")  # the dashboard's pause key pauses the playback
        assert src.paused and app.state_label == "replay paused"
        clock.advance(3600)
        app.sample()
        assert src.position_s < 1.5
        await pilot.press("space")
        clock.advance(3600)
        app.sample()
        await pilot.pause()
        assert app.state_label == "replay finished"
        assert app.query_one(LevelTable).row_count == 2


@pytest.mark.parametrize("args, message", [
    (["--replay", "/nonexistent/run.jsonl"], "cannot read"),
    (["--speed", "0"], "--speed"),
    (["--headless"], "specload report"),
])
def test_replay_errors_are_one_line(record: Path, args: list[str], message: str) -> None:
    import sys

    full = args if "--replay" in args else ["--replay", str(record), *args]
    p = processes.run([sys.executable, "-m", "specload.cli", "tui", *full], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
