"""A request record survives the trip between a worker process and the main one unchanged."""

from __future__ import annotations

import orjson

from specload.datatypes import ErrorKind, Output, RequestRecord
from specload.engine.workers import record_from_wire, record_to_wire


def test_record_round_trips_through_json() -> None:
    full = RequestRecord(1, 2, 0, False, 5, 9, 1, 4, 3, False, 7, 2, (1, 4), (1, 2), ErrorKind.STALL, "x", 200, 1,
                         3, {"prompt_ms": 1.5}, "length")
    bare = RequestRecord(2, 4, 1, True, 5, 9, None, None, 0, True, None, 0)
    answered = RequestRecord(3, 1, 0, False, 5, 9, 1, 4, 2, False, 7, 2, prompt_id="synthetic:s0:3", prompt_sha="ab",
                             output=Output(" a b", 4, (" a", " b"), (-0.1, None), (2.5, None), 2, unscored=1))
    for rec in (full, bare, answered):
        assert record_from_wire(orjson.loads(orjson.dumps(record_to_wire(rec)))) == rec
