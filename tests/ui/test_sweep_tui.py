"""The sweep's dashboard (``specload tui --sweep``) on what it ships with: ``specload sweep`` in a process
of its own, its progress read from the pipe. It shows each run's phases, the levels, the crash, the
comparison filling in and an ETA; ``q`` stops the sweep (its server too) and leaves it resumable."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from specload.ui.sweep import SweepApp
from specload.watch.command import process_start_time

SIM = f"{sys.executable} -m specload.sim --port {{port}} --ttft-ms 5 --itl-ms 4 --seed 3 {{args}}"


class Recording(SweepApp):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.seen: list[dict] = []
        self.heads: list[str] = []

    def handle(self, ev: dict[str, Any]) -> None:
        self.seen.append(ev)
        super().handle(ev)
        self.heads.append(str(self.query_one("#sweep-head", Static).render()))


async def _until(cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError
        await asyncio.sleep(0.05)


def _cells(t: DataTable) -> list[list[str]]:
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_the_sweep_dashboard_follows_a_sweep_and_q_leaves_it_resumable(tmp_path) -> None:
    out = tmp_path / "sw"
    app = Recording(["--launch", SIM, "--config", "off=--spec-tokens 0", "--config", "on=--spec-tokens 3",
                     "--config", "crashy=--crash-after 3", "--repeats", "2", "-c", "1,4", "-n", "12",
                     "--max-tokens", "16", "--ignore-eos", "--out", str(out)])
    async with app.run_test(size=(120, 40)) as pilot:
        # order off on crashy crashy on off: crashy crashes (each retried once), then q during on's second run
        await _until(lambda: any(e["kind"] == "phase" and e["slot"] == 4 and e["phase"] == "load" for e in app.seen),
                     180)
        phases = [e["phase"] for e in app.seen if e["kind"] == "phase" and e["slot"] == 0]
        assert phases == ["starting", "loading", "ready", "load", "stopping", "stopped"]
        assert any(e["kind"] == "crash" and e["config"] == "crashy" for e in app.seen)
        configs = {row[0]: row for row in _cells(app.query_one("#sweep-configs", DataTable))}
        assert configs["off"][1] == "waiting" and configs["off"][2] == "1/2" and configs["off"][3] != "-"
        assert configs["crashy"][1] == "crashed" and configs["crashy"][2] == "0/2"  # both repeats, retried
        assert configs["on"][1] == "load"
        comparison = _cells(app.query_one("#sweep-comparison", DataTable))
        assert comparison[0][0] == "off (base)" and comparison[1][0] == "on" and "×" in comparison[1][1]
        assert any("▲" in cell or "⚠" in cell for cell in comparison[1])  # ⚠: unsound, the machine was busy
        assert any("ETA" in h for h in app.heads) and any("[5/6] on repeat 2 · load" in h for h in app.heads)
        server = json.loads((out / "sweep.json").read_text())["schedule"][4]["attempts"][-1]["server_pid"]
        await pilot.press("q")
        await _until(lambda: app.exit_code is not None, 60)
        await pilot.pause()
    assert app.exit_code == 130 and app.return_value == 130
    assert process_start_time(server) is None  # the sweep stopped the server it had started
    state = json.loads((out / "sweep.json").read_text())
    assert [s["status"] for s in state["schedule"]] == ["ok", "ok", "crashed", "crashed", "interrupted", "pending"]
