"""The session's pushed happenings as Textual messages.

The session calls one ``listener(kind, payload)`` synchronously in the event loop; ``to_message``
turns each call into a ``Message`` the app posts to itself, so every discrete event (a crash, a level
finishing, the end of the run) goes through Textual's queue and is handled between frames, never in
the middle of the engine's callback.
"""

from __future__ import annotations

from textual.message import Message

from specload.records import CrashEvent, RunEvent
from specload.stats.levels import LevelSummary


class SessionNotice(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PhaseChanged(Message):
    def __init__(self, phase: str) -> None:
        super().__init__()
        self.phase = phase


class TargetFound(Message):
    def __init__(self, url: str, model: str, api: str) -> None:
        super().__init__()
        self.url, self.model, self.api = url, model, api


class RunEventPosted(Message):
    def __init__(self, event: RunEvent) -> None:
        super().__init__()
        self.event = event


class LevelFinished(Message):
    def __init__(self, summary: LevelSummary) -> None:
        super().__init__()
        self.summary = summary


class CrashReported(Message):
    def __init__(self, crash: CrashEvent) -> None:
        super().__init__()
        self.crash = crash


class ClientSaturated(Message):
    """specload was behind in an interval: ``text`` says whether it was saturated or starved."""

    def __init__(self, cpu_pct: float, loop_lag_ms: float, level: int, starved: bool = False, text: str = "") -> None:
        super().__init__()
        self.cpu_pct, self.loop_lag_ms, self.level = cpu_pct, loop_lag_ms, level
        self.starved, self.text = starved, text


class WaitingForServer(Message):
    def __init__(self, elapsed_s: float, last_line: str | None) -> None:
        super().__init__()
        self.elapsed_s, self.last_line = elapsed_s, last_line


class SessionEnded(Message):
    def __init__(self, result: object) -> None:
        super().__init__()
        self.result = result  # a SessionResult


def to_message(kind: str, payload: object) -> Message | None:
    """The message for one listener call, or None for a kind the UI does not show."""
    if kind == "notice":
        return SessionNotice(str(payload))
    if kind == "phase":
        return PhaseChanged(str(payload))
    if kind == "target":
        d = payload if isinstance(payload, dict) else {}
        return TargetFound(str(d.get("url")), str(d.get("model")), str(d.get("api")))
    if kind == "event" and isinstance(payload, RunEvent):
        return RunEventPosted(payload)
    if kind == "level" and isinstance(payload, LevelSummary):
        return LevelFinished(payload)
    if kind == "crash" and isinstance(payload, CrashEvent):
        return CrashReported(payload)
    if kind == "saturated":
        load, level = payload  # type: ignore[misc]
        return ClientSaturated(load.cpu_pct, load.loop_lag_ms, int(level), load.starved, load.warning(int(level)))
    if kind == "waiting":
        elapsed, line = payload  # type: ignore[misc]
        return WaitingForServer(float(elapsed), line)
    if kind == "end":
        return SessionEnded(payload)
    return None
