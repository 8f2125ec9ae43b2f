"""The capacity search (``--find-max``, the TUI's search key) as a state machine: which load to probe
next, and what the probes found. It grows the load until a probe is unacceptable (objectives not
met with confidence, or past the throughput curve's knee), then bisects; the rules and their
reasons are the README's "Capacity". It never sends a request, sleeps or reads a clock (the driver
passes the time in), so every rule is unit-tested with made-up probe outcomes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from specload.stats.slo import Interval

CONCURRENCY = "concurrency"
RATE = "rate"
Z95 = 1.959964

MET, MISSED, UNDECIDED, NONE = "met", "missed", "undecided", "none"


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What one probe level says, as far as the search needs it (the driver builds it from the level's
    summary, either at a look while the probe runs or once it has ended)."""

    value: float  # the load probed: concurrency, or request rate (req/s)
    requests: int  # requests counted
    objectives: str  # met, missed, undecided, none (no objectives given)
    throughput: Interval  # output tok/s
    level_index: int = -1
    complete: bool = True  # False: cut short by a stop; never used for a decision
    req_s: Interval | None = None  # achieved request rate
    goodput_req_s: Interval | None = None
    goodput_tok_s: Interval | None = None
    good_share: Interval | None = None
    in_flight: float | None = None  # mean requests in flight (the concurrency a rate probe held)
    # the client could not measure this probe: "starved" (another process held its CPU) or "saturated"
    # (its own CPU was the limit). Such a probe is never the knee, and a starved one that would be the
    # limit is measured again once; the limit it still sets is the client's, said so
    client: str | None = None


