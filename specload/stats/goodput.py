"""Goodput: one level's requests judged against the ``--slo`` objectives, with 95 % intervals.

``LevelRequestColumns`` collects a level's requests while it runs (compactly: the times, tokens and
latencies the objectives need, not the chunks), ``evaluate_level`` turns them into what the level
table, the record, ``report`` and the capacity search show: the share of good requests, goodput in
requests/s and tokens/s, each objective's verdict, and (for the search) the level's throughput.

Definitions (the README's "Capacity" section says the same):

- A request is **good** when it meets the threshold of every objective: a per-request objective's
  limit, and a percentile objective's limit too (``ttft_p99<=500ms``: its TTFT is at most 500 ms).
  A failed request is never good; a request specload cancelled is not counted.
- **Objective verdicts** are decided on shares: ``ttft_p99<=500ms`` holds when at least 99 % of the
  level's requests have TTFT <= 500 ms; the per-request objectives hold together when the share of
  requests meeting all of them is at least the attainment (90 % unless ``attainment>=`` says). The
  verdict is ``met`` when the share's Wilson interval lies wholly at or above the target, ``missed``
  when wholly below, ``undecided`` otherwise (the capacity search gives such a level more requests).
  A p99 objective needs 381 requests that all meet it before it can be ``met``; fewer never decide.
  The figure shown next to a percentile objective is the percentile itself with its distribution-free
  (order-statistic) interval. An ITL percentile pools the level's tokens: its share counts tokens,
  and its interval counts requests (the tokens of one request are not independent samples).
- **Goodput** uses the steady-state requests and Little's law, as the level's throughput interval
  does (``level_metrics``): good requests/s = L * (good requests) / (their total time in flight) and
  good tokens/s the same with tokens, L the mean number in flight; intervals by bootstrap over
  requests.
- Every figure uses the level's steady-state requests (fill and drain excluded, as in comparisons);
  a level too short to have any is ``undecided`` with a note saying how many requests it needs.

Intervals and the steady-state selection come from ``stats.intervals`` and ``stats.level_metrics``
(the comparison's machinery), so a level means the same in a comparison and in a capacity search.
Evaluating a level bootstraps over its requests (tens of ms for a few hundred): callers on the
event loop run it in a thread.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import numpy as np

from specload.records import ErrorKind, RequestRecord
from specload.stats import intervals as iv
from specload.stats.histogram import LogHistogram
from specload.stats.level_metrics import LevelRequests, estimate
from specload.stats.slo import SloSpec

MET, MISSED, UNDECIDED = iv.Objective.MET, iv.Objective.MISSED, iv.Objective.UNDECIDED
NAN = float("nan")


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

    @classmethod
    def of(cls, est: iv.Estimate) -> Interval | None:
        return None if est.value is None else cls(est.value, est.ci_low, est.ci_high)

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


@dataclass(frozen=True, slots=True)
class LevelEvaluation:
    """Everything the capacity search reads from one level."""

    requests: int
    throughput: Interval  # output tok/s at steady state (Little's law), with its interval
    req_s: Interval | None
    in_flight: float | None  # mean requests in flight at steady state
    goodput: LevelGoodput | None  # None without objectives
    note: str | None = None


class LevelRequestColumns:
    """One level's requests, kept as the objectives and the steady-state selection need them.

    Per request: start and end (s), ok, cancelled, output tokens, TTFT/TPOT/E2E (ms; NaN where the
    request has none), and per objective whether the request met its threshold. ITL objectives keep
    per-request token counts (tokens within the limit, tokens) and a pooled histogram, not the gaps.
    """

    def __init__(self, index: int, concurrency: int, spec: SloSpec | None, *, open_loop: bool = False,
                 t0_ns: int = 0) -> None:
        self.index = index
        self.concurrency = concurrency
        self.spec = spec
        self.open_loop = open_loop
        self.t0_ns = t0_ns
        self.start_s = array("d")
        self.end_s = array("d")
        self.ok = array("b")
        self.kinds: list[str | None] = []
        self.tokens = array("d")
        self.ttft_ms = array("d")
        self.tpot_ms = array("d")
        self.e2e_ms = array("d")
        objectives = spec.objectives if spec is not None else ()
        self.meets = {o.name: array("b") for o in objectives}
        self.per_request_ok = array("b")  # met every per-request objective
        self._itl = [o for o in objectives if o.metric == "itl" and o.quantile is not None]
        self.itl_within = {o.name: array("d") for o in self._itl}
        self.itl_tokens = array("d")
        self.itl_hist = LogHistogram() if self._itl else None

    def __len__(self) -> int:
        return len(self.ok)

    def add(self, rec: RequestRecord) -> None:
        spec = self.spec
        self.start_s.append((rec.start_ns - self.t0_ns) / 1e9)
        self.end_s.append((rec.end_ns - self.t0_ns) / 1e9)
        self.ok.append(1 if rec.ok else 0)
        self.kinds.append(None if rec.ok else (rec.error_kind.value if rec.error_kind is not None else "error"))
        self.tokens.append(float(rec.output_tokens) if rec.ok else NAN)
        self.ttft_ms.append(rec.ttft_ns / 1e6 if rec.ok and rec.ttft_ns is not None else NAN)
        tpot = rec.tpot_ns if rec.ok else None
        self.tpot_ms.append(NAN if tpot is None else tpot / 1e6)
        self.e2e_ms.append(rec.e2e_ns / 1e6 if rec.ok and rec.e2e_ns is not None else NAN)
        if spec is None:
            return
        fig = spec.request_values(rec)
        for o in spec.objectives:
            if o.metric == "itl" and o.quantile is not None:
                met = (not fig.failed) and (not fig.itl_ms or float(np.quantile(fig.itl_ms, o.quantile)) <= o.limit_ms)
            else:
                met = fig.meets(o)
            self.meets[o.name].append(1 if met else 0)
        self.per_request_ok.append(1 if all(fig.meets(o) for o in spec.per_request) else 0)
        if self._itl:
            itl = np.asarray(fig.itl_ms, dtype=np.float64)
            self.itl_tokens.append(float(itl.size) if not fig.failed else NAN)
            for o in self._itl:
                self.itl_within[o.name].append(float((itl <= o.limit_ms).sum()) if not fig.failed else NAN)
            if itl.size and self.itl_hist is not None:
                self.itl_hist.add_many(itl * 1e6)

    def freeze(self) -> FrozenLevel:
        """A copy of the columns as they are now (cheap; taken on the event loop), which
        ``evaluate_level`` may then read in a thread while this level goes on collecting."""
        n = len(self.ok)

        def f(a: array) -> np.ndarray:
            return np.frombuffer(a, dtype=np.float64).copy() if len(a) else np.zeros(0)

        return FrozenLevel(
            level=self.level_requests(),
            spec=self.spec,
            meets={k: _flags(v, n).copy() for k, v in self.meets.items()},
            per_request_ok=_flags(self.per_request_ok, n).copy(),
            itl_within={k: f(v) for k, v in self.itl_within.items()},
            itl_tokens=f(self.itl_tokens),
            itl_percentiles={o.name: self._itl_pct(o.quantile) for o in self._itl},
        )

    def _itl_pct(self, q: float | None) -> float | None:
        if self.itl_hist is None or not self.itl_hist.n or q is None:
            return None
        p = self.itl_hist.percentile(q * 100)
        return None if p is None else p / 1e6

    def level_requests(self) -> LevelRequests:
        def col(a: array) -> np.ndarray:
            return np.frombuffer(a, dtype=np.float64).copy() if len(a) else np.zeros(0)

        return LevelRequests(
            index=self.index,
            concurrency=self.concurrency,
            ok=np.frombuffer(self.ok, dtype=np.int8).astype(bool) if len(self.ok) else np.zeros(0, bool),
            start_s=col(self.start_s),
            end_s=col(self.end_s),
            ttft_ms=col(self.ttft_ms),
            tpot_ms=col(self.tpot_ms),
            e2e_ms=col(self.e2e_ms),
            output_tokens=col(self.tokens),
            error_kind=tuple(self.kinds),
            open_loop=self.open_loop,
        )


@dataclass(frozen=True, eq=False)
class FrozenLevel:
    """A level's columns at one moment, for ``evaluate_level``."""

    level: LevelRequests
    spec: SloSpec | None
    meets: dict[str, np.ndarray]
    per_request_ok: np.ndarray
    itl_within: dict[str, np.ndarray]
    itl_tokens: np.ndarray
    itl_percentiles: dict[str, float | None]


