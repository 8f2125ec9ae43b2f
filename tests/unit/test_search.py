"""The capacity search's rules, driven by made-up servers: no clock, no HTTP.

Each fake server is a throughput curve T(load) and an objectives rule; ``drive`` runs the search
loop the way the engine's driver does (next probe, looks at each quota, observe) and records what
was probed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from specload.engine.search import (
    MET,
    MISSED,
    NONE,
    RATE,
    UNDECIDED,
    CapacitySearch,
    Interval,
    ProbeOutcome,
    SearchSettings,
    efficiency,
)


def batch_limited(max_batch: float, slope: float = 0.0) -> Callable[[float], float]:
    """The simulator's batch model: C streams decode together up to max_batch, each step slower by
    ``slope`` per extra sequence; beyond max_batch requests queue and throughput stays flat."""

    def t(c: float) -> float:
        b = min(c, max_batch)
        return 1000.0 * b / (1.0 + slope * (b - 1))

    return t


def outcome(value: float, t: float, objectives: str = NONE, *, rel: float = 0.01, requests: int = 100,
            complete: bool = True) -> ProbeOutcome:
    return ProbeOutcome(value=value, requests=requests, objectives=objectives,
                        throughput=Interval(t, t * (1 - rel), t * (1 + rel)), complete=complete,
                        req_s=Interval.exact(t / 100), goodput_tok_s=Interval.exact(t))


def drive(search: CapacitySearch, curve: Callable[[float], float],
          objectives: Callable[[float, int], str] = lambda c, n: NONE,
          rel: Callable[[int], float] = lambda n: 0.01, elapsed: Callable[[int], float] = lambda i: 0.0,
          client: Callable[[float, int], str | None] = lambda c, k: None) -> list[float]:
    """``client(load, k)``: what the client was at the k-th probe of that load (None: fine)."""
    probed = []
    i = 0
    while (plan := search.next_probe(elapsed(i))) is not None:
        i += 1
        probed.append(plan.value)
        started = plan.requests
        while True:
            partial = outcome(plan.value, curve(plan.value), objectives(plan.value, started), rel=rel(started))
            more = search.look(partial, started, elapsed(i))
            if not more:
                break
            started += more
        flag = client(plan.value, probed.count(plan.value))
        # a client that could not keep up measured less than the server gave
        t = curve(plan.value) * (0.5 if flag else 1.0)
        final = outcome(plan.value, t, objectives(plan.value, started), rel=rel(started), requests=started)
        search.observe(replace(final, client=flag))
    return probed


def test_the_knee_of_a_batch_limit_is_found_exactly() -> None:
    s = CapacitySearch(SearchSettings())
    probed = drive(s, batch_limited(8))
    r = s.result()
    assert probed[:5] == [1, 2, 4, 8, 16]  # grows geometrically until a step up adds nothing
    assert r.best is not None and r.best.value == 8
    assert r.knee.value == 8 and r.knee.reached
    assert r.limited_by == "saturation" and r.reason == "found"


def test_a_knee_inside_a_geometric_step_is_bisected_from_below() -> None:
    # probes 8 -> 16 still gain (e = 0.25), 16 -> 32 does not: the knee is in (8, 16]
    s = CapacitySearch(SearchSettings())
    probed = drive(s, batch_limited(10))
    r = s.result()
    assert r.knee.value == 10 and r.knee.below == 9
    assert r.best is not None and r.best.value == 10
    assert set(probed) >= {8, 16, 32, 12, 10, 9}


def test_a_concave_curve_with_batch_slowdown_reaches_its_knee_before_the_batch_limit() -> None:
    # the simulator's default timing: each extra sequence makes a step 3 % slower, so throughput
    # C / (1 + 0.03 (C - 1)) reaches 95 % of its plateau (at the batch limit, 32) at C = 29
    s = CapacitySearch(SearchSettings(resolution=0.0))
    drive(s, batch_limited(32, slope=0.03))
    assert s.result().knee.value == 29 and s.result().knee.below == 28
    assert s.result().best.value == 29


def test_a_curve_that_keeps_growing_slowly_has_no_plateau() -> None:
    # +19 % per doubling: every step still adds tokens (efficiency 0.19), although a 16-fold span
    # averages below 0.1; the search grows until the objectives stop it
    s = CapacitySearch(SearchSettings())
    drive(s, lambda c: 1000.0 * c**0.25, objectives=lambda c, n: MET if c <= 200 else MISSED)
    r = s.result()
    assert not r.knee.reached and r.limited_by == "objectives"
    assert abs(r.best.value - 200) <= 20


def test_objectives_limit_the_load_before_saturation() -> None:
    s = CapacitySearch(SearchSettings())
    drive(s, batch_limited(1000), objectives=lambda c, n: MET if c <= 12 else MISSED)
    r = s.result()
    assert r.best is not None and r.best.value == 12
    assert r.bracket == (12, 13)
    assert r.limited_by == "objectives"
    assert not r.knee.reached  # throughput still scaled at every probe


def test_a_wide_bracket_is_narrowed_to_the_resolution() -> None:
    s = CapacitySearch(SearchSettings(resolution=0.1))
    drive(s, batch_limited(1000), objectives=lambda c, n: MET if c <= 100 else MISSED)
    lo, hi = s.result().bracket
    assert lo <= 100 < hi and hi - lo <= max(1, 0.1 * lo)


def test_undecided_objectives_get_more_requests_up_to_the_cap_then_count_as_not_met() -> None:
    looks: list[int] = []

    def objectives(c: float, n: int) -> str:
        looks.append(n)
        return MET if c < 8 else UNDECIDED

    settings = SearchSettings(requests=20, max_looks=3, max_probes=4)  # 20: whole rounds up to C=4
    s = CapacitySearch(settings)
    drive(s, batch_limited(1000), objectives)
    r = s.result()
    assert r.undecided == (8.0,)
    assert r.best is not None and r.best.value == 4  # 8 could not be confirmed: not claimed
    at_eight = [p.requests for p in r.probes if p.value == 8]
    assert at_eight == [72]  # 24 (20 in whole rounds of 8) three times: the cap, never more


def test_decided_probes_get_no_extra_requests() -> None:
    settings = SearchSettings(requests=20)
    s = CapacitySearch(settings)
    drive(s, batch_limited(8), objectives=lambda c, n: MET)
    assert all(p.requests == settings.probe_requests(p.value) for p in s.result().probes)


def test_a_noisy_step_gets_more_requests_and_noise_alone_is_not_saturation() -> None:
    # throughput intervals of +-6 % at the base count shrink as requests are added: probes get more
    # requests until their interval is within 2 %, and a knee is claimed only where the step is decided
    s = CapacitySearch(SearchSettings(requests=10, max_looks=8))
    drive(s, batch_limited(8), rel=lambda n: 1.0 / n)
    r = s.result()
    assert r.knee.value == 8
    assert any(p.requests > 10 for p in r.probes)


def test_the_start_unacceptable_goes_down_and_none_acceptable_gives_no_best() -> None:
    s = CapacitySearch(SearchSettings(start=8))
    probed = drive(s, batch_limited(1000), objectives=lambda c, n: MISSED)
    r = s.result()
    assert probed == [8, 4, 2, 1]
    assert r.best is None and r.reason == "none acceptable"
    assert "no load met the objectives" in r.message


def test_a_start_above_the_limit_searches_downwards() -> None:
    s = CapacitySearch(SearchSettings(start=32))
    drive(s, batch_limited(1000), objectives=lambda c, n: MET if c <= 5 else MISSED)
    assert s.result().best.value == 5


def test_nothing_breaks_below_the_maximum() -> None:
    s = CapacitySearch(SearchSettings(max_value=64))
    drive(s, batch_limited(1000))
    r = s.result()
    assert r.reason == "not reached" and r.best.value == 64 and r.bracket == (64, None)
    assert r.limited_by is None


def test_max_probes_ends_the_search_with_what_was_confirmed() -> None:
    s = CapacitySearch(SearchSettings(max_probes=5))
    probed = drive(s, batch_limited(1000), objectives=lambda c, n: MET if c <= 100 else MISSED)
    r = s.result()
    assert len(probed) == 5 and r.reason == "max probes"
    assert r.best.value == 16  # 1, 2, 4, 8, 16: all held
    assert "ended early" in r.message or r.bracket[1] is None


def test_the_time_budget_stops_new_probes_and_extra_requests() -> None:
    s = CapacitySearch(SearchSettings(budget_s=30.0, requests=10, max_looks=5))
    probed = drive(s, batch_limited(1000), objectives=lambda c, n: UNDECIDED if c == 4 else MET,
                   elapsed=lambda i: 12.0 * i)
    r = s.result()
    assert probed == [1, 2, 4]  # 36 s after the third probe started: no fourth
    assert r.reason == "time budget"
    assert [p.requests for p in r.probes if p.value == 4] == [12]  # no extension past the budget


def test_a_crash_aborts_without_a_best_point() -> None:
    s = CapacitySearch(SearchSettings())
    for _ in range(3):
        plan = s.next_probe()
        s.observe(outcome(plan.value, 1000 * plan.value, MET))
    plan = s.next_probe()
    assert plan.value == 8
    s.abort("AttributeError: 'EAGLEWorkerV2' object has no attribute 'x'")
    r = s.result()
    assert r.best is None and r.reason == "crashed"
    assert "crashed" in r.message and "up to C=4" in r.message
    assert s.next_probe() is None


def test_a_probe_cut_short_is_not_used() -> None:
    s = CapacitySearch(SearchSettings())
    plan = s.next_probe()
    s.observe(outcome(plan.value, 1000, MISSED, complete=False))
    s.stop()
    r = s.result()
    assert r.probes == () and r.best is None


def test_rate_axis_bisects_geometrically() -> None:
    # open loop: achieved throughput follows the offered rate up to capacity 37 req/s, then stays flat
    s = CapacitySearch(SearchSettings(axis=RATE, start=2.0, max_value=10_000, min_value=0.1, resolution=0.05))
    probed = drive(s, lambda r: 100.0 * min(r, 37.0))
    r = s.result()
    assert probed[:6] == [2, 4, 8, 16, 32, 64]
    assert 37.0 / 1.06 <= r.knee.value <= 37.0 * 1.06
    assert r.best is not None and abs(r.best.value - 37.0) / 37.0 < 0.06
    assert "req/s" in r.message


def test_a_plateau_is_not_claimed_on_noise() -> None:
    # intervals that never get narrower than +-10 %: a doubling that gains 19 % (efficiency 0.19) cannot
    # be told from a flat one, so no plateau is claimed and the search goes on to the objectives' limit
    s = CapacitySearch(SearchSettings(requests=10, max_looks=2))
    drive(s, lambda c: 1000.0 * c**0.25, objectives=lambda c, n: MET if c <= 40 else MISSED, rel=lambda n: 0.10)
    r = s.result()
    assert not r.knee.reached
    assert r.best.value == 40 and r.limited_by == "objectives"


def test_level_to_level_noise_does_not_move_the_knee() -> None:
    # each probe's throughput off by up to +-3 % (a shared machine), intervals that do not show it: the
    # knee read against the plateau stays at the batch limit
    wobble = {1: 1.0, 2: 0.97, 4: 1.03, 8: 0.97, 16: 1.03, 6: 0.97, 7: 1.03, 5: 1.0, 12: 0.97, 10: 1.03}
    s = CapacitySearch(SearchSettings())
    drive(s, lambda c: batch_limited(8)(c) * wobble.get(int(c), 1.0), rel=lambda n: 0.005)
    assert s.result().knee.value == 8


def test_efficiency_interval() -> None:
    a = ProbeOutcome(8, 10, NONE, Interval(800, 790, 810))
    b = ProbeOutcome(16, 10, NONE, Interval(1600, 1580, 1620))
    e = efficiency(a, b)
    assert e.value == pytest.approx(1.0)
    assert e.lo < 1.0 < e.hi and e.hi - e.lo < 0.1
    flat = ProbeOutcome(16, 10, NONE, Interval(800, 790, 810))
    assert efficiency(a, flat).value == pytest.approx(0.0)


def test_settings_checks() -> None:
    with pytest.raises(ValueError):
        SearchSettings(start=0)
    with pytest.raises(ValueError):
        SearchSettings(growth=1.0)
    with pytest.raises(ValueError):
        SearchSettings(axis="tokens")
    assert SearchSettings().probe_requests(16) == 64  # four rounds of 16
    assert SearchSettings().probe_requests(1) == 13  # 10 at steady state, 3 for fill, drain and the look
    # a p99 objective needs 381 requests at steady state, plus the fill, drain and look of C=16
    assert SearchSettings(min_requests=381).probe_requests(16) == 432  # 381 + 48, in whole rounds of 16
    assert CapacitySearch(SearchSettings(), min_requests=381).settings.probe_requests(1) == 384
    assert SearchSettings(requests=50).probe_requests(16) == 64
    assert SearchSettings(axis=RATE, start=5.0, min_requests=35).probe_requests(5.0) == 44


def test_a_starved_probe_is_measured_again_and_never_the_knee() -> None:
    """It said "limited by saturation; knee at C=12" on a C=16 probe it had flagged as CPU-starved: a
    starved probe that would move the limit is measured again; one the client still could not measure
    is never the knee, and the limit is named as the client's."""
    once = CapacitySearch(SearchSettings())
    probed = drive(once, batch_limited(8), client=lambda c, k: "starved" if (c, k) == (16, 1) else None)
    r = once.result()
    assert probed[:6] == [1, 2, 4, 8, 16, 16]  # measured again, fine the second time: as if never starved
    assert r.best is not None and r.best.value == 8 and r.knee.value == 8 and r.limited_by == "saturation"
    assert [p.value for p in r.excluded] == [16] and "measured again: C=16" in r.message
    assert all(p.client is None for p in r.probes)

    # a server that still scales at C=16, where the starved client reads it flat twice: that plateau is
    # the client's; no knee is claimed and the limit is the client's, not saturation
    twice = CapacitySearch(SearchSettings())
    probed = drive(twice, lambda c: 1000.0 * c, client=lambda c, k: "starved" if c >= 16 else None)
    r = twice.result()
    assert probed[:6] == [1, 2, 4, 8, 16, 16] and probed.count(16) == 2
    assert not r.knee.reached and r.limited_by == "client"
    assert "limited by what the client could measure" in r.message and "saturation" not in r.message
    assert "client starved (another process held its CPU) at C=16" in r.message
    assert r.as_record()["excluded"][0]["client"] == "starved"


def test_a_client_at_its_own_limit_is_not_measured_again_nor_the_knee() -> None:
    s = CapacitySearch(SearchSettings())
    probed = drive(s, lambda c: 1000.0 * c, client=lambda c, k: "saturated" if c >= 16 else None)
    r = s.result()
    assert probed.count(16) == 1 and not r.excluded  # more of the same client would not measure it
    assert not r.knee.reached and r.limited_by == "client" and "client at its own CPU limit at C=16" in r.message


def test_a_starved_probe_that_moves_no_limit_is_not_measured_again() -> None:
    """Only a probe that would set the limit is repeated: a starved first probe on the way up is kept."""
    s = CapacitySearch(SearchSettings(max_probes=3))
    probed = drive(s, lambda c: 1000.0 * c, client=lambda c, k: "starved" if c == 1 else None)
    assert probed == [1, 2, 4] and not s.result().excluded
