"""--baseline with a dataset's categories in the dashboard, on the engine process ``specload tui``
ships: at the ramp's end each category is judged against the baseline as ``report BASE RUN`` judges
it (a dialog; v shows it again), and the summary printed after q has the same table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specload.headless import print_tui_end
from specload.report.compare import VERDICT_TEXT
from specload.report.report import report_command
from specload.ui.screens import CategoryScreen
from tests.ui.conftest import live_app, quit_app, screen_text, wait_for
from tests.virtual_runs import virtual_record

DATASET = "builtin:coding,creative"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The baseline: no speculation, natural stops as the live run (made in virtual time, before the
    test's loop)."""
    return virtual_record(tmp_path / "base.jsonl", levels=(2,), n=24, seed=1, label="base",
                          sim={"step_ms": 4, "spec_tokens": 0}, fields={"dataset": DATASET, "ignore_eos": False})


@pytest.mark.timeout(300)  # at load 12 the 24 requests took 95 s, start-up included
async def test_the_ramps_end_shows_each_categorys_verdict(sim, base: Path, tmp_path: Path) -> None:
    server = await sim(step_ms=4, spec_tokens=3, accept_rate=0.7, draft_cost=0.4)
    record = tmp_path / "live.jsonl"
    app = live_app(server.url, "-c", "2", "-n", "24", "--dataset", DATASET, "--max-tokens", "32",
                   "--baseline", str(base), "--record", str(record))
    async with app.run_test(size=(120, 40)) as pilot:
        def finished() -> bool:
            rs = app.source.frame().runner
            return rs is not None and rs.state == "finished"

        await wait_for(pilot, finished, "the ramp to end", timeout=240)
        await wait_for(pilot, lambda: isinstance(app.screen, CategoryScreen), "the verdicts by category",
                       timeout=30)
        await wait_for(pilot, lambda: "by category" in screen_text(app), "the dialog drawn")
        shown = screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CategoryScreen), "the dialog to close")
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, CategoryScreen), "v to show it again")
        await pilot.press("escape")
        await quit_app(pilot, app)
    # what report BASE RUN says of each category, from the same two files
    out = CliRunner().invoke(report_command, [str(base), str(record), "--json"])
    assert out.exit_code == 0, out.output
    (lv,) = json.loads(out.output)["levels"]
    label = next(s for s in lv["sides"] if s != "base")
    verdicts = {cat: side[label]["per_request_tok_s"]["verdict"] for cat, side in lv["categories"].items()}
    assert set(verdicts) == {"coding", "creative"}
    assert "by category: this run / baseline" in shown
    # the baseline has no speculation: no acceptance to set against, so none is judged ("- ? insufficient")
    assert "- ?" not in shown, shown
    for cat, verdict in verdicts.items():
        (row,) = [line for line in shown.splitlines() if f" {cat} " in line]
        # the screen's wording ("no difference"), not the JSON's key ("no_difference")
        assert VERDICT_TEXT[verdict] in row, (cat, verdict, row)
    # the summary run_app prints once the dashboard has gone: the same table below the levels
    stream = io.StringIO()
    print_tui_end(app.result, str(record), stream=stream, cfg=app.source.cfg)
    text = stream.getvalue()
    assert "by category: this run / baseline" in text and "coding" in text and "creative" in text