def _flags(a: array, n: int) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int8).astype(bool) if len(a) else np.zeros(n, bool)


def _verdict(share: iv.Estimate, target: float) -> str:
    if share.value is None or share.n == 0:
        return UNDECIDED
    return iv.Objective.check(share, target, lower_is_better=False)


def evaluate_level(frozen: FrozenLevel | LevelRequestColumns, *, seed: int = 0) -> LevelEvaluation:
    """The level's throughput, request rate and (with objectives) goodput, each with its interval."""
    fz = frozen.freeze() if isinstance(frozen, LevelRequestColumns) else frozen
    level = fz.level
    n = level.n
    thr = estimate(level, "throughput", seed=seed)
    st = level.steady()
    throughput = Interval.of(thr) or Interval.exact(0.0)
    counted_mask = np.array([k != ErrorKind.CANCELLED.value for k in level.error_kind], dtype=bool) if n \
        else np.zeros(0, bool)
    sel = st.mask & counted_mask
    occ = (level.end_s - level.start_s) if n else np.zeros(0)  # type: ignore[operator]
    req_s = None
    if st.mean_in_flight is not None and sel.sum() >= 2:
        req_s = Interval.of(iv.ratio_of_sums_ci(np.ones(int(sel.sum())), occ[sel], scale=st.mean_in_flight, seed=seed))
    goodput = None
    if fz.spec is not None:
        goodput = _goodput(fz, sel, occ, st.mean_in_flight, counted_mask, seed)
    note = thr.note if thr.ci_low is None else None
    return LevelEvaluation(n, throughput, req_s, st.mean_in_flight, goodput, note)


