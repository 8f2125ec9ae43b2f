"""Typed run events: each writes the event line the record has always had, and reads back from it.

``tests/data/event_lines.jsonl`` was written by main before events were typed, from the values its
producers made (``RunEvent(t, "level", {...})``); the typed events below must write the same bytes."""

from __future__ import annotations

from pathlib import Path

from specload.clock import FakeClock
from specload.datatypes import (
    ConcurrencyChanged,
    HealthChanged,
    LevelStarted,
    LoadControl,
    Marker,
    Noted,
    RunEvent,
    SearchProgress,
    ServerExited,
    WorkerDied,
    event_from_record,
)
from specload.record.writer import Recorder

T = 2_000_000_000
EVENTS: list[RunEvent] = [
    Noted(T, "calibration", {"prompts": {"method": "tokenize", "tokens_per_word": 1.9298},
                             "requests": [{"path": "/tokenize", "status": 200}]}),
    Noted(T, "probe", {"requests": [{"path": "/v1/models", "status": 200}]}),
    Noted(T + 1, "expect", {"pattern": "ready", "seen": True}),
    HealthChanged(T + 2, "up"),
    ConcurrencyChanged(T + 3, 4),
    LevelStarted(T + 4, 0, 4, False),
    LevelStarted(T + 5, 1, 8, False, repeat=1, rate=2.5, probe=True),
    LevelStarted(T + 6, 2, 3, True),
    LoadControl(T + 7, "pause", 4),
    LoadControl(T + 8, "resume", 4),
    LoadControl(T + 9, "hold", True),
    LoadControl(T + 10, "hold", False),
    LoadControl(T + 11, "next", 2),
    LoadControl(T + 12, "next", -1),
    Marker(T + 13, "before the change"),
    Marker(T + 14, ""),
    SearchProgress(T + 15, {"phase": "start", "start": 4.0, "slo": None, "axis": "concurrency"}),
    Noted(T + 16, "prompt_length", {"level_index": 0, "concurrency": 4, "requested_avg": 128.0, "server_avg": 313.0}),
    Noted(T + 17, "fresh_connections", {"stale_closes": 3}),
    Noted(T + 18, "fresh_connections", {"stale_closes": 3, "worker": 1}),
    WorkerDied(T + 19, 1, "worker 1 (pid 5) was killed by SIGKILL", 1),
    Noted(T + 20, "gpu_fault", {"kind": "xid", "message": "XID 79 on GPU 0", "gpu": 0}),
    Noted(T + 21, "gpu_fault", {"kind": "missing", "message": "no nvidia-smi", "gpu": None}),
    HealthChanged(T + 22, "down"),
    ServerExited(T + 23, "exited with code 1"),
    Noted(T + 24, "error", "the server went away"),
]


def test_every_kind_writes_the_line_it_wrote_before_events_were_typed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    rec = Recorder(str(path), clock=FakeClock(start_ns=5_000_000_000), t0_ns=1_000_000_000)
    rec.open({})
    for ev in EVENTS:
        rec.event(ev)
    rec.close("stopped")
    lines = [ln for ln in path.read_bytes().splitlines() if ln.startswith(b'{"type":"event"')]
    golden = (Path(__file__).parent.parent / "data" / "event_lines.jsonl").read_bytes().splitlines()
    assert lines == golden


def test_each_line_reads_back_as_the_event_that_wrote_it() -> None:
    for ev in EVENTS:
        back = event_from_record(ev.t_ns, ev.kind, ev.value)
        assert back == ev and type(back) is type(ev)


def test_a_value_not_of_its_kinds_shape_is_kept_as_a_note() -> None:
    # a hostile or foreign record: nothing is guessed, nothing raises, the line's data is kept
    for kind, value in [("level", {"index": "x", "concurrency": 4}), ("level", [1, 2]), ("concurrency", "8"),
                        ("concurrency", True), ("pause", None), ("hold", 1), ("health", 5), ("marker", 7),
                        ("search", "start"), ("worker_lost", {"worker": None}), ("something_new", {"a": 1})]:
        assert event_from_record(9, kind, value) == Noted(9, kind, value), (kind, value)
    assert event_from_record(9, "marker", None) == Marker(9, "")
    odd = event_from_record(9, "level", {"index": 2, "concurrency": 3, "repeat": "x", "rate": True})
    assert odd == LevelStarted(9, 2, 3, False)  # the parts it can read, the rest as if absent
