"""A quit that finishes disarms the quit watchdog (ui/watchdog.py).

``q`` arms the watchdog (it ends the process if the quit does not finish); nothing disarmed it once
the app had shut down, so in a process that outlives the app (the test suite) it fired 20 s later
and ended the process with exit status 0: pytest stopped in the middle of the suite, green.
The app arms it only when it is the process (``owns_process``: run_app, run_replay); here the test
makes it so (and puts pytest's signal handlers back after), to see the arming and the disarming.
"""

from __future__ import annotations

import signal

from specload.ui.app import create_app
from tests.ui.conftest import live_app, load_running, notices, tui_config, wait_for


async def test_a_finished_quit_leaves_the_watchdog_disarmed(sim) -> None:
    server = await sim(ttft_ms=5, itl_ms=50, spec_tokens=0)
    app = live_app(server.url, "-c", "1", "-d", "60", "--max-tokens", "4")
    app.owns_process = True
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await load_running(pilot, app)
            await pilot.press("q")
            await wait_for(pilot, lambda: app.watchdog.armed or not app.is_running, "the quit to arm the watchdog")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert app.watchdog.why == "q"  # it was armed by the quit
    assert not app.watchdog.armed


async def test_an_app_hosted_by_another_process_never_arms_the_watchdog(sim) -> None:
    # a Pilot test that fails mid-quit once left the watchdog armed, and a minute later it ended the
    # whole pytest run with os._exit(3): an app that is not the process never arms it
    server = await sim(ttft_ms=5, itl_ms=50, spec_tokens=0)
    # the app's own rule, whatever its source: the session on the app's loop (no process to start)
    app = create_app(tui_config(server.url, "-c", "1", "-d", "60", "--max-tokens", "4"), engine="local")
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    said = notices(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.source.session.runner is not None, "the load to start")
        assert {sig: signal.getsignal(sig) for sig in before} == before  # the host's handlers stay
        await pilot.press("q")
        await wait_for(pilot, lambda: any(s.startswith("quitting") for s in said) or not app.is_running,
                       "the quit to start")
        assert not app.watchdog.armed and app.watchdog.why == ""
