"""What a run sends, as plain data: its levels and their plan (the ramp, warm-up, drain, open-loop
arrivals, bounds), the length distributions of prompts and outputs, and the think time between a
conversation's turns.

Parsing and data only, below the configuration that builds them (``config.py``) and the engine that
runs them, so the CLI, the TUI, a replayed schedule and tests build plans the same way. Lengths are
``128`` (every request), ``128:32`` (uniform over mean +- spread) or ``64,128,256`` (one of the
list); draws come from an RNG the caller seeds (``--seed``).
"""

from __future__ import annotations

import contextlib
import random
import re
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
    ramp_up_s: float = 0.0  # a level's concurrency rises from what is in flight to its own over this


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
    ramp_up_s: float = 0.0,
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
        ramp_up_s=ramp_up_s,
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


_LIST = re.compile(r"^\d+(,\d+)+$")


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length distribution: ``fixed`` N, ``uniform`` mean +- spread, or ``choice`` of a list."""

    kind: str
    values: tuple[int, ...]

    @classmethod
    def parse(cls, spec: str | int, what: str = "length") -> Lengths:
        """``128``, ``128:32`` or ``64,128,256``; ValueError with a one-line message otherwise."""
        text = str(spec).strip().replace(" ", "")
        with contextlib.suppress(ValueError):
            if text.isdigit():
                n = int(text)
                if n < 1:
                    raise ValueError
                return cls("fixed", (n,))
            if ":" in text:
                mean_s, spread_s = text.split(":", 1)
                mean, spread = int(mean_s), int(spread_s)
                if mean < 1 or spread < 0 or spread >= mean:
                    raise ValueError
                return cls("uniform", (mean, spread)) if spread else cls("fixed", (mean,))
            if _LIST.match(text):
                vals = tuple(int(v) for v in text.split(","))
                if min(vals) < 1:
                    raise ValueError
                return cls("choice", vals)
        raise ValueError(
            f"bad {what} {spec!r}: expected N, MEAN:SPREAD (uniform, spread < mean) or a list A,B,C of positive integers"
        )

    @property
    def spec(self) -> str:
        if self.kind == "uniform":
            return f"{self.values[0]}:{self.values[1]}"
        return ",".join(str(v) for v in self.values)

    @property
    def mean(self) -> float:
        if self.kind == "choice":
            return sum(self.values) / len(self.values)
        return float(self.values[0])

    @property
    def low(self) -> int:
        return self.values[0] - self.values[1] if self.kind == "uniform" else min(self.values)

    @property
    def high(self) -> int:
        return self.values[0] + self.values[1] if self.kind == "uniform" else max(self.values)

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed"

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.values[0]
        if self.kind == "uniform":
            mean, spread = self.values
            return rng.randint(mean - spread, mean + spread)
        return rng.choice(self.values)


_THINK = re.compile(r"^(exp:)?(\d+(\.\d*)?|\.\d+)(:(\d+(\.\d*)?|\.\d+))?$")


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """Seconds a conversation waits between its turns (``--think-time``): ``2`` (always), ``2:1``
    (uniform over mean +- spread), ``exp:2`` (exponential with that mean, as people's pauses are) or
    ``1,2,5`` (one of the list, uniformly)."""

    kind: str  # fixed, uniform, exp, choice
    values: tuple[float, ...]

    @classmethod
    def parse(cls, spec: str | float) -> ThinkTime:
        """ValueError with a one-line message when ``spec`` is none of the shapes."""
        text = str(spec).strip().replace(" ", "")
        with contextlib.suppress(ValueError):
            if "," in text:
                vals = tuple(float(v) for v in text.split(","))
                if min(vals) >= 0 and max(vals) <= 86_400:
                    return cls("choice", vals)
            elif (m := _THINK.match(text)) is not None and not (m.group(1) and m.group(4)):
                mean = float(m.group(2))
                spread = float(m.group(5)) if m.group(5) else 0.0
                if mean <= 86_400 and spread <= mean:
                    kind = "exp" if m.group(1) else "uniform" if spread else "fixed"
                    return cls(kind, (mean, spread) if spread else (mean,))
        raise ValueError(f"bad --think-time {spec!r}: expected seconds S, MEAN:SPREAD (uniform, spread <= mean), "
                         "exp:MEAN (exponential) or a list A,B,C (at most a day)")

    @property
    def spec(self) -> str:
        if self.kind == "choice":
            return ",".join(f"{v:g}" for v in self.values)
        text = ":".join(f"{v:g}" for v in self.values)
        return "exp:" + text if self.kind == "exp" else text

    def draw(self, rng: random.Random) -> float:
        if self.kind == "uniform":
            mean, spread = self.values
            return rng.uniform(mean - spread, mean + spread)
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.values[0]) if self.values[0] > 0 else 0.0
        if self.kind == "choice":
            return rng.choice(self.values)
        return self.values[0]
