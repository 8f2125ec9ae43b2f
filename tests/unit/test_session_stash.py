"""What the session holds for the record while a server starts is bounded: a server may log for
many minutes while it loads, and a flood before the record exists must not grow memory."""

from __future__ import annotations

from specload.config import RunConfig
from specload.record.reader import read_record
from specload.records import ServerSample
from specload.session import MAX_STASH, Session


def test_lines_held_before_the_record_opens_are_bounded_and_counted(tmp_path) -> None:
    rec = tmp_path / "r.jsonl"
    cfg = RunConfig.of("http://127.0.0.1:9", api="chat", concurrency=(1,), requests_per_level=1, path=str(rec))
    notices: list[str] = []
    session = Session(cfg, listener=lambda kind, payload: notices.append(str(payload)) if kind == "notice" else None)
    for i in range(MAX_STASH + 5):
        session._to_record("server", ServerSample(t_ns=i, source="log:sglang", running=1.0))
    assert len(session._stash) == MAX_STASH
    session._open_recorder()
    session.recorder.close("stopped")
    assert len(read_record(str(rec)).servers) == MAX_STASH
    assert any(f"5 record lines from while the server started were not kept (more than {MAX_STASH})" in n
               for n in notices)
