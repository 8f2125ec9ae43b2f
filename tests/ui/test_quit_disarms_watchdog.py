"""A quit that finishes disarms the quit watchdog (ui/watchdog.py).

``q`` arms the watchdog (it ends the process if the quit does not finish); nothing disarmed it once
the app had shut down, so in a process that outlives the app (the test suite) it fired 20 s later
and ended the process with exit status 0: pytest stopped in the middle of the suite, green.
"""

from __future__ import annotations

from specload.ui.app import create_app
from tests.ui.conftest import tui_config, wait_for


async def test_a_finished_quit_leaves_the_watchdog_disarmed(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=50, spec_tokens=0)
    app = create_app(tui_config(server.url, "-c", "1", "-d", "60", "--max-tokens", "4"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.source.session.runner is not None, "the load to start")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.watchdog.armed or not app.is_running, "the quit to arm the watchdog")
    assert app.watchdog.why == "q"  # it was armed by the quit
    assert not app.watchdog.armed
