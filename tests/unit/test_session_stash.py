"""What the record sink holds while a server starts is bounded: a server may log for many minutes
while it loads, and a flood before the record exists must not grow memory."""

from __future__ import annotations

from specload.clock import FakeClock
from specload.config import RecordConfig
from specload.datatypes import ServerSample
from specload.record.reader import read_record
from specload.record.sink import MAX_STASH, RecordSink
from specload.secrets import Scrubber


def test_lines_held_before_the_record_opens_are_bounded_and_counted(tmp_path) -> None:
    rec = tmp_path / "r.jsonl"
    notices: list[str] = []
    sink = RecordSink(RecordConfig(path=str(rec)), clock=FakeClock(), t0_ns=0, scrub=Scrubber(),
                      on_error=notices.append, on_notice=notices.append)
    for i in range(MAX_STASH + 5):
        sink.server(ServerSample(t_ns=i, source="log:sglang", running=1.0))
    assert len(sink.stash) == MAX_STASH and sink.stash_dropped == 5
    sink.open({"target": None})
    assert sink.close("stopped", header={}) is None
    assert len(read_record(str(rec)).servers) == MAX_STASH
    assert notices == [f"5 record lines from while the server started were not kept (more than {MAX_STASH})"]


def test_without_a_record_nothing_is_held(tmp_path) -> None:
    sink = RecordSink(RecordConfig(), clock=FakeClock(), t0_ns=0, scrub=Scrubber(), on_error=print,
                      on_notice=print)
    sink.server(ServerSample(t_ns=0, source="metrics"))
    assert sink.stash == [] and sink.close("completed", header={}) is None
