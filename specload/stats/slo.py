"""Service-level objectives: the ``--slo`` spec (``ttft_p99<=500ms,tpot_p50<=40ms,e2e<=10s``), what one
request's figures say against it, and the plain result types of a level against it.

Every objective, percentile or per-request, becomes a per-request threshold and a share of requests
that must meet it, so one test (a share against its target) decides both; the rules (failed and
cancelled requests, attainment, ITL) are the README's "Capacity". Pure: parsing and arithmetic, so
a level summary can carry the results without the statistics of ``goodput.py``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specload.datatypes import ErrorKind, RequestRecord

METRICS = ("ttft", "tpot", "itl", "e2e")
MET, MISSED, UNDECIDED = "met", "missed", "undecided"
DEFAULT_ATTAINMENT = 0.90
CONFIDENCE = 0.95

_TERM = re.compile(
    r"^(?P<metric>[a-z0-9]+?)(?:_p(?P<q>\d+(?:\.\d+)?))?\s*(?P<op><=|<|>=|>|=)\s*"
    r"(?P<value>[0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(?P<unit>[a-z%]*)$"
)
_UNITS_MS = {"ms": 1.0, "s": 1000.0}


class SloError(ValueError):
    """A bad ``--slo`` spec; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Objective:
    metric: str  # ttft, tpot, itl, e2e
    quantile: float | None  # 0.99 for p99; None: a per-request objective
    limit_ms: float

    @property
    def name(self) -> str:
        """``ttft_p99`` or ``ttft`` (per request)."""
        if self.quantile is None:
            return self.metric
        return f"{self.metric}_p{_fmt_q(self.quantile * 100)}"

    @property
    def per_request(self) -> bool:
        return self.quantile is None

    def text(self) -> str:
        return f"{self.name}<={_fmt_limit(self.limit_ms)}"


@dataclass(frozen=True, slots=True)
class SloSpec:
    objectives: tuple[Objective, ...]
    attainment: float = DEFAULT_ATTAINMENT  # share of requests that must meet the per-request objectives

    @property
    def per_request(self) -> tuple[Objective, ...]:
        return tuple(o for o in self.objectives if o.quantile is None)

    @property
    def percentiles(self) -> tuple[Objective, ...]:
        return tuple(o for o in self.objectives if o.quantile is not None)

    def text(self) -> str:
        """The spec in its canonical spelling (the record keeps this)."""
        parts = [o.text() for o in self.objectives]
        if self.per_request:
            parts.append(f"attainment>={_fmt_q(self.attainment * 100)}%")
        return ",".join(parts)

    def targets(self) -> tuple[tuple[str, float], ...]:
        """(name, the share of requests that must meet it) for each decision the level needs: one per
        percentile objective, and ``attainment`` for the per-request objectives together."""
        out = [(o.name, o.quantile) for o in self.percentiles if o.quantile is not None]  # all of them
        if self.per_request:
            out.append(("attainment", self.attainment))
        return tuple(out)

    def min_requests(self, confidence: float = CONFIDENCE) -> int:
        """Fewest requests that can confirm every objective held.

        A level confirms "at least a share q of requests meet the limit" when the share's Wilson
        interval lies above q; with all n requests meeting it that lower bound is n / (n + z^2), so
        n must reach q z^2 / (1 - q): 381 requests for a p99 objective, 35 for p90, 4 for p50. Fewer
        can never be decided "met".
        """
        z = _z(confidence)
        need = 1
        for _, q in self.targets():
            need = max(need, math.floor(q * z * z / (1.0 - q)) + 1)
        return need

    def request_values(self, rec: RequestRecord) -> RequestFigures:
        """One request's figures in ms (None where the request has none), for the checks below."""
        if not rec.ok:
            return RequestFigures(failed=rec.error_kind is not ErrorKind.CANCELLED, cancelled=rec.error_kind is ErrorKind.CANCELLED)
        itl = rec.itl_per_token_ns() if any(o.metric == "itl" for o in self.objectives) else []
        tpot = rec.tpot_ns
        return RequestFigures(
            ttft_ms=None if rec.ttft_ns is None else rec.ttft_ns / 1e6,
            tpot_ms=None if tpot is None else tpot / 1e6,
            e2e_ms=None if rec.e2e_ns is None else rec.e2e_ns / 1e6,
            itl_max_ms=max(itl) / 1e6 if itl else None,
            itl_ms=tuple(v / 1e6 for v in itl),
        )


