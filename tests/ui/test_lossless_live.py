"""--check-outputs against a --baseline in the dashboard, on the engine process ``specload tui`` ships:
the identical share beside the level's bar as answers arrive, and a divergence alerted as a crash is
(an error notification naming the prompt, the position and both answers, and the bell)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specload.record.reader import read_record
from specload.ui.widgets.value import ValueLabel
from tests.ui.conftest import live_app, notifications, quit_app, wait_for
from tests.virtual_runs import virtual_record


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The baseline: no speculation, answers recorded (made in virtual time, before the test's loop)."""
    return virtual_record(tmp_path / "base.jsonl", levels=(2,), n=8, seed=3, label="base",
                          sim={"step_ms": 5, "spec_tokens": 0}, fields={"check_outputs": True})


async def test_divergence_is_alerted_and_the_share_shown(sim, base: Path, tmp_path: Path) -> None:
    server = await sim(ttft_ms=2, itl_ms=2, spec_tokens=3, accept_rate=0.9, spec_bug_rate=0.5)
    record = tmp_path / "live.jsonl"
    app = live_app(server.url, "-c", "2", "-n", "8", "--api", "chat", "--ignore-eos", "--max-tokens", "32",
                   "--check-outputs", "--baseline", str(base), "--record", str(record))
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    said = notifications(app)
    async with app.run_test(size=(120, 40)) as pilot:
        def alerted() -> bool:
            return any(n.title == "✖ OUTPUT DIVERGES" for n in said)

        await wait_for(pilot, alerted, "the divergence alert", timeout=60)
        (note,) = [n for n in said if n.title == "✖ OUTPUT DIVERGES"]
        assert note.severity == "error" and "prompt synthetic:s0:" in note.message and "token " in note.message
        assert "baseline: …" in note.message and "this run: …" in note.message
        assert bells
        live = app.query_one("#load-live", ValueLabel)
        await wait_for(pilot, lambda: "DIVERGE" in str(live.render()), "the share beside the bar", timeout=10)
        assert "same" in str(live.render())
        await pilot.pause()
        shown = str(live.render())  # all of it on screen: the label grew with its text
        assert live.region.width >= len(shown) and live.region.right <= app.size.width, (live.region, shown)
        # the TUI's default is to go on: the level runs to its end, every answer compared
        await wait_for(pilot, lambda: app.outputs is not None and app.outputs.compared == 8, "8 answers compared",
                       timeout=60)
        await quit_app(pilot, app)
    assert app.return_value == 7  # what run_app exits with: the run's answer is still no
    data = read_record(str(record))
    (found,) = [e["value"] for e in data.events if e["kind"] == "divergence"]
    assert found["a"] != found["b"] and found["concurrency"] == 2
