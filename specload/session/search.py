"""Goodput and the capacity search as a part of the session: built from ``--slo``/``--find-max``.

``CapacityPart`` (``engine/capacity.py``) does the work; this wires it to the run: whether it is needed
at all (headless runs without ``--slo`` or ``--find-max`` keep no per-request columns; the TUI always
can search, with its key), the search's settings from the options (``--rate``: the rate axis; the first
``-c`` level or ``--rate``: where it starts), and starting and stopping a search on the runner.
"""

from __future__ import annotations

from collections.abc import Callable

from specload.config import RunConfig
from specload.engine.capacity import CapacityPart, SearchView
from specload.engine.runner import Runner
from specload.engine.search import CONCURRENCY, RATE, SearchResult, SearchSettings


def capacity_part(cfg: RunConfig, *, stay_open: bool, clock, t0_ns: int,  # a Clock
                  on_event: Callable[[dict], None]) -> CapacityPart | None:
    cap = cfg.capacity
    if cap.slo is None and not cap.find_max and not stay_open:
        return None
    return CapacityPart(cap.slo, clock=clock, t0_ns=t0_ns, open_loop=cfg.plan.rate is not None, seed=cfg.seed,
                        on_event=on_event, collect_all=cap.slo is not None)


def search_settings(cfg: RunConfig, *, start: float | None = None) -> SearchSettings:
    """The search as configured (``--rate``: the rate axis; the first -c level or --rate: the start)."""
    cap, plan = cfg.capacity, cfg.plan
    rate = plan.rate
    # -n sets every probe's base request count (at least what the objectives need)
    n = cfg.load.requests_per_level or 0
    if rate is not None:
        return SearchSettings(
            axis=RATE, start=start or rate, max_value=cap.search_max or max(1e6, rate),
            min_value=min(rate, start or rate) / 64, max_probes=cap.max_probes, budget_s=cap.search_budget_s,
            requests=n,
        )
    first = plan.levels[0].concurrency if plan.levels else 1
    begin = max(1.0, float(start or first))
    top = max(cap.search_max or 1024.0, begin)
    return SearchSettings(axis=CONCURRENCY, start=begin, max_value=top, max_probes=cap.max_probes,
                          budget_s=cap.search_budget_s, requests=n)


def concurrency_cap(cfg: RunConfig) -> int:
    """A rate search's cap on requests in flight: the largest -c level when -c was given, else 1024
    (the ramp's default levels are no statement about a cap)."""
    from specload.config import LoadConfig

    given = cfg.load.concurrency
    if cfg.plan.rate is None or given == LoadConfig().concurrency:
        return 1024
    return max(given)


def search_from_the_start(cfg: RunConfig, capacity: CapacityPart | None, runner: Runner) -> None:
    """``--find-max``: the search decides every level (the ramp's levels only gave it its start)."""
    if capacity is None or not cfg.capacity.find_max:
        return
    settings = search_settings(cfg)
    runner.source = capacity.new_search(settings, concurrency_cap=concurrency_cap(cfg))
    if settings.axis == CONCURRENCY:
        runner.target = int(settings.start)  # the warm-up runs at the first probe's load


def start_search(cfg: RunConfig, capacity: CapacityPart, runner: Runner, *, start: float | None = None) -> None:
    """A search now (the TUI's key): the current level ends and the probes follow."""
    driver = capacity.new_search(search_settings(cfg, start=start), concurrency_cap=concurrency_cap(cfg))
    runner.set_source(driver)


def stop_search(cfg: RunConfig, capacity: CapacityPart, runner: Runner | None, *,
                hold_best: bool = False) -> SearchResult | None:
    """End a search in progress (its result keeps what was confirmed); with ``hold_best`` the load then
    holds at the best point found (a held manual level)."""
    result = capacity.stop_search("stopped by the user")
    if result is None and capacity.results:
        result = capacity.results[-1]
    if runner is not None:
        runner.set_source(None)
        if hold_best and result is not None and result.best is not None:
            if result.axis == CONCURRENCY:
                runner.set_target(int(result.best.value), force=True)
            else:  # the best rate, open loop, its cap the concurrency the search gave it
                runner.set_target(concurrency_cap(cfg), force=True, rate=result.best.value)
    return result


__all__ = ["SearchView", "capacity_part", "search_settings", "start_search", "stop_search"]
