"""Fixed data for the dashboard: no run, no control (snapshot tests, screenshots)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specload.engine.capacity import SearchView
from specload.engine.runner import RunnerState
from specload.sources.frame import Frame, RunControl, RunInfo
from specload.stats.live import StatsSnapshot
from specload.stats.live_judge import LiveView
from specload.stats.slo import SloSpec

if TYPE_CHECKING:
    from specload.session import SessionResult
    from specload.session.listener import SessionListener


class StaticSource:
    """A frame set by hand: what the dashboard shows until ``set_frame`` moves it on."""

    control: RunControl | None = None

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
        search: SearchView | None = None,
        slo: SloSpec | None = None,
        control: RunControl | None = None,
        live: LiveView | None = None,
    ) -> None:
        self.control = control
        self._frame = Frame(
            info=RunInfo(t0_ns=t0_ns, on_crash="pause", slo=slo, open_loop=False),
            stats=snapshot, runner=runner_state, state=state, url=url, model=model, api=api,
            log=tuple(enumerate(log_lines or [], start=1)), search=search, searching=False, live=live,
        )

    def frame(self) -> Frame:
        return self._frame

    def set_frame(self, frame: Frame) -> None:
        """What the next sample shows (a test moves the fixed data on)."""
        self._frame = frame

    async def run(self, listener: SessionListener) -> SessionResult | None:
        return None
