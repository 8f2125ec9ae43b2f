"""The one-off happenings of a run as typed Textual messages: what the dashboard announces.

``MessageListener`` is the TUI's ``SessionListener``. State (levels, crashes, the target, the phase)
reaches the screen only through the frame the app samples; a message is posted only for what happens
once and is announced: a notice, a marker, the launched server's exit, a search's progress, a new
crash (alert, bell, flash), a saturation warning, the end of the run. Messages go through Textual's
queue and are handled between frames, never in the middle of the engine's callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from specload.datatypes import (
    CrashEvent,
    Marker,
    OutputDiverged,
    RunEvent,
    SearchProgress,
    ServerExited,
    WorkerDied,
)
from specload.session import SessionResult
from specload.stats.client_load import ClientLoad
from specload.stats.levels import LevelSummary


@dataclass
class SessionNotice(Message):
    text: str


@dataclass
class RunEventPosted(Message):
    event: RunEvent


@dataclass
class CrashReported(Message):
    crash: CrashEvent


@dataclass
class ClientLoadReported(Message):
    load: ClientLoad
    level: int


@dataclass
class SessionEnded(Message):
    result: SessionResult


class MessageListener:
    """A ``SessionListener`` posting one message per call (``post`` is the app's ``post_message``)."""

    def __init__(self, post: Callable[[Message], object]) -> None:
        self.post = post

    ANNOUNCED = (Marker, ServerExited, SearchProgress, WorkerDied, OutputDiverged)

    def phase(self, phase: str) -> None:
        pass  # state: in the frame

    def notice(self, text: str) -> None:
        self.post(SessionNotice(text))

    def target_found(self, url: str, model: str | None, api: str) -> None:
        pass  # state: in the frame

    def run_event(self, event: RunEvent) -> None:
        if isinstance(event, self.ANNOUNCED):
            self.post(RunEventPosted(event))

    def level_done(self, summary: LevelSummary) -> None:
        pass  # state: in the frame (the level table and the chart)

    def crash(self, crash: CrashEvent) -> None:
        if crash.new:  # the table shows repeats through the frame; only a new signature is alerted
            self.post(CrashReported(crash))

    def client_load(self, load: ClientLoad, level: int) -> None:
        if load.saturated or load.starved:  # the dashboard shows the figures; only warnings are messages
            self.post(ClientLoadReported(load, level))

    def ended(self, result: SessionResult) -> None:
        self.post(SessionEnded(result))