def _goodput(fz: FrozenLevel, sel: np.ndarray, occ: np.ndarray, in_flight: float | None,
             counted_mask: np.ndarray, seed: int) -> LevelGoodput:
    spec, level = fz.spec, fz.level
    assert spec is not None
    n = level.n
    k = int(sel.sum())
    good = np.ones(n, bool) & level.ok
    for o in spec.objectives:
        good &= fz.meets[o.name]
    results: list[ObjectiveResult] = []
    for o in spec.percentiles:
        assert o.quantile is not None
        met = fz.meets[o.name]
        if o.metric == "itl":
            share = _itl_share(fz, o.name, sel)
            p = fz.itl_percentiles.get(o.name)
            value = None if p is None else Interval(p, None, None)
        else:
            share = iv.share_ci(int((met & sel).sum()), k)
            column = {"ttft": level.ttft_ms, "tpot": level.tpot_ms, "e2e": level.e2e_ms}[o.metric]
            vals = column[sel & level.ok] if column is not None else np.zeros(0)
            vals = vals[np.isfinite(vals)]
            value = None
            if vals.size:
                lo, hi = iv.order_statistic_ci(vals, o.quantile)
                value = Interval(float(np.percentile(vals, o.quantile * 100)), lo, hi)
        results.append(ObjectiveResult(o.name, o.quantile, o.limit_ms, Interval.of(share), value,
                                       _verdict(share, o.quantile)))
    if spec.per_request:
        pr = fz.per_request_ok & level.ok
        share = iv.share_ci(int((pr & sel).sum()), k)
        results.append(ObjectiveResult("attainment", spec.attainment, None, Interval.of(share), None,
                                       _verdict(share, spec.attainment)))
    verdicts = [r.verdict for r in results]
    verdict = MISSED if MISSED in verdicts else UNDECIDED if UNDECIDED in verdicts else MET
    note = None
    if k == 0:
        verdict = UNDECIDED
        note = (f"no steady-state requests (fill and drain excluded): run at least about "
                f"{2 * level.concurrency + iv.MIN_SAMPLES} requests per level")
    good_share = Interval.of(iv.share_ci(int((good & sel).sum()), k)) if k else None
    req_s = tok_s = None
    if in_flight is not None and k >= 2:
        g = good[sel].astype(np.float64)
        tokens = np.where(good[sel], np.nan_to_num(level.output_tokens[sel]), 0.0)  # type: ignore[index]
        req_s = Interval.of(iv.ratio_of_sums_ci(g, occ[sel], scale=in_flight, seed=seed))
        tok_s = Interval.of(iv.ratio_of_sums_ci(tokens, occ[sel], scale=in_flight, seed=seed))
    return LevelGoodput(
        slo=spec.text(),
        counted=int(counted_mask.sum()),
        steady=k,
        good=int((good & sel).sum()),
        good_share=good_share,
        req_s=req_s,
        tok_s=tok_s,
        objectives=tuple(results),
        verdict=verdict,
        note=note,
    )


def _itl_share(fz: FrozenLevel, name: str, sel: np.ndarray) -> iv.Estimate:
    """Share of the steady requests' tokens within the ITL limit. Its interval is Wilson's over
    requests, not tokens (a request's tokens share its batch and its stalls): the token share is
    taken as if each request were one sample, which is conservative."""
    w, t = fz.itl_within[name][sel], fz.itl_tokens[sel]
    failed = ~np.isfinite(t)
    mean_tokens = float(np.nanmean(t)) if np.isfinite(t).any() else 1.0
    # a failed request counts as a request whose tokens all came too late
    total = float(np.nansum(t) + failed.sum() * mean_tokens)
    share = float(np.nansum(w) / total) if total > 0 else 0.0
    n_req = int(sel.sum())
    est = iv.share_ci(round(share * n_req), n_req)
    return iv.Estimate(share, est.ci_low, est.ci_high, n_req, None, math.inf, "wilson over requests", est.note)
