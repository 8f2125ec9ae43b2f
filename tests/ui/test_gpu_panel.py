"""The GPU panel on what ``specload tui`` ships: the engine process running the built-in simulator with
eight simulated GPUs (``--sim-args '--gpus 8'``, found by ``--gpu-metrics auto`` on its /metrics). At
80x24 the panel is a tab holding a summary line and one sparkline row per GPU, all eight in view; at
160x48 it sits beside the log in the grid. q closes a record holding the GPU lines and each level's
energy."""

from __future__ import annotations

import re

from specload.record.reader import read_record
from tests.ui.conftest import live_app, quit_app, screen_text, wait_for

SIM = "--ttft-ms 5 --itl-ms 10 --spec-tokens 0 --quiet --gpus 8"


ROW = re.compile(r"(?:^|│) (g[0-7]) +[▁▂▃▄▅▆▇█]+ +\d+W +\d+% [\d.]+/80G")


def gpu_lines(text: str) -> list[str]:
    """The GPU rows on screen (``g3  ▂▅█  452W  97% 44.0/80G 62°C``), inside a border or not."""
    return [m.group(0).lstrip("│ ") for ln in text.splitlines() if (m := ROW.search(ln))]


async def test_eight_gpus_at_80x24_and_160x48_from_the_engine_process(tmp_path) -> None:
    record = tmp_path / "run.jsonl"
    app = live_app("-c", "4", "-d", "3", "--max-tokens", "20", "--record", str(record), "--metrics-interval",
                   "0.25", "--sim-args", SIM)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(app.source.frame().stats.gpus) == 8, "eight GPUs", timeout=30)
        while "-show-gpus" not in app.query_one("Dashboard").classes:
            await pilot.press("right")
        await wait_for(pilot, lambda: len(gpu_lines(screen_text(app))) == 8, "eight GPU rows on screen")
        text = screen_text(app)
        assert "8 GPUs · " in text and " · dcgm" in text
        rows = gpu_lines(text)
        assert [r.split()[0] for r in rows] == [f"g{i}" for i in range(8)]
        assert all(len(ln) <= 80 for ln in text.splitlines())
        await pilot.resize_terminal(160, 48)
        # beside each other, both bordered (waited for: the rows of the 80x24 tab match before the relayout)
        await wait_for(pilot, lambda: len(gpu_lines(wide := screen_text(app))) == 8 and "─ GPUs " in wide
                       and "─ server log " in wide, "the GPU rows in the wide grid")
        await wait_for(pilot, lambda: len(app.source.frame().stats.levels) >= 1, "the level to end", timeout=30)
        await quit_app(pilot, app)
    data = read_record(str(record))
    assert {g["gpu"] for g in data.gpus} == set(range(8))
    level = data.levels[0]
    assert level["gpu"]["gpus"] == 8 and level["gpu"]["energy_j"] > 0