@dataclass(frozen=True, slots=True)
class SearchSettings:
    axis: str = CONCURRENCY
    start: float = 1.0  # the first load probed
    growth: float = 2.0  # the factor between probes while growing
    max_value: float = 1024.0  # never probe above this load
    min_value: float = 1.0  # never probe below (when even the start is unacceptable, the search goes down)
    # bisection ends when the bracket is this narrow: for concurrency, hi - lo <= max(1, resolution * lo);
    # for rates, hi / lo <= 1 + resolution
    resolution: float = 0.1
    max_probes: int = 12
    budget_s: float | None = 900.0  # no new probe or extra requests once this much time has passed
    min_efficiency: float = 0.1  # below this scaling efficiency a step up is saturated
    knee_share: float = 0.95  # the knee: the lowest load reaching this share of the plateau's throughput
    level_noise: float = 0.02  # throughput intervals are taken as at least +-2 % when deciding a step
    # a probe's throughput interval must be this narrow (half-width / value) before it ends: a probe's
    # interval is fixed once it ends, and later steps compare against it
    throughput_ci: float = 0.02
    requests: int = 0  # requests per probe; 0: auto (see probe_requests)
    min_requests: int = 10  # at least this many (the objectives' minimum sample goes here)
    rounds: int = 4  # auto: this many rounds of C requests (concurrency) or seconds of arrivals (rate)
    max_looks: int = 4  # cap: a probe runs at most max_looks x its base request count

    def __post_init__(self) -> None:
        if self.axis not in (CONCURRENCY, RATE):
            raise ValueError(f"axis must be {CONCURRENCY} or {RATE}")
        if not self.start > 0 or not self.max_value >= self.start or not self.min_value > 0:
            raise ValueError("the search needs 0 < min <= start <= max")
        if not self.growth > 1:
            raise ValueError("growth must be above 1")
        if self.max_probes < 1 or self.max_looks < 1:
            raise ValueError("max probes and max looks must be at least 1")

    def probe_requests(self, value: float) -> int:
        """The base request count of a probe at ``value``: a few rounds of load, and enough requests
        *at steady state* for the objectives to be decidable when the probe is first looked at. A
        closed-loop level's first and last C or so requests run while it fills and drains and are not
        used (``level_metrics``); an open-loop level loses its first requests until one ends, a fifth
        of the count is allowed for that."""
        if self.axis != CONCURRENCY:
            if self.requests:
                return max(self.requests, self.min_requests)
            return max(math.ceil(self.min_requests * 1.2) + 2, math.ceil(self.rounds * value))
        c = max(1, math.ceil(value))
        # fill and drain take about C requests each, and the look at the quota comes while the last C
        # are still in flight: 3 C more than the objectives need, so the first look can decide
        n = max(self.requests, self.min_requests) if self.requests else max(self.min_requests + 3 * c, self.rounds * c)
        # whole rounds of C: when requests end together (a batch finishing in one step) and the count
        # stops part-way through a round, the level's last start leaves fewer than C in flight and the
        # steady-state selection (level_metrics) takes the drain for load
        return -(-n // c) * c


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """The next probe to run."""

    number: int  # 1-based
    value: float
    requests: int  # base count; a look may add as many again, up to cap
    cap: int
    phase: str  # grow, down, bisect
    bracket: tuple[float | None, float | None]


@dataclass(frozen=True, slots=True)
class Knee:
    value: float | None  # the lowest saturated probe; None: not reached
    below: float | None  # the highest probe under it that still scaled (the knee lies in (below, value])
    reached: bool


@dataclass(frozen=True, slots=True)
class SearchResult:
    axis: str
    reason: str  # found, not reached, none acceptable, max probes, time budget, stopped, crashed
    best: ProbeOutcome | None
    bracket: tuple[float | None, float | None]  # (last acceptable, first unacceptable)
    limited_by: str | None  # objectives, saturation, client, or None (not reached / no result)
    knee: Knee
    probes: tuple[ProbeOutcome, ...]  # complete probes, in the order they ran
    undecided: tuple[float, ...]  # probes whose objectives were still undecided at the cap
    message: str  # one line for people
    # the first measurements of probes repeated because the client could not measure them (``client``)
    excluded: tuple[ProbeOutcome, ...] = ()

    def as_record(self) -> dict:
        b = self.best
        return {
            "axis": self.axis,
            "reason": self.reason,
            "message": self.message,
            "best": None if b is None else _outcome_record(b),
            "bracket": list(self.bracket),
            "limited_by": self.limited_by,
            "knee": {"value": self.knee.value, "below": self.knee.below, "reached": self.knee.reached},
            "undecided": list(self.undecided),
            "probes": [_outcome_record(p) for p in self.probes],
            "excluded": [{**_outcome_record(p), "client": p.client} for p in self.excluded],
        }


def _outcome_record(p: ProbeOutcome) -> dict:
    def iv(x: Interval | None) -> list[float | None] | None:
        return None if x is None else x.as_list()

    return {
        "value": p.value,
        "level_index": p.level_index,
        "requests": p.requests,
        "objectives": p.objectives,
        "throughput_tok_s": iv(p.throughput),
        "req_s": iv(p.req_s),
        "goodput_req_s": iv(p.goodput_req_s),
        "goodput_tok_s": iv(p.goodput_tok_s),
        "good_share": iv(p.good_share),
        "in_flight": None if p.in_flight is None else round(p.in_flight, 2),
    }


def efficiency(low: ProbeOutcome, high: ProbeOutcome, *, floor: float = 0.0) -> Interval:
    """Scaling efficiency from ``low`` to ``high`` with a 95 % interval: (T2/T1 - 1) / (L2/L1 - 1).

    The ratio's interval combines the two throughput intervals on the log scale (each interval's
    half-width taken as 1.96 standard errors of log T, and as at least ``floor`` relative; the levels
    are independent samples).
    """
    t1, t2 = low.throughput, high.throughput
    gain = high.value / low.value - 1.0
    if gain <= 0:
        raise ValueError("efficiency needs a higher load")
    if t1.value <= 0:
        e = math.inf if t2.value > 0 else 0.0
        return Interval(e, e, e)
    r = t2.value / t1.value
    fl = math.log1p(floor) / Z95 if floor > 0 else 0.0
    se = math.hypot(max(_log_se(t1), fl), max(_log_se(t2), fl))
    if not math.isfinite(se):
        return Interval((r - 1.0) / gain, None, None)
    r_lo, r_hi = r * math.exp(-Z95 * se), r * math.exp(Z95 * se)
    return Interval((r - 1.0) / gain, (r_lo - 1.0) / gain, (r_hi - 1.0) / gain)


def _log_se(t: Interval) -> float:
    """The standard error of log T implied by its interval; infinite when the data could not bound it."""
    if t.lo is None or t.hi is None or t.value <= 0 or t.lo <= 0:
        return math.inf
    if t.hi <= t.lo:
        return 0.0
    return (math.log(t.hi) - math.log(t.lo)) / (2 * Z95)


def _side(iv: Interval, threshold: float) -> bool | None:
    """True: the whole interval is below ``threshold``; False: at or above it; None: it straddles."""
    if iv.hi is not None and iv.hi < threshold:
        return True
    if iv.lo is not None and iv.lo >= threshold:
        return False
    return None


@dataclass(slots=True)
class _Probe:
    plan: ProbePlan


@dataclass(slots=True)
class CapacitySearch:
    """Feed it outcomes; ask it what to probe next. See the module docstring for the rules."""

    settings: SearchSettings
    min_requests: int = 0  # the objectives' minimum sample (SloSpec.min_requests)
    _done: list[ProbeOutcome] = field(default_factory=list)  # complete probes in running order
    _current: _Probe | None = None
    _number: int = 0
    _end: str | None = None  # why the search is over
    _abort_detail: str | None = None
    _abort_what: str = "crashed"
    _excluded: list[ProbeOutcome] = field(default_factory=list)  # probes the client could not measure
    _retry: float | None = None  # a starved probe's load, to measure again

    def __post_init__(self) -> None:
        if self.min_requests > self.settings.min_requests:
            self.settings = replace(self.settings, min_requests=self.min_requests)

    # ---------------------------------------------------------------- state

    @property
    def finished(self) -> bool:
        return self._end is not None

    @property
    def current(self) -> ProbePlan | None:
        return self._current.plan if self._current is not None else None

    @property
    def probes(self) -> tuple[ProbeOutcome, ...]:
        return tuple(self._done)

    @property
    def phase(self) -> str:
        if self._end is not None:
            return "done"
        lo, hi = self.bracket()
        if hi is None:
            return "grow"
        if lo is None:
            return "down"
        return "bisect"

    def _sorted(self) -> list[ProbeOutcome]:
        return sorted(self._done, key=lambda p: p.value)

    def _plateau_start(self) -> float | None:
        """The lower load of the first flat step (see ``plateau``), or None."""
        st = self.settings
        ordered = self._sorted()
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                if b.value > a.value * st.growth * 1.0001:
                    break
                if _side(efficiency(a, b, floor=st.level_noise), st.min_efficiency) is True:
                    return a.value
        return None

    def _client_on_plateau(self) -> bool:
        """A probe the client could not measure is on the plateau: the knee read from it is not the server's."""
        start = self._plateau_start()
        return start is not None and any(p.client is not None for p in self._done if p.value >= start)

    def plateau(self) -> float | None:
        """The plateau's throughput, once a step of at most one growth factor has been seen to add
        (almost) nothing (decided with confidence); None until then. A flat step's lower load is
        already on the plateau: its throughput and that of every probe above it are averaged, so
        one level measured a few percent high or low does not move the knee."""
        start = self._plateau_start()
        if start is None:
            return None
        on = [p.throughput.value for p in self._sorted() if p.value >= start]
        return sum(on) / len(on)

    def saturated(self, p: ProbeOutcome) -> bool:
        """At or past the knee: a plateau exists and ``p`` reached ``knee_share`` of it."""
        top = self.plateau()
        return top is not None and p.throughput.value >= self.settings.knee_share * top

    def acceptable(self, p: ProbeOutcome) -> bool:
        return p.objectives in (MET, NONE) and not self.saturated(p)

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest acceptable probe below the first unacceptable one, lowest unacceptable probe)."""
        ordered = self._sorted()
        hi = next((p.value for p in ordered if not self.acceptable(p)), None)
        lo = None
        for p in ordered:
            if hi is not None and p.value >= hi:
                break
            if self.acceptable(p):
                lo = p.value
        return lo, hi

    def _find(self, value: float | None) -> ProbeOutcome | None:
        return next((p for p in self._done if p.value == value), None)

    # ---------------------------------------------------------------- driving

    def next_probe(self, elapsed_s: float = 0.0) -> ProbePlan | None:
        """The next probe to run, or None when the search is over (then ``result()``)."""
        if self._end is not None:
            return None
        if self._current is not None:
            raise RuntimeError("the current probe has not been observed")
        s = self.settings
        if self._done and len(self._done) + len(self._excluded) >= s.max_probes:
            self._finish("max probes")
            return None
        if self._done and s.budget_s is not None and elapsed_s >= s.budget_s:
            self._finish("time budget")
            return None
        retry, self._retry = self._retry, None
        value = retry if retry is not None else self._next_value()
        if value is None:
            return None
        self._number += 1
        base = s.probe_requests(value)
        plan = ProbePlan(self._number, value, base, base * s.max_looks, "repeat" if retry is not None else self.phase,
                         self.bracket())
        self._current = _Probe(plan)
        return plan

    def _next_value(self) -> float | None:
        s = self.settings
        if not self._done:
            return self._round(s.start)
        lo, hi = self.bracket()
        if hi is None:  # everything so far acceptable: grow
            top = max(p.value for p in self._done)
            if top >= s.max_value:
                self._finish("not reached")
                return None
            return self._round(min(top * s.growth, s.max_value))
        if lo is None:  # even the lowest probe is unacceptable: go down
            bottom = min(p.value for p in self._done)
            if bottom <= s.min_value:
                self._finish("none acceptable")
                return None
            return self._round(max(bottom / s.growth, s.min_value))
        if self._narrow(lo, hi):
            self._finish("found")
            return None
        return self._round(self._mid(lo, hi))

    def _narrow(self, lo: float, hi: float) -> bool:
        s = self.settings
        if s.axis == CONCURRENCY:
            return hi - lo <= max(1.0, s.resolution * lo)
        return hi / lo <= 1.0 + s.resolution

    def _mid(self, lo: float, hi: float) -> float:
        if self.settings.axis == CONCURRENCY:
            return float((int(lo) + int(hi)) // 2)
        return math.sqrt(lo * hi)  # rates: halve the ratio, not the difference

    def _round(self, v: float) -> float:
        if self.settings.axis == CONCURRENCY:
            return float(max(1, round(v)))
        return float(f"{v:.4g}")

    def look(self, partial: ProbeOutcome, started: int, elapsed_s: float = 0.0) -> int:
        """The current probe has started all its requests so far; ``partial`` is what its completed
        ones say. Returns how many more requests to start (0: let the probe end)."""
        cur = self._current
        if cur is None or self._end is not None:
            return 0
        s = self.settings
        if started + cur.plan.requests > cur.plan.cap:
            return 0
        if s.budget_s is not None and elapsed_s >= s.budget_s:
            return 0
        if self._decided(partial):
            return 0
        return cur.plan.requests

    def _decided(self, p: ProbeOutcome) -> bool:
        """May this probe end: its objectives decided and its throughput interval narrow enough?"""
        if p.objectives == UNDECIDED:
            return False
        t = p.throughput
        if t.lo is None or t.hi is None:
            return False
        return not (t.value > 0 and (t.hi - t.lo) / 2 > self.settings.throughput_ci * t.value)

    def observe(self, outcome: ProbeOutcome) -> None:
        """The current probe has ended; ``outcome`` is its final figure."""
        if self._current is None:
            raise RuntimeError("no probe is running")
        self._current = None
        if not outcome.complete:
            return
        before = (self.bracket()[1], self.knee().value)  # the limit: the first unacceptable load, the knee
        self._done.append(outcome)
        if (outcome.client == "starved" and outcome.value not in {p.value for p in self._excluded}
                and (self.bracket()[1], self.knee().value) != before):
            # the limit would be a load measured while another process held the client's CPU: once
            # more, in place of this measurement
            self._done.remove(outcome)
            self._excluded.append(outcome)
            self._retry = outcome.value

    def stop(self, reason: str = "stopped") -> None:
        """End the search where it stands (user's stop key, the run's end); the result keeps what the
        completed probes established."""
        if self._end is None:
            self._current = None
            self._end = reason

    def abort(self, detail: str, what: str = "crashed") -> None:
        """The server crashed (or went down, or exited): the search ends without a best point.
        ``what`` completes "the server ..." in the message."""
        self._end = "crashed"
        self._abort_detail = detail
        self._abort_what = what
        self._current = None

    def _finish(self, reason: str) -> None:
        self._end = reason
        return None

    # ---------------------------------------------------------------- result

    def knee(self) -> Knee:
        """The lowest saturated probe; none while the plateau holds a probe the client could not measure
        (its low figure may be the client's, not the server's)."""
        ordered = self._sorted()
        below = None
        if self._client_on_plateau():
            return Knee(None, None, False)
        for p in ordered:
            if self.saturated(p):
                return Knee(p.value, below, True)
            below = p.value
        return Knee(None, below, False)

    def result(self) -> SearchResult:
        lo, hi = self.bracket()
        knee = self.knee()
        undecided = tuple(p.value for p in self._sorted() if p.objectives == UNDECIDED)
        reason = self._end or "stopped"
        unit = "C=" if self.settings.axis == CONCURRENCY else ""
        suffix = "" if self.settings.axis == CONCURRENCY else " req/s"

        def v(x: float | None) -> str:
            return "?" if x is None else f"{unit}{x:g}{suffix}"

        if reason == "crashed":
            held = [p.value for p in self._sorted() if self.acceptable(p)]
            msg = f"the server {self._abort_what} ({self._abort_detail or 'no detail'}); no best point"
            if held:
                msg += f" (loads that held before the crash: up to {v(max(held))})"
            return SearchResult(self.settings.axis, reason, None, (lo, hi), None, knee, self.probes, undecided, msg,
                                tuple(self._excluded))

        best: ProbeOutcome | None = None
        limited_by: str | None = None
        hi_p = self._find(hi)
        if hi_p is not None:
            objectives_ok = hi_p.objectives in (MET, NONE)
            limited_by = "saturation" if objectives_ok else "objectives"
            lo_hi_narrow = lo is not None and self._narrow(lo, hi)  # type: ignore[arg-type]
            if objectives_ok and self.saturated(hi_p) and (lo_hi_narrow or lo is None):
                # the knee itself: objectives hold there and nothing above it adds tokens
                best = hi_p
            elif lo is not None:
                best = self._find(lo)
        elif lo is not None:
            best = self._find(lo)
        if hi_p is not None and (hi_p.client is not None or (limited_by == "saturation" and self._client_on_plateau())):
            limited_by = "client"  # the limit was read from loads the client could not measure
        if best is not None and reason == "none acceptable":
            reason = "found"  # the lowest load is already the knee, and the objectives hold there
        if best is None:
            if reason in ("found", "none acceptable"):
                reason = "none acceptable"
                msg = f"no load met the objectives (even {v(min((p.value for p in self._done), default=None))})"
            else:
                msg = f"search {reason} before any load was confirmed"
        else:
            if hi is None and reason == "found":
                reason = "not reached"
            if reason == "not reached":
                msg = f"best {v(best.value)}: objectives held and throughput still grew up to the highest load probed"
            else:
                where = f"between {v(best.value)} and {v(hi)}" if hi is not None and hi != best.value else ""
                why = {"objectives": "the objectives", "saturation": "saturation",
                       "client": "what the client could measure"}.get(limited_by or "", "")
                msg = f"best {v(best.value)}" + (f", limited by {why}" if why else "")
                if where and best.value != hi:
                    msg += f" (the limit lies {where})"
                if reason != "found":
                    msg += f"; search ended early: {reason}"
        if knee.reached:
            msg += f"; knee at {v(knee.value)}" + (f" (after {v(knee.below)})" if knee.below is not None else "")
        what = {"starved": "starved (another process held its CPU)", "saturated": "at its own CPU limit"}
        start = self._plateau_start()
        limited = [p for p in self._sorted() if p.client is not None
                   and (p.value == hi or (start is not None and p.value >= start))]
        if limited:
            msg += "; measured with the client " + ", ".join(
                f"{what.get(p.client or '', p.client)} at {v(p.value)}" for p in limited[:3]) + (
                ": not the server's limit (fewer processes on this machine, or --workers)")
        if self._excluded:
            msg += "; measured again: " + ", ".join(f"{v(p.value)}" for p in self._excluded)
        return SearchResult(self.settings.axis, reason, best, (lo, hi), limited_by, knee, self.probes, undecided, msg,
                            tuple(self._excluded))
