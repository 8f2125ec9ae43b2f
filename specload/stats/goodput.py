"""Goodput: one level's requests judged against the ``--slo`` objectives, with 95 % intervals.

``LevelRequestColumns`` collects a level's requests while it runs (only what the objectives need);
``evaluate_level`` gives what the level table, the record, ``report`` and the capacity search show:
the share of good requests, goodput, each objective's verdict. Its statistics are the comparison's
(``intervals``, ``level_metrics``), so a level means the same in both; the definitions are the
README's "Capacity". It bootstraps (tens of ms): callers on the event loop run it in a thread.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from specload.datatypes import ErrorKind, RequestRecord
from specload.stats import intervals as iv
from specload.stats.histogram import LogHistogram
from specload.stats.level_metrics import LevelRequests, estimate
from specload.stats.slo import (
    MET,
    MISSED,
    UNDECIDED,
    Interval,
    LevelGoodput,
    ObjectiveResult,
    RequestFigures,
    SloSpec,
)

NAN = float("nan")


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
        fig = self.spec.request_values(rec) if self.spec is not None else None
        kind = None if rec.ok else (rec.error_kind.value if rec.error_kind is not None else "error")
        tpot = rec.tpot_ns if rec.ok else None
        self._append((rec.start_ns - self.t0_ns) / 1e9, (rec.end_ns - self.t0_ns) / 1e9, kind,
                     float(rec.output_tokens) if rec.ok else NAN,
                     rec.ttft_ns / 1e6 if rec.ok and rec.ttft_ns is not None else NAN,
                     NAN if tpot is None else tpot / 1e6,
                     rec.e2e_ns / 1e6 if rec.ok and rec.e2e_ns is not None else NAN, fig)

    def add_line(self, d: dict) -> None:
        """A ``request`` line of a record (``report --slo``): its latencies in ms, its times in s. The
        lines keep no per-token gaps, so ITL objectives cannot be judged from them (see ``slo_from_lines``)."""
        ok = bool(d.get("ok"))
        err = d.get("error")
        kind = None if ok else (err.get("kind") if isinstance(err, dict) else "error")

        def num(key: str) -> float:
            v = d.get(key)
            return float(v) if ok and isinstance(v, (int, float)) and not isinstance(v, bool) else NAN

        start = float(d.get("start_s", 0.0))
        end = d.get("end_s")
        end_s = float(end) if isinstance(end, (int, float)) else start + (num("e2e_ms") / 1e3 if ok else 0.0)
        ttft, tpot, e2e = num("ttft_ms"), num("tpot_ms"), num("e2e_ms")
        fig = None
        if self.spec is not None:
            fig = RequestFigures(
                ttft_ms=None if math.isnan(ttft) else ttft, tpot_ms=None if math.isnan(tpot) else tpot,
                e2e_ms=None if math.isnan(e2e) else e2e, failed=not ok and kind != "cancelled",
                cancelled=kind == "cancelled",
            )
        self._append(start, end_s, kind, num("output_tokens"), ttft, tpot, e2e, fig)

    def _append(self, start_s: float, end_s: float, kind: str | None, tokens: float, ttft_ms: float,
                tpot_ms: float, e2e_ms: float, fig: RequestFigures | None) -> None:
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.ok.append(1 if kind is None else 0)
        self.kinds.append(kind)
        self.tokens.append(tokens)
        self.ttft_ms.append(ttft_ms)
        self.tpot_ms.append(tpot_ms)
        self.e2e_ms.append(e2e_ms)
        spec = self.spec
        if spec is None or fig is None:
            return
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


def _of(est: iv.Estimate) -> Interval | None:
    return None if est.value is None else Interval(est.value, est.ci_low, est.ci_high)


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
    throughput = _of(thr) or Interval.exact(0.0)
    counted_mask = np.array([k != ErrorKind.CANCELLED.value for k in level.error_kind], dtype=bool) if n \
        else np.zeros(0, bool)
    sel = st.mask & counted_mask
    occ = (level.end_s - level.start_s) if n else np.zeros(0)  # type: ignore[operator]
    req_s = None
    if st.mean_in_flight is not None and sel.sum() >= 2:
        req_s = _of(iv.ratio_of_sums_ci(np.ones(int(sel.sum())), occ[sel], scale=st.mean_in_flight, seed=seed))
    goodput = None
    if fz.spec is not None:
        goodput = _goodput(fz, sel, occ, st.mean_in_flight, counted_mask, seed, thr)
    note = thr.note if thr.ci_low is None else None
    return LevelEvaluation(n, throughput, req_s, st.mean_in_flight, goodput, note)


def _goodput(fz: FrozenLevel, sel: np.ndarray, occ: np.ndarray, in_flight: float | None,
             counted_mask: np.ndarray, seed: int, throughput: iv.Estimate | None = None) -> LevelGoodput:
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
        results.append(ObjectiveResult(o.name, o.quantile, o.limit_ms, _of(share), value,
                                       _verdict(share, o.quantile)))
    if spec.per_request:
        pr = fz.per_request_ok & level.ok
        share = iv.share_ci(int((pr & sel).sum()), k)
        results.append(ObjectiveResult("attainment", spec.attainment, None, _of(share), None,
                                       _verdict(share, spec.attainment)))
    verdicts = [r.verdict for r in results]
    verdict = MISSED if MISSED in verdicts else UNDECIDED if UNDECIDED in verdicts else MET
    note = None
    if k == 0:
        verdict = UNDECIDED
        note = (f"no steady-state requests (fill and drain excluded): run at least about "
                f"{2 * level.concurrency + iv.MIN_SAMPLES} requests per level")
    good_share = _of(iv.share_ci(int((good & sel).sum()), k)) if k else None
    req_s = tok_s = None
    if in_flight is not None and k >= 2:
        g = good[sel].astype(np.float64)
        tokens = np.where(good[sel], np.nan_to_num(level.output_tokens[sel]), 0.0)  # type: ignore[index]
        req_s = _widened(_of(iv.ratio_of_sums_ci(g, occ[sel], scale=in_flight, seed=seed)), throughput)
        tok_s = _widened(_of(iv.ratio_of_sums_ci(tokens, occ[sel], scale=in_flight, seed=seed)), throughput)
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


def _widened(x: Interval | None, like: iv.Estimate | None) -> Interval | None:
    """``x``'s interval at least as wide, relative to its value, as the level's throughput interval:
    the throughput's batch means see drift within the level that a bootstrap over requests cannot,
    and goodput is a part of that throughput."""
    if x is None or like is None or like.value is None or like.ci_low is None or like.ci_high is None:
        return x
    if x.lo is None or x.hi is None or like.value <= 0 or x.value <= 0:
        return x
    lo_rel, hi_rel = like.ci_low / like.value, like.ci_high / like.value
    return Interval(x.value, min(x.lo, x.value * lo_rel), max(x.hi, x.value * hi_rel))


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


class LevelCollector:
    """Every level's requests as ``LevelRequestColumns``, made as each level's first request ends.

    One per run, shared by the level table's goodput and the capacity search, so each request is kept
    once. Warm-up requests are not kept. A level's open-loop flag (its steady state starts at its first
    end rather than when C are in flight) comes from the run (``--rate``) or from ``expect()``.
    """

    def __init__(self, spec: SloSpec | None, *, t0_ns: int = 0, open_loop: bool = False) -> None:
        self.spec = spec
        self.t0_ns = t0_ns
        self.open_loop = open_loop
        self._levels: dict[int, LevelRequestColumns] = {}

    def expect(self, index: int, concurrency: int, *, open_loop: bool | None = None) -> LevelRequestColumns:
        """Say how a level is run before its requests come (the search's probes)."""
        cols = self._levels.get(index)
        if cols is None:
            cols = self._levels[index] = LevelRequestColumns(
                index, concurrency, self.spec, open_loop=self.open_loop if open_loop is None else open_loop,
                t0_ns=self.t0_ns,
            )
        return cols

    def add(self, rec: RequestRecord) -> None:
        if rec.warmup or rec.level_index < 0:
            return
        cols = self._levels.get(rec.level_index)
        if cols is None:
            cols = self.expect(rec.level_index, rec.level)
        cols.add(rec)

    def get(self, index: int) -> LevelRequestColumns | None:
        return self._levels.get(index)

    def drop(self, index: int) -> None:
        """Forget a level whose summary is done (a summary is released only once all the level's
        requests have ended, so none of its requests comes after)."""
        self._levels.pop(index, None)


def _no_itl(spec: SloSpec) -> None:
    if any(o.metric == "itl" for o in spec.objectives):
        raise ValueError("ITL objectives cannot be judged from a record: its request lines keep no per-token gaps")


def goodput_of_levels(spec: SloSpec, levels: Iterable[LevelRequests], *, seed: int = 0) -> dict[int, LevelGoodput]:
    """Goodput of a run's levels (``runs.Run.levels``: a record or another tool's file) against ``spec``,
    as ``goodput_from_lines`` judges a record's lines; ValueError for ITL objectives."""
    _no_itl(spec)
    out = {}
    for lv in levels:
        cols = LevelRequestColumns(lv.index, lv.concurrency, spec, open_loop=lv.open_loop)
        named = {k: getattr(lv, k) for k in ("start_s", "end_s", "ttft_ms", "tpot_ms", "e2e_ms", "output_tokens")}
        for i in range(lv.n):
            line = {k: float(a[i]) for k, a in named.items() if a is not None and not math.isnan(a[i])}
            kind = lv.error_kind[i] if i < len(lv.error_kind) else None
            cols.add_line({**line, "ok": bool(lv.ok[i]), "error": None if lv.ok[i] else {"kind": kind or "error"}})
        g = evaluate_level(cols, seed=seed).goodput
        if g is not None:
            out[lv.index] = g
    return out


def capacity_under(levels: Iterable[LevelRequests], goodput: dict[int, LevelGoodput]) -> tuple[int | None, list]:
    """The highest concurrency whose objectives were met with no lower level missing them (None: none
    met), and each closed-loop level's (concurrency, verdict) in the order of concurrency."""
    verdicts = sorted((lv.concurrency, goodput[lv.index].verdict) for lv in levels
                      if lv.index in goodput and not lv.open_loop)
    best = None
    for c, verdict in verdicts:
        if verdict == MISSED:
            break
        if verdict == MET:
            best = c
    return best, verdicts


def goodput_from_lines(spec: SloSpec, requests: list[dict], *, open_loop: bool = False,
                       seed: int = 0) -> dict[int, LevelGoodput]:
    """Goodput of every level of a record against ``spec`` (``specload report RUN --slo SPEC``): what
    the run would have shown with these objectives. ITL objectives need per-token gaps, which request
    lines do not keep: ValueError with a one-line message."""
    _no_itl(spec)
    levels: dict[int, LevelRequestColumns] = {}
    for d in requests:
        idx = d.get("level_index")
        if d.get("warmup") or not isinstance(idx, int) or idx < 0:
            continue
        cols = levels.get(idx)
        if cols is None:
            cols = levels[idx] = LevelRequestColumns(idx, int(d.get("level") or 1), spec, open_loop=open_loop)
        cols.add_line(d)
    out = {}
    for idx, cols in levels.items():
        g = evaluate_level(cols, seed=seed).goodput
        if g is not None:
            out[idx] = g
    return out
