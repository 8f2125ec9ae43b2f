"""Each rule that ends a level, alone, on a fake clock (engine/level_end.py)."""

from __future__ import annotations

from specload.clock import FakeClock
from specload.engine.level_end import (
    Duration,
    JudgeExtension,
    Level,
    MaxDuration,
    MaxRequests,
    Quota,
    ReplayedPauses,
    SearchProbe,
    Step,
)
from specload.plan import LevelSpec


def level(clock: FakeClock, spec: LevelSpec, **kw) -> Level:
    lv = Level(spec, 0, clock, **kw)
    lv.start_clock()
    return lv


async def test_a_duration_counts_active_time_only_and_a_held_level_has_none() -> None:
    clock, rule = FakeClock(), Duration()
    lv = level(clock, LevelSpec(4, duration_s=2.0))
    clock.advance(1.5)
    assert await rule.check(lv) is Step.GO
    assert abs(rule.due_in_s(lv) - 0.501) < 1e-9  # just past its end
    lv.stop_clock()  # paused: the time does not count, nothing is due
    clock.advance(10)
    assert await rule.check(lv) is Step.GO and rule.due_in_s(lv) is None
    lv.start_clock()
    clock.advance(0.5)
    assert lv.active_s() == 2.0 and await rule.check(lv) is Step.END
    lv.held = True
    assert await rule.check(lv) is Step.GO and rule.due_in_s(lv) is None
    assert await rule.check(level(clock, LevelSpec(4, requests=3))) is Step.GO  # no duration: no say


async def test_a_count_ends_the_level_unless_held() -> None:
    lv, rule = level(FakeClock(), LevelSpec(2, requests=3)), Quota()
    lv.started = 2
    assert await rule.check(lv) is Step.GO
    lv.started = 3
    assert await rule.check(lv) is Step.END
    lv.held = True
    assert await rule.check(lv) is Step.GO
    assert rule.due_in_s(lv) is None


async def test_the_judge_extends_a_level_at_its_count_while_it_wants_more() -> None:
    asked: list[tuple[int, int]] = []
    answers = [5, 0]

    def extend(index: int, started: int) -> int:
        asked.append((index, started))
        return answers.pop(0)

    rule = JudgeExtension(lambda: extend)
    lv = level(FakeClock(), LevelSpec(2, requests=10))
    lv.started = 9
    assert await rule.check(lv) is Step.GO and asked == []  # not at its count yet
    lv.started = 10
    assert await rule.check(lv) is Step.AGAIN and lv.quota == 15
    lv.started = 15
    assert await rule.check(lv) is Step.END
    assert asked == [(0, 10), (0, 15)]
    warm = level(FakeClock(), LevelSpec(2, requests=2), warmup=True)
    warm.started = 2
    assert await rule.check(warm) is Step.GO  # the warm-up is never judged
    assert await JudgeExtension(lambda: None).check(lv) is Step.GO  # no judge: the count decides


async def test_a_search_probe_asks_its_source_and_only_a_sourced_level_does() -> None:
    class Source:
        def __init__(self) -> None:
            self.more = [3, 0]

        async def next_level(self, level_index: int) -> LevelSpec | None:
            return None

        async def more_requests(self, level_index: int, started: int) -> int:
            return self.more.pop(0)

    source: Source | None = Source()
    rule = SearchProbe(lambda: source)
    probe = level(FakeClock(), LevelSpec(8, requests=4), sourced=True)
    probe.started = 4
    assert await rule.check(probe) is Step.AGAIN and probe.quota == 7
    probe.started = 7
    assert await rule.check(probe) is Step.END
    planned = level(FakeClock(), LevelSpec(8, requests=4))
    planned.started = 4
    assert await rule.check(planned) is Step.GO  # a planned level is the count's
    source = None  # the search was stopped: the level is the judge's or the count's again
    assert await rule.check(probe) is Step.GO


async def test_a_replayed_pause_pauses_at_its_active_time_for_its_length() -> None:
    clock = FakeClock()
    calls: list[object] = []
    lv = level(clock, LevelSpec(2, requests=100, pauses=((1.0, 0.25), (3.0, 0.5))))
    rule = ReplayedPauses(lambda: calls.append("pause"), lambda: calls.append("resume"),
                          later=lambda s, f: calls.append(("resume in", s, f)))
    clock.advance(0.9)
    assert await rule.check(lv) is Step.GO and abs(rule.due_in_s(lv) - 0.101) < 1e-9
    clock.advance(0.1)
    assert await rule.check(lv) is Step.AGAIN and lv.pauses == [(3.0, 0.5)]
    assert calls[0] == "pause" and calls[1][:2] == ("resume in", 0.25)
    calls[1][2]()  # the resume, when its time comes
    assert calls[-1] == "resume"
    clock.advance(2.5)  # the next one is due (active 3.5 s), but the run was paused meanwhile
    lv.stop_clock()
    assert await rule.check(lv) is Step.GO and rule.due_in_s(lv) is None and len(calls) == 3
    lv.start_clock()
    assert await rule.check(lv) is Step.AGAIN and calls[3] == "pause" and calls[4][1] == 0.5


async def test_the_run_bounds_end_the_run_also_while_held() -> None:
    stopped: list[str] = []
    started = [9]
    rule = MaxRequests(10, lambda: started[0], lambda: stopped.append("stop"))
    lv = level(FakeClock(), LevelSpec(2), held=True)
    assert await rule.check(lv) is Step.GO
    started[0] = 10
    assert await rule.check(lv) is Step.END and stopped == ["stop"]

    clock = FakeClock()
    bound = MaxDuration(5.0, clock, lambda: stopped.append("end"))
    lv = level(clock, LevelSpec(2), held=True)
    lv.stop_clock()  # paused: the wall time still counts
    clock.advance(4)
    assert await bound.check(lv) is Step.GO and bound.due_in_s(lv) == 1.0
    clock.advance(1)
    assert await bound.check(lv) is Step.END and stopped == ["stop", "end"]
    unbounded = MaxDuration(None, clock, lambda: stopped.append("never"))
    assert unbounded.left_s() is None and not unbounded.over() and stopped == ["stop", "end"]
