"""The capacity search on a running load: ``SearchDriver`` runs ``CapacitySearch``'s probes as ordinary
levels of the runner (drained, recorded like any level, so ``report`` shows the curve), evaluates each
as it ends (in a thread: evaluation bootstraps) and asks for more requests while a verdict straddles
its limit. Everything it does is an ``on_event`` (the record's ``search`` events) and ``view()`` (the
TUI). ``stop()`` keeps what completed probes established; ``abort()`` (a crash, the server down) gives
no best point; a probe cut short is never used, nor one the client could not measure (starved or
saturated in at least half of its one-second samples, ``CLIENT_SHARE``: the search repeats or
excludes it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import RequestRecord
from specload.engine.search import (
    CONCURRENCY,
    NONE,
    CapacitySearch,
    ProbeOutcome,
    ProbePlan,
    SearchResult,
    SearchSettings,
)
from specload.plan import LevelSpec
from specload.stats.goodput import LevelCollector, LevelEvaluation, evaluate_level
from specload.stats.levels import LevelSummary
from specload.stats.slo import Interval, SloSpec

T = TypeVar("T")
# a probe whose client was starved or saturated in at least this share of its one-second samples was
# not measured (its latencies hold the client's own delays); a second now and then is not that
CLIENT_SHARE = 0.5


async def off_loop(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn`` in a thread, so its bootstraps (tens of ms) never hold up the streams on the loop; inline
    on a virtual-time loop (``sim/virtual_time.py``), whose clock would run on while a thread computed."""
    if getattr(asyncio.get_running_loop(), "virtual_time", False):
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class ProbeView:
    value: float
    level_index: int
    throughput: float
    objectives: str
    acceptable: bool
    saturated: bool | None


@dataclass(frozen=True, slots=True)
class SearchView:
    """The search as the UI draws it: immutable, plain data."""

    axis: str
    phase: str  # grow, down, bisect, done
    bracket: tuple[float | None, float | None]
    current: ProbePlan | None
    probes: tuple[ProbeView, ...]  # complete probes, in the order they ran
    result: SearchResult | None
    slo: str | None


@dataclass(slots=True)
class _Current:
    plan: ProbePlan
    level_index: int
    quota: int
    complete: bool = False


