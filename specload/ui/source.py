"""What the app reads from: a live ``Session`` or a fixed stand-in with the same read methods.

The app never reaches into the engine for data; it samples a ``DataSource`` on a timer. A ``Session``
is one as it is. ``StaticSource`` serves fixed values, so snapshot tests (and screenshots) render a
mid-run dashboard without a server, a clock or a race: its elapsed time is whatever the snapshot says.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from specload.engine.runner import RunnerState
from specload.record.live import LiveView
from specload.stats.live import StatsSnapshot


class DataSource(Protocol):
    url: str | None
    model: str | None
    api: str | None
    t0_ns: int
    log_lines: deque[tuple[int, str]]

    def snapshot(self) -> StatsSnapshot: ...

    def runner_state(self) -> RunnerState | None: ...

    def state_label(self) -> str: ...


class StaticSource:
    """Fixed data for the dashboard: no run, no controls (``runner`` is None)."""

    runner = None

    def __init__(
        self,
        snapshot: StatsSnapshot,
        runner_state: RunnerState | None = None,
        *,
        state: str = "ramping",
        url: str | None = "http://127.0.0.1:8000",
        model: str | None = "sim-model",
        api: str | None = "chat",
        t0_ns: int = 0,
        log_lines: list[str] | None = None,
        live: LiveView | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._runner_state = runner_state
        self._state = state
        self.url, self.model, self.api = url, model, api
        self.t0_ns = t0_ns
        self.log_lines: deque[tuple[int, str]] = deque(enumerate(log_lines or [], start=1))
        self._live = live

    def live_view(self) -> LiveView | None:
        return self._live

    def snapshot(self) -> StatsSnapshot:
        return self._snapshot

    def runner_state(self) -> RunnerState | None:
        return self._runner_state

    def state_label(self) -> str:
        return self._state
