"""What crosses between a run and its dashboard: the ``Frame`` it is shown from, the ``RunControl`` it
is steered through, and the ``RunSource`` that gives both.

A dashboard reads one immutable ``Frame`` per refresh (the stats snapshot, the runner's state, the
state label, the target, the newest log lines, the capacity search) and hears one-off happenings
through a ``SessionListener``; it steers the run only through a ``RunControl``. Nothing here says
where the run is, so one dashboard serves every source of this package. Nothing here imports Textual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from specload.engine.capacity import SearchView
from specload.engine.runner import RunnerState
from specload.session.listener import forwarder
from specload.stats.levels import LevelSummary
from specload.stats.live import StatsSnapshot
from specload.stats.live_judge import LiveView
from specload.stats.lossless import OutputsView
from specload.stats.slo import SloSpec

if TYPE_CHECKING:
    from specload.session import SessionResult
    from specload.session.listener import SessionListener

LOG_TAIL = 200  # lines a frame carries: a person cannot read more per refresh


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What does not change during a run."""

    t0_ns: int  # the run's clock origin (crash times are shown relative to it)
    on_crash: str  # pause, stop, continue
    slo: SloSpec | None  # the latency objectives, drawn on the latency sparklines
    open_loop: bool  # --rate: a capacity search then runs on the rate axis


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything a dashboard shows of a run at one moment. Plain, immutable data."""

    info: RunInfo
    stats: StatsSnapshot
    runner: RunnerState | None  # None until the load is built
    state: str  # the state label: starting, waiting for server, calibrating, ramping, paused, ...
    url: str | None
    model: str | None
    api: str | None
    log: tuple[tuple[int, str], ...]  # the newest server log lines as (sequence number, text)
    search: SearchView | None  # the capacity search, once one ran
    searching: bool  # a capacity search is running now
    live: LiveView | None = None  # --baseline / --target-ci: the running level against its goal
    outputs: OutputsView | None = None  # --check-outputs with --baseline: the answers compared so far
    # while the load is cut (a crash, the server down, a pause): the levels it cut, as they stand; each
    # is replaced by its final summary in ``stats.levels`` once it ends
    cut_levels: tuple[LevelSummary, ...] = ()


class RunControl(Protocol):
    """What a front end may ask of a run. Commands, not queries: their effect shows in the next
    frame, and what they lead to (a level, a marker, a search's result) is heard as run events."""

    def set_target(self, n: int) -> None:
        """A concurrency set by hand: a new held manual level (a running search ends)."""

    def toggle_pause(self) -> None: ...

    def next_level(self) -> None: ...

    def toggle_hold(self) -> None: ...

    def marker(self, note: str) -> None: ...

    def find_max(self, start: float | None) -> None:
        """Start a capacity search from ``start`` (None: from the plan), or stop the running one."""

    def hold_best(self) -> None:
        """Stop a search and hold the load at the best point it found."""

    def quit(self, sig: int | None = None) -> None:
        """No new requests; in-flight ones recorded as cancelled; the record closed; the run ends.
        ``sig``: the signal that asked for it (the record's end says interrupted, the exit status
        128 + sig); None: the end reason says what had happened by then."""


def forwarding_control(forward: Callable[[str, tuple], object]) -> RunControl:
    """A ``RunControl`` whose every command goes to ``forward(name, args)`` (as a message to the
    engine process, where a ``SessionControl`` runs it by that name)."""
    control: RunControl = forwarder(RunControl, forward)
    return control


class RunSource(Protocol):
    @property
    def control(self) -> RunControl | None:  # None: a run that cannot be steered (fixed data)
        """The run's controls (read-only here, so a source may declare a narrower type)."""

    def frame(self) -> Frame:
        """The run now (cheap enough for 4 Hz)."""

    async def run(self, listener: SessionListener) -> SessionResult | None:
        """Drive the source until the run is over, telling ``listener`` what happens; the result
        (None for a source that never ends by itself)."""
