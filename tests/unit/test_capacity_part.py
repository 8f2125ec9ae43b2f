"""The capacity part of a session: goodput attached to level summaries, memory let go of."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from specload.engine.capacity import CapacityPart
from specload.engine.search import SearchSettings
from specload.stats.levels import LevelColumns
from specload.stats.slo import parse_slo
from tests.unit.test_goodput import closed_loop


def test_a_ramp_level_gets_its_goodput_and_its_columns_are_let_go() -> None:
    part = CapacityPart(parse_slo("ttft_p90<=150ms"))
    cols = LevelColumns(0, 2)
    for rec in closed_loop(2, 60, lambda i: 100.0):
        part.on_record(rec)
        cols.add(rec)
    summary = asyncio.run(part.finish_level(cols.summary()))
    assert summary.goodput is not None and summary.goodput.verdict == "met"
    assert part.collector.get(0) is None  # judged: its requests are no longer kept


def test_a_probes_columns_stay_for_the_search() -> None:
    part = CapacityPart(parse_slo("ttft_p90<=150ms"))
    driver = part.new_search(SearchSettings())
    spec = asyncio.run(driver.next_level(0))
    assert spec is not None and spec.concurrency == 1
    cols = LevelColumns(0, 1)
    for rec in closed_loop(1, 20, lambda i: 100.0):
        part.on_record(rec)
        cols.add(rec)
    summary = asyncio.run(part.finish_level(cols.summary()))
    assert summary.goodput is not None
    assert part.collector.get(0) is not None and len(part.collector.get(0)) == 20


def test_without_objectives_only_a_searchs_probes_are_kept() -> None:
    part = CapacityPart(None, collect_all=False)
    for rec in closed_loop(2, 10, lambda i: 100.0):
        part.on_record(rec)
    assert part.collector.get(0) is None


def test_a_probe_whose_client_was_starved_half_the_time_is_measured_again() -> None:
    """The session's one-second client samples reach the search: a probe starved in at least half of
    them, which would set the limit, is measured again; a starved second now and then is not that."""
    events: list[dict] = []
    part = CapacityPart(None, collect_all=False, on_event=events.append)
    driver = part.new_search(SearchSettings(requests=10, min_requests=10, throughput_ci=1.0))
    for index, flags in enumerate((["starved", None, None, None], ["starved", "starved", None, None])):
        spec = asyncio.run(driver.next_level(index))
        assert spec is not None, events
        for flag in flags:
            part.client_sample(index, flag)
        # one stream's worth at either load: the starved C=2 reads flat, which would make C=1 the knee
        for rec in closed_loop(1, 10, lambda i: 100.0):
            part.on_record(replace(rec, level_index=index, level=spec.concurrency))
        assert asyncio.run(driver.more_requests(index, 10)) == 0
    asyncio.run(driver.next_level(2))
    observed = [e for e in events if e.get("phase") == "observed"]
    assert [e["client"] for e in observed] == [None, "starved"]
    probes = [e for e in events if e.get("phase") == "probe"]
    assert probes[-1]["step"] == "repeat" and probes[-1]["value"] == 2 * probes[0]["value"]