@dataclass(frozen=True, slots=True)
class RequestFigures:
    """A request as the objectives see it: its latencies in ms, or that it failed."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_max_ms: float | None = None  # the worst per-token gap
    itl_ms: tuple[float, ...] = ()  # every per-token gap (pooled by a level's ITL percentiles)
    failed: bool = False  # an error: meets no objective
    cancelled: bool = False  # stopped by specload: not counted

    def value(self, metric: str) -> float | None:
        """The figure a per-request objective on ``metric`` is checked against."""
        return {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2e": self.e2e_ms, "itl": self.itl_max_ms}[metric]

    def meets(self, o: Objective) -> bool:
        """Does this request meet ``o``'s threshold? A failed request never does; a figure the request
        does not have (TPOT of a one-token answer) cannot be missed."""
        if self.failed:
            return False
        v = self.value(o.metric)
        return v is None or v <= o.limit_ms

    def good(self, spec: SloSpec) -> bool:
        """Meets every per-request objective (with none, every request that did not fail is good)."""
        if self.failed or self.cancelled:
            return False
        return all(self.meets(o) for o in spec.per_request)


def parse_slo(text: str) -> SloSpec:
    """``"ttft_p99<=500ms,tpot_p50<=40ms,e2e<=10s"`` -> SloSpec, or SloError with a one-line message."""
    if text is None or not text.strip():
        raise SloError("--slo is empty: give objectives like 'ttft_p99<=500ms,tpot_p50<=40ms'")
    objectives: list[Objective] = []
    attainment: float | None = None
    seen: set[str] = set()
    for raw in text.split(","):
        term = raw.strip().lower()
        if not term:
            continue
        m = _TERM.match(term)
        if m is None:
            raise SloError(f"--slo term {raw.strip()!r}: expected METRIC[_pNN]<=LIMIT with a unit, e.g. ttft_p99<=500ms")
        metric, q, op, value, unit = m["metric"], m["q"], m["op"], m["value"], m["unit"]
        if metric == "attainment":
            if q is not None:
                raise SloError(f"--slo term {raw.strip()!r}: attainment takes no percentile")
            if op not in (">=", ">"):
                raise SloError(f"--slo term {raw.strip()!r}: attainment is a floor, write attainment>={value}{unit}")
            share = float(value) / 100.0 if unit == "%" else float(value) if unit == "" else None
            if share is None:
                raise SloError(f"--slo term {raw.strip()!r}: attainment is a share, e.g. attainment>=95%")
            if not 0.0 < share < 1.0:
                raise SloError(f"--slo term {raw.strip()!r}: attainment must be between 0 and 100 % (exclusive)")
            attainment = share
            continue
        if metric not in METRICS:
            raise SloError(f"--slo term {raw.strip()!r}: unknown metric {metric!r} (use {', '.join(METRICS)})")
        if op not in ("<=", "<"):
            raise SloError(f"--slo term {raw.strip()!r}: latency objectives are ceilings, write {metric}<=...")
        if unit not in _UNITS_MS:
            if unit == "":
                raise SloError(f"--slo term {raw.strip()!r}: the limit needs a unit, ms or s (e.g. {value}ms)")
            raise SloError(f"--slo term {raw.strip()!r}: unknown unit {unit!r} (use ms or s)")
        limit_ms = float(value) * _UNITS_MS[unit]
        if not (limit_ms > 0 and math.isfinite(limit_ms)):
            raise SloError(f"--slo term {raw.strip()!r}: the limit must be positive")
        quantile = None
        if q is not None:
            pct = float(q)
            if not 0.0 < pct < 100.0:
                raise SloError(f"--slo term {raw.strip()!r}: the percentile must be between p0 and p100 (exclusive)")
            quantile = pct / 100.0
        o = Objective(metric, quantile, limit_ms)
        if o.name in seen:
            raise SloError(f"--slo names {o.name} twice")
        seen.add(o.name)
        objectives.append(o)
    if not objectives:
        raise SloError("--slo has no latency objective: give at least one, e.g. ttft_p99<=500ms")
    if attainment is not None and not any(o.per_request for o in objectives):
        raise SloError("--slo attainment applies to per-request objectives (e.g. ttft<=500ms); there are none")
    return SloSpec(tuple(objectives), DEFAULT_ATTAINMENT if attainment is None else attainment)


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def _fmt_q(pct: float) -> str:
    return f"{pct:.6g}"


def _fmt_limit(ms: float) -> str:
    if ms >= 1000 and (ms / 1000).is_integer():
        return f"{ms / 1000:g}s"
    return f"{ms:g}ms"


@dataclass(frozen=True, slots=True)
class Interval:
    """A figure with its 95 % interval (lo == hi == value when the figure is exact; lo or hi None when the
    data cannot bound that side)."""

    value: float
    lo: float | None
    hi: float | None

    @classmethod
    def exact(cls, v: float) -> Interval:
        return cls(v, v, v)

    def as_list(self, nd: int = 4) -> list[float | None]:
        return [_round(self.value, nd), _round(self.lo, nd), _round(self.hi, nd)]

    @classmethod
    def from_list(cls, v: object) -> Interval | None:
        if not isinstance(v, (list, tuple)) or len(v) != 3 or v[0] is None:
            return None
        return cls(float(v[0]), None if v[1] is None else float(v[1]), None if v[2] is None else float(v[2]))


def _round(v: float | None, nd: int) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.{nd + 2}g}") if abs(v) >= 1 else round(v, nd + 2)


@dataclass(frozen=True, slots=True)
class ObjectiveResult:
    name: str  # ttft_p99, tpot_p50, ... or "attainment" (the per-request objectives together)
    target: float  # the share of requests that must meet the threshold (0.99 for a p99)
    limit_ms: float | None  # None for attainment
    share: Interval | None  # share of the steady requests (or tokens, for ITL) meeting the threshold
    value_ms: Interval | None  # the percentile itself (None for attainment)
    verdict: str  # met, missed, undecided

    def as_record(self) -> dict:
        return {
            "name": self.name,
            "target": self.target,
            "limit_ms": self.limit_ms,
            "share": None if self.share is None else self.share.as_list(),
            "value_ms": None if self.value_ms is None else self.value_ms.as_list(),
            "verdict": self.verdict,
        }

    @classmethod
    def from_record(cls, d: dict) -> ObjectiveResult:
        return cls(
            name=str(d.get("name")),
            target=float(d.get("target", 0.0)),
            limit_ms=d.get("limit_ms"),
            share=Interval.from_list(d.get("share")),
            value_ms=Interval.from_list(d.get("value_ms")),
            verdict=str(d.get("verdict", UNDECIDED)),
        )


@dataclass(frozen=True, slots=True)
class LevelGoodput:
    """A level against the objectives: what the table's goodput columns and the record's ``goodput``
    object of a ``level`` line hold."""

    slo: str  # the spec in canonical spelling
    counted: int  # requests not cancelled by specload
    steady: int  # ... of which ran at the level's full load (the figures below use these)
    good: int  # steady requests that were good
    good_share: Interval | None
    req_s: Interval | None  # good requests per second
    tok_s: Interval | None  # output tokens of good requests per second
    objectives: tuple[ObjectiveResult, ...]
    verdict: str  # met (every objective met), missed (any missed), undecided
    note: str | None = None

    def as_record(self) -> dict:
        return {
            "slo": self.slo,
            "verdict": self.verdict,
            "counted": self.counted,
            "steady": self.steady,
            "good": self.good,
            "good_share": None if self.good_share is None else self.good_share.as_list(),
            "req_s": None if self.req_s is None else self.req_s.as_list(),
            "tok_s": None if self.tok_s is None else self.tok_s.as_list(),
            "objectives": [o.as_record() for o in self.objectives],
            "note": self.note,
        }

    @classmethod
    def from_record(cls, d: dict | None) -> LevelGoodput | None:
        if not isinstance(d, dict):
            return None
        return cls(
            slo=str(d.get("slo", "")),
            counted=int(d.get("counted", 0)),
            steady=int(d.get("steady", 0)),
            good=int(d.get("good", 0)),
            good_share=Interval.from_list(d.get("good_share")),
            req_s=Interval.from_list(d.get("req_s")),
            tok_s=Interval.from_list(d.get("tok_s")),
            objectives=tuple(ObjectiveResult.from_record(o) for o in d.get("objectives") or () if isinstance(o, dict)),
            verdict=str(d.get("verdict", UNDECIDED)),
            note=d.get("note"),
        )