class SearchDriver:
    def __init__(
        self,
        search: CapacitySearch,
        spec: SloSpec | None,
        *,
        collector: LevelCollector | None = None,
        concurrency_cap: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
        t0_ns: int | None = None,
        on_event: Callable[[dict], None] | None = None,
        seed: int = 0,
    ) -> None:
        self.search = search
        self.spec = spec
        self.concurrency_cap = concurrency_cap
        self.clock = clock
        self.t0_ns = clock.now_ns() if t0_ns is None else t0_ns
        self._on_event = on_event or (lambda v: None)
        self._seed = seed
        self._started_ns: int | None = None
        # the run's collector when goodput is on for every level; otherwise the driver's own
        self.collector = collector if collector is not None else LevelCollector(spec, t0_ns=self.t0_ns)
        self._own_collector = collector is None
        self._probe_levels: set[int] = set()
        self._current: _Current | None = None
        self._result: SearchResult | None = None
        self._client: dict[int, list[str | None]] = {}  # probe level -> its client samples' flags

    # ------------------------------------------------------------------ info

    @property
    def finished(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> SearchResult | None:
        return self._result

    def elapsed_s(self) -> float:
        if self._started_ns is None:
            return 0.0
        return (self.clock.now_ns() - self._started_ns) / 1e9

    def probe_levels(self) -> set[int]:
        return set(self._probe_levels)

    def view(self) -> SearchView:
        s = self.search
        probes = tuple(
            ProbeView(p.value, p.level_index, p.throughput.value, p.objectives, s.acceptable(p), s.saturated(p))
            for p in s.probes
        )
        cur = self._current
        return SearchView(
            axis=s.settings.axis,
            phase="done" if self._result is not None else s.phase,
            bracket=s.bracket(),
            current=cur.plan if cur is not None and self._result is None else None,
            probes=probes,
            result=self._result,
            slo=self.spec.text() if self.spec is not None else None,
        )

    def announce_start(self) -> None:
        st = self.search.settings
        self._started_ns = self.clock.now_ns()
        self._on_event({
            "phase": "start",
            "axis": st.axis,
            "slo": self.spec.text() if self.spec is not None else None,
            "start": st.start,
            "max": st.max_value,
            "max_probes": st.max_probes,
            "budget_s": st.budget_s,
            "min_efficiency": st.min_efficiency,
            "resolution": st.resolution,
        })

    # ------------------------------------------------------------------ sink

    def on_record(self, rec: RequestRecord) -> None:
        """Keep a probe's requests (only when the driver has its own collector: a shared one is fed by
        the session)."""
        if self._own_collector and rec.level_index in self._probe_levels:
            self.collector.add(rec)

    def client_sample(self, level_index: int, flag: str | None) -> None:
        """One second of the client's load during level ``level_index``: None, "starved" or "saturated"."""
        if level_index in self._probe_levels:
            self._client.setdefault(level_index, []).append(flag)

    def _client_limit(self, level_index: int) -> str | None:
        samples = self._client.get(level_index, [])
        flagged = [f for f in samples if f]
        if not samples or len(flagged) < CLIENT_SHARE * len(samples):
            return None
        return "saturated" if "saturated" in flagged else "starved"

    # ------------------------------------------------------------------ level source

    async def next_level(self, level_index: int) -> LevelSpec | None:
        if self._started_ns is None:
            self.announce_start()
        await self._settle_current()
        if self._result is not None:
            return None
        plan = self.search.next_probe(self.elapsed_s())
        if plan is None:
            self._conclude()
            return None
        rate = self.search.settings.axis != CONCURRENCY
        conc = self.concurrency_cap if rate else int(plan.value)
        self.collector.expect(level_index, conc, open_loop=rate)
        self._probe_levels.add(level_index)
        self._current = _Current(plan, level_index, plan.requests)
        self._on_event({
            "phase": "probe",
            "number": plan.number,
            "step": plan.phase,
            "value": plan.value,
            "level_index": level_index,
            "requests": plan.requests,
            "cap": plan.cap,
            "bracket": list(plan.bracket),
        })
        if rate:
            return LevelSpec(conc, plan.requests, rate=plan.value, drain=True)
        return LevelSpec(conc, plan.requests, drain=True)

    async def more_requests(self, level_index: int, started: int) -> int:
        cur = self._current
        if cur is None or cur.level_index != level_index or self._result is not None:
            return 0
        ev = await self._evaluate(level_index)
        if self._current is not cur or self._result is not None:
            return 0  # stopped while evaluating
        more = self.search.look(self._outcome(cur, ev, complete=False), started, self.elapsed_s())
        if more <= 0:
            cur.complete = True
            return 0
        cur.quota = started + more
        self._on_event({"phase": "extend", "value": cur.plan.value, "level_index": level_index,
                        "requests": cur.quota, "why": _why_undecided(ev)})
        return more

    # ------------------------------------------------------------------ ending

    def stop(self, reason: str = "stopped") -> SearchResult:
        """End the search where it stands; the probe in progress (if any) is not used."""
        if self._result is None:
            self.search.stop(reason)
            self._current = None
            self._conclude()
        assert self._result is not None
        return self._result

    def abort(self, detail: str, what: str = "crashed") -> SearchResult:
        """The server crashed, went down or exited: the search ends without a best point."""
        if self._result is None:
            self.search.abort(detail, what)
            self._current = None
            self._conclude()
        assert self._result is not None
        return self._result

    # ------------------------------------------------------------------ inside

    async def _settle_current(self) -> None:
        cur = self._current
        if cur is None:
            return
        if not cur.complete:
            # the level ended before the driver let it (next-level key, a manual level): cut short
            self.search.observe(ProbeOutcome(cur.plan.value, 0, NONE, _zero(), cur.level_index, complete=False))
            self._current = None
            self._on_event({"phase": "observed", "value": cur.plan.value, "level_index": cur.level_index,
                            "complete": False})
            return
        ev = await self._evaluate(cur.level_index)
        if self._current is not cur:
            return
        outcome = replace(self._outcome(cur, ev, complete=True), client=self._client_limit(cur.level_index))
        self.search.observe(outcome)
        self._current = None
        sat = self.search.saturated(outcome)
        self._on_event({
            "phase": "observed",
            "value": outcome.value,
            "level_index": outcome.level_index,
            "complete": True,
            "requests": outcome.requests,
            "objectives": outcome.objectives,
            "throughput_tok_s": outcome.throughput.as_list(),
            "bracket": list(self.search.bracket()),
            "saturated": sat,
            "client": outcome.client,
            "plateau_tok_s": _r(self.search.plateau()),
        })

    async def _evaluate(self, level_index: int) -> LevelEvaluation:
        cols = self.collector.get(level_index)
        assert cols is not None
        frozen = cols.freeze()
        return await off_loop(evaluate_level, frozen, seed=self._seed)

    def _outcome(self, cur: _Current, ev: LevelEvaluation, *, complete: bool) -> ProbeOutcome:
        g = ev.goodput
        return ProbeOutcome(
            value=cur.plan.value,
            requests=ev.requests,
            objectives=g.verdict if g is not None else NONE,
            throughput=ev.throughput,
            level_index=cur.level_index,
            complete=complete,
            req_s=ev.req_s,
            goodput_req_s=g.req_s if g is not None else None,
            goodput_tok_s=g.tok_s if g is not None else None,
            good_share=g.good_share if g is not None else None,
            in_flight=ev.in_flight,
        )

    def _conclude(self) -> None:
        self._result = self.search.result()
        self._on_event({"phase": "result", **self._result.as_record()})


def _zero() -> Interval:
    return Interval.exact(0.0)


def _why_undecided(ev: LevelEvaluation) -> str:
    g = ev.goodput
    if g is not None:
        names = [o.name for o in g.objectives if o.verdict == "undecided"]
        if names:
            return "undecided: " + ", ".join(names)
    return "throughput step undecided"


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


class CapacityPart:
    """Goodput for every level (``--slo``) and the capacity search (``--find-max``, the TUI's key), as
    one part of a session: it keeps the levels' requests, attaches goodput to each level summary (in a
    thread: ``finish_level`` is awaited), runs the search's driver as the runner's level source, and ends
    the search when the run ends (``run_ended``) or the server fails under it (``server_failed``)."""

    def __init__(
        self,
        spec: SloSpec | None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        t0_ns: int = 0,
        open_loop: bool = False,
        seed: int = 0,
        on_event: Callable[[dict], None] | None = None,
        collect_all: bool = True,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.t0_ns = t0_ns
        self.seed = seed
        # without objectives only the search's probes are kept (the TUI without --slo)
        self.collect_all = collect_all
        self._on_event = on_event or (lambda v: None)
        self.collector = LevelCollector(spec, t0_ns=t0_ns, open_loop=open_loop)
        self.driver: SearchDriver | None = None
        self._drivers: list[SearchDriver] = []  # every search of the run
        self.results: list[SearchResult] = []  # every search of the run, in order

    def on_record(self, rec: RequestRecord) -> None:
        if self.collect_all or self.collector.get(rec.level_index) is not None:
            self.collector.add(rec)

    def client_sample(self, level_index: int, flag: str | None) -> None:
        """One second of the client's load (None, "starved", "saturated"), for the search's probes."""
        if self.driver is not None and not self.driver.finished:
            self.driver.client_sample(level_index, flag)

    def new_search(self, settings: SearchSettings, *, concurrency_cap: int = 1024) -> SearchDriver:
        """A search to hand to the runner (``Runner.source`` before the run, or ``set_source`` during it).
        A search still running is stopped first."""
        if self.driver is not None and not self.driver.finished:
            self.stop_search("replaced by a new search")
        min_req = self.spec.min_requests() if self.spec is not None else 0
        self.driver = SearchDriver(
            CapacitySearch(settings, min_requests=min_req),
            self.spec,
            collector=self.collector,
            concurrency_cap=concurrency_cap,
            clock=self.clock,
            t0_ns=self.t0_ns,
            on_event=self._search_event,
            seed=self.seed,
        )
        self._drivers.append(self.driver)
        return self.driver

    def _search_event(self, value: dict) -> None:
        if value.get("phase") == "result" and self.driver is not None and self.driver.result is not None:
            self.results.append(self.driver.result)
        self._on_event(value)

    @property
    def searching(self) -> bool:
        return self.driver is not None and not self.driver.finished

    def view(self) -> SearchView | None:
        return self.driver.view() if self.driver is not None else None

    async def finish_level(self, summary: LevelSummary) -> LevelSummary:
        """The summary with its goodput (unchanged without objectives)."""
        if self.spec is None:
            return summary
        idx = summary.level_index
        cols = self.collector.get(idx)
        if cols is None or not len(cols):
            return summary
        frozen = cols.freeze()
        if not any(idx in d.probe_levels() for d in self._drivers):
            # a level of the ramp is done with once judged (a search's probes stay: it reads them
            # again); a long TUI session keeps one level's columns, not every request of the run
            self.collector.drop(idx)
        ev = await off_loop(evaluate_level, frozen, seed=self.seed)
        return replace(summary, goodput=ev.goodput)

    def stop_search(self, reason: str = "stopped") -> SearchResult | None:
        if self.driver is None or self.driver.finished:
            return None
        return self.driver.stop(reason)

    def server_failed(self, detail: str, what: str = "crashed") -> SearchResult | None:
        """A crash, the server down or gone: a search in progress ends without a best point."""
        if self.driver is None or self.driver.finished:
            return None
        return self.driver.abort(detail, what)

    def run_ended(self, reason: str) -> None:
        if self.searching:
            self.stop_search("run " + reason if reason != "completed" else "run ended")
