"""Ray actors on other machines: their clock offset from round trips, and records moved onto the
driver's timeline with durations untouched. Pure arithmetic, no Ray needed."""

from __future__ import annotations

from specload.datatypes import RequestRecord
from specload.engine.ray_workers import offset_sample
from specload.engine.workers import Worker, aligned

SKEW = 5_000_000_000  # the actor's CLOCK_MONOTONIC reads 5 s ahead of the driver's


def test_the_offset_comes_from_the_shortest_round_trip() -> None:
    a = Worker(0, handle=None)
    # (driver send, actor clock when it answered, driver receive): the answer of the first sample
    # sat in a queue on the way back, which puts its midpoint 400 us off
    offset_sample(a, 1_000_000, SKEW + 1_900_000, 2_000_000)  # rtt 1 ms
    assert a.rtt_ns == 1_000_000 and a.offset_ns == SKEW + 400_000
    offset_sample(a, 10_000_000, SKEW + 10_050_000, 10_100_000)  # rtt 100 us, midpoint exact
    assert a.rtt_ns == 100_000 and a.offset_ns == SKEW
    offset_sample(a, 20_000_000, SKEW + 20_500_000, 22_000_000)  # a slower one changes nothing
    assert a.rtt_ns == 100_000 and a.offset_ns == SKEW


def test_records_move_onto_the_driver_clock_with_their_durations_intact() -> None:
    a = Worker(0, handle=None, offset_ns=SKEW)
    rec = RequestRecord(7, 4, 0, False, SKEW + 1_000, SKEW + 901_000, 20_000, 900_000, 40, False, 8, 40,
                        chunk_offsets_ns=(20_000, 900_000))
    moved = aligned(rec, a)
    assert (moved.start_ns, moved.end_ns) == (1_000, 901_000)
    assert (moved.ttft_ns, moved.e2e_ns, moved.chunk_offsets_ns) == (20_000, 900_000, (20_000, 900_000))
    same = Worker(1, handle=None, same_machine=True)
    assert aligned(rec, same) is rec  # one machine, one clock: nothing to move
