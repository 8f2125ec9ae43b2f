"""UI test helpers: a config built from the CLI's own option names, the app on the engine process
``specload tui`` ships, bounded waits.

(No user themes: the root conftest points ``XDG_CONFIG_HOME`` at an empty folder for every test.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.notifications import Notification, SeverityLevel

from specload.cli_run import build_config, tui_command
from specload.config import RunConfig
from specload.engine.runner import RunnerState


def tui_config(*args: str) -> RunConfig:
    """The RunConfig ``specload tui ARGS`` would build."""
    params = dict(tui_command.make_context("tui", list(args)).params)
    params.pop("headless", None)
    params.pop("theme", None)
    return build_config(params, ui=True)


def live_app(*args: str):  # -> SpecloadApp
    """The app ``specload tui ARGS`` runs: the session in an engine process of its own."""
    from specload.sources.engine_process import ProcessSessionSource
    from specload.ui.app import create_app

    app = create_app(tui_config(*args))
    assert isinstance(app.source, ProcessSessionSource)
    return app


def runner(app) -> RunnerState:  # a running SpecloadApp
    """The runner's state now (the engine's newest frame), once the load is built."""
    rs = app.source.frame().runner
    assert rs is not None, "the load has not started"
    return rs


def notifications(app) -> list[Notification]:  # an App not yet running
    """Every notification the app makes from now on (title, message, severity), kept: a toast on
    screen expires after a few seconds, which a busy machine can outlast; this list does not."""
    said: list[Notification] = []
    notify = app.notify

    def spy(message, *, title: str = "", severity: SeverityLevel = "information", **kw):
        said.append(Notification(str(message), title, severity))
        return notify(message, title=title, severity=severity, **kw)

    app.notify = spy
    return said


def notices(app) -> list[str]:  # an App not yet running
    """Every notice the app shows from now on, as "title: message" (kept, as ``notifications``)."""
    said: list[str] = []
    notify = app.notify

    def spy(message, *, title: str = "", **kw):
        said.append(f"{title}: {message}" if title else str(message))
        return notify(message, title=title, **kw)

    app.notify = spy
    return said


async def load_running(pilot, app, started: int = 1, timeout: float = 20.0) -> None:
    """Until the load runs (``started`` requests so far, one in flight); fails if the run ends first."""
    def running() -> bool:
        assert app.result is None, f"the run ended: {app.result}"
        rs = app.source.frame().runner
        return rs is not None and rs.started >= started and rs.in_flight > 0

    await wait_for(pilot, running, "the load to run", timeout=timeout)


async def quit_app(pilot, app, key: str = "q", timeout: float = 30.0) -> None:
    await pilot.press(key)
    await wait_for(pilot, lambda: app.return_code is not None, f"the app to exit after {key}", timeout=timeout)


async def wait_for(pilot, cond: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Let the app run until ``cond()`` holds; fail (not hang) after ``timeout`` seconds, with what the
    screen showed then."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; the screen:\n"
                                 + screen_text(pilot.app))
        await pilot.pause(0.05)


def screen_text(app) -> str:  # a running App
    """What the screen shows, as plain text (the SVG export splits text at every style change and
    escapes spaces, so a string on screen may not be found in it)."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    # Textual's own compositor: it has no public way to render the screen as text
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def burst(app, *keys: str) -> None:  # a running App
    """Keys as one read of the terminal delivers them: all posted at once, none handled in between
    (``pilot.press`` waits for the app to be idle after every key, which hides races between keys).
    Names as ``pilot.press`` takes them; a single character stands for itself."""
    from textual import events
    from textual.keys import _character_to_key

    for key in keys:
        char = key if len(key) == 1 else {"space": " ", "enter": "\r"}.get(key)
        name = _character_to_key(key) if len(key) == 1 and not key.isalnum() else key
        event = events.Key(name, char)
        event.set_sender(app)
        app._driver.send_message(event)  # as the terminal's driver does: Textual has no public way
