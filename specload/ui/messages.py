"""The session's happenings as typed Textual messages.

``MessageListener`` is the TUI's ``SessionListener``: the session calls it synchronously in the event
loop and each call becomes a message the app posts to itself, so every discrete event (a crash, a level
finishing, the end of the run) goes through Textual's queue and is handled between frames, never in
the middle of the engine's callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from specload.records import CrashEvent, RunEvent
from specload.session import SessionResult
from specload.stats.client_load import ClientLoad
from specload.stats.levels import LevelSummary


@dataclass
class SessionNotice(Message):
    text: str


@dataclass
class PhaseChanged(Message):
    phase: str


@dataclass
class TargetFound(Message):
    url: str
    model: str
    api: str


@dataclass
class RunEventPosted(Message):
    event: RunEvent


@dataclass
class LevelFinished(Message):
    summary: LevelSummary


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

    def phase(self, phase: str) -> None:
        self.post(PhaseChanged(phase))

    def notice(self, text: str) -> None:
        self.post(SessionNotice(text))

    def target_found(self, url: str, model: str | None, api: str) -> None:
        self.post(TargetFound(url, model or "", api))

    def run_event(self, event: RunEvent) -> None:
        self.post(RunEventPosted(event))

    def level_done(self, summary: LevelSummary) -> None:
        self.post(LevelFinished(summary))

    def crash(self, crash: CrashEvent) -> None:
        self.post(CrashReported(crash))

    def client_load(self, load: ClientLoad, level: int) -> None:
        if load.saturated or load.starved:  # the dashboard shows the figures; only warnings are messages
            self.post(ClientLoadReported(load, level))

    def ended(self, result: SessionResult) -> None:
        self.post(SessionEnded(result))
