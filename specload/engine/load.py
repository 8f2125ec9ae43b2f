"""The shape of a load: the ramp of concurrency levels, warm-up, drain, open-loop arrivals.

Pure data plus parsing, so the CLI, the TUI and tests build plans the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from specload.options import ConfigError


@dataclass(frozen=True, slots=True)
class LevelSpec:
    concurrency: int
    requests: int | None = None  # the level ends once it has started this many requests
    duration_s: float | None = None  # ... or once it has run this long (pauses not counted)
    # per level, for levels decided while the run goes (the capacity search): None takes the plan's
    rate: float | None = None  # open loop at this rate, the concurrency as its cap
    drain: bool | None = None  # wait for the level's requests before the next one
    repeat: int = 0  # the k-th repeat of this concurrency in a row (--repeat): its record line says so
    manual: bool | None = None  # a replayed level keeps the original's manual flag (None: not replayed)
    # a replayed schedule's pauses: (seconds of the level's active time before it, seconds paused)
    pauses: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class LoadPlan:
    levels: tuple[LevelSpec, ...]
    warmup_requests: int = 0
    drain_between_levels: bool = True
    rate: float | None = None  # open loop: requests per second (Poisson when burstiness is 1)
    burstiness: float = 1.0  # gamma shape of inter-arrival times; <1 burstier, >1 smoother
    max_requests: int | None = None  # safety bound over the whole run
    max_duration_s: float | None = None


class PlanError(ConfigError):
    """A concurrency list that cannot be read (``-c 1,x``)."""


def parse_levels(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> (1, 2, 4, 8). Every level a positive integer."""
    out = []
    parts = text.replace(" ", "").split(",")
    for part in parts:
        if not part:
            if len(parts) == 1:
                break
            # "1,,4" is a typo (a level left out?), not two levels
            raise PlanError(f"concurrency levels {text!r} have an empty entry")
        try:
            n = int(part)
        except ValueError:
            raise PlanError(f"concurrency level {part!r} is not a whole number") from None
        if n < 1:
            raise PlanError(f"concurrency level {n} must be at least 1")
        out.append(n)
    if not out:
        raise PlanError("no concurrency levels given")
    return tuple(out)


def build_plan(
    levels: tuple[int, ...],
    *,
    requests_per_level: int | None,
    duration_per_level: float | None,
    warmup_requests: int = 0,
    drain: bool = True,
    rate: float | None = None,
    burstiness: float = 1.0,
    max_requests: int | None = None,
    max_duration_s: float | None = None,
) -> LoadPlan:
    """The plan of these levels; the values are checked by ``config.LoadConfig`` (the one place)."""
    auto_count = requests_per_level is None and duration_per_level is None
    # default: every level runs about four rounds of C requests (at least 10 requests), so each
    # level takes a similar time and has enough requests for its percentiles
    specs = tuple(
        LevelSpec(c, max(10, 4 * c) if auto_count else requests_per_level, duration_per_level) for c in levels
    )
    return LoadPlan(
        levels=specs,
        warmup_requests=warmup_requests,
        drain_between_levels=drain,
        rate=rate,
        burstiness=burstiness,
        max_requests=max_requests,
        max_duration_s=max_duration_s,
    )


def repeat_levels(plan: LoadPlan, n: int) -> LoadPlan:
    """Each level ``n`` times in a row (C=1, 1, 1, 4, 4, 4, ...): repeats of the ramp interleaved level
    by level, so slow drift touches every repeat of a level alike, and the repeats give the comparison
    its run-to-run variation from one record."""
    if n < 1:
        raise PlanError("--repeat must be at least 1")
    if n == 1:
        return plan
    levels = tuple(replace(lv, repeat=k) for lv in plan.levels for k in range(n))
    return replace(plan, levels=levels)


class Arrivals:
    """Open-loop arrivals: gamma-distributed gaps with mean 1/rate, and when the next one is due."""

    def __init__(self, rate: float, burstiness: float = 1.0, seed: int = 0) -> None:
        self.rate = rate
        self.shape = burstiness
        self._rng = random.Random(seed)
        self._at: int | None = None  # when the next arrival is due (ns)

    def restart(self) -> None:
        """A level begins: its first arrival is one gap after it is first asked for."""
        self._at = None

    def wait_s(self, now_ns: int) -> float:
        """Seconds until the next arrival; 0.0: it is due now (and the one after it is scheduled).
        Arrivals held back (paused, at the cap) come due one after another once asked for again."""
        if self._at is None:
            self._at = now_ns + int(self.next_gap_s() * 1e9)
        if now_ns < self._at:
            return (self._at - now_ns) / 1e9
        self._at += int(self.next_gap_s() * 1e9)
        return 0.0

    def next_gap_s(self) -> float:
        return self._rng.gammavariate(self.shape, 1.0 / (self.rate * self.shape))
