"""Comparing runs level by level: figures with intervals, ratios to a baseline, verdicts, flags.

A *side* is a label with one or more runs (repeats); levels pair by concurrency and occurrence
(``level_metrics.level_keys``), repeats combine with the run-to-run variance pooled over levels, and
only the *primary* metric's verdict is the level's answer (twelve metrics at 95 % would call about
half of all identical pairs different). Where ``judgement.unsound_reason`` says the runs' workloads
or a level's flags make it so, verdicts read ``unsound``; levels with dataset categories are judged
per category too. Crossovers are found, and it all becomes JSON, CSV rows and rich tables. Nothing
here reads files: ``record.runs`` does.
"""

from __future__ import annotations

import math
import os
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from specload.record.runs import Run

if TYPE_CHECKING:
    from rich.console import Console
from specload.stats import intervals as iv
from specload.stats.intervals import Decision, Difference, Estimate, Ratio
from specload.stats.judgement import unsound_reason, workload_differences, workload_warnings
from specload.stats.level_metrics import (
    DEFAULT_PRIMARY,
    METRICS,
    LevelKey,
    LevelRequests,
    estimate,
    level_keys,
)

SHAPE_TOLERANCE = 0.05  # mean prompt or output tokens per request differing by more is a different shape
# judged per category: request metrics (a level's throughput is of all its categories together)
CATEGORY_METRICS = ("per_request_tok_s", "ttft_p50", "tpot_p50", "request_accept_rate")


@dataclass(frozen=True)
class Side:
    label: str
    runs: tuple[Run, ...]

    @property
    def repeats(self) -> int:
        return len(self.runs)


@dataclass(frozen=True)
class MetricResult:
    metric: str
    side: str
    estimate: Estimate  # the side's figure, repeats combined
    per_run: tuple[Estimate, ...]
    ratio: Ratio | None = None  # other / baseline; None for the baseline or when not estimable
    difference: Difference | None = None  # shares (error rate): other - baseline
    decision: Decision | None = None  # None for the baseline


@dataclass(frozen=True)
class Flag:
    side: str
    kind: str  # shape, estimated_tokens, errors, client_saturated, client_starved, crash
    detail: str


@dataclass(frozen=True)
class LevelComparison:
    key: LevelKey
    present: tuple[str, ...]  # the sides that have this level
    results: dict[tuple[str, str], MetricResult]  # (side, metric) -> result
    flags: tuple[Flag, ...]
    # dataset category -> (side, metric) -> result, for CATEGORY_METRICS on each category's requests
    categories: dict[str, dict[tuple[str, str], MetricResult]] = field(default_factory=dict)

    def result(self, side: str, metric: str) -> MetricResult | None:
        return self.results.get((side, metric))


@dataclass(frozen=True)
class Crossover:
    metric: str
    side: str
    low: int  # the concurrency below the crossing ...
    high: int  # ... and above it
    at: float  # interpolated concurrency (geometric, where log ratio crosses 0)
    below: str  # the verdict (or direction) below, e.g. "better"
    above: str
    decided: bool  # both sides of the crossing have a decided verdict (better / worse)


@dataclass(frozen=True)
class Comparison:
    baseline: Side
    others: tuple[Side, ...]
    primary: str
    min_effect: float
    metrics: tuple[str, ...]
    levels: tuple[LevelComparison, ...]
    between: dict[str, iv.BetweenRuns | None]  # per metric; None: not estimated
    crossovers: tuple[Crossover, ...]
    shape_flags: tuple[Flag, ...]  # run-level: different request shapes
    notes: tuple[str, ...] = field(default=())
    workload_warnings: dict[str, tuple[str, ...]] = field(default_factory=dict)  # side -> judgement.workload_warnings

    @property
    def sides(self) -> tuple[Side, ...]:
        return (self.baseline, *self.others)

    @property
    def run_to_run_accounted(self) -> bool:
        return any(b is not None for b in self.between.values())


# ------------------------------------------------------------------------------------------ compare


def _seed(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def compare(sides: Sequence[Side], *, primary: str = DEFAULT_PRIMARY, min_effect: float = iv.DEFAULT_MIN_EFFECT,
            metrics: Sequence[str] | None = None) -> Comparison:
    """Compare ``sides[1:]`` against ``sides[0]`` (the baseline), level by level."""
    if len(sides) < 2:
        raise ValueError("a comparison needs a baseline and at least one other side")
    if primary not in METRICS:
        raise ValueError(f"unknown metric {primary!r}")
    names = tuple(metrics) if metrics else tuple(m for m in METRICS if _any_run_has(sides, m))
    if primary not in names:
        names = (primary, *names)
    baseline, others = sides[0], tuple(sides[1:])
    differences = _workload_differences(baseline, others)
    keyed = {s.label: [level_keys(r.levels) for r in s.runs] for s in sides}
    all_keys = sorted({k for runs in keyed.values() for m in runs for k in m})

    # every run's estimate of every metric at every level
    per_run: dict[tuple[str, LevelKey, str], list[Estimate]] = {}
    for s in sides:
        for ri, (run, by_key) in enumerate(zip(s.runs, keyed[s.label], strict=True)):
            accept, power = run.timeline.server_series("accept_len"), run.timeline.gpu_power()
            for key, lvs in by_key.items():
                for lv in lvs:
                    for m in names:
                        e = estimate(lv, m, seed=_seed(s.label, ri, key, lv.repeat, m), server=accept,
                                     gpu_power=power)
                        per_run.setdefault((s.label, key, m), []).append(e)

    between: dict[str, iv.BetweenRuns | None] = {}
    for m in names:
        groups = [v for (side, _k, mm), v in per_run.items() if mm == m and len(v) > 1]
        between[m] = iv.between_run_variance(groups) if groups else None

    levels: list[LevelComparison] = []
    for key in all_keys:
        present = tuple(s.label for s in sides if (s.label, key, names[0]) in per_run)
        results: dict[tuple[str, str], MetricResult] = {}
        for m in names:
            spec = METRICS[m]
            combined: dict[str, Estimate] = {}
            for s in sides:
                ests = per_run.get((s.label, key, m))
                if not ests:
                    continue
                if spec.kind == "share":
                    combined[s.label] = _pool_shares(keyed[s.label], key)
                else:
                    combined[s.label] = iv.combine_runs(ests, between[m])
            base = combined.get(baseline.label)
            if base is not None:
                results[(baseline.label, m)] = MetricResult(m, baseline.label, base,
                                                            tuple(per_run[(baseline.label, key, m)]))
            for s in others:
                est = combined.get(s.label)
                if est is None:
                    continue
                res = MetricResult(m, s.label, est, tuple(per_run[(s.label, key, m)]))
                if base is not None:
                    res = _decide(res, base, spec.lower_is_better, spec.kind, min_effect, key.concurrency,
                                  len(per_run[(s.label, key, m)]))
                results[(s.label, m)] = res
        flags = _level_flags(sides, keyed, key)
        categories = _by_category(sides, keyed, key, names, min_effect)
        for s in others:  # judgement.py's rule: a level it calls unsound gets no verdict
            why = unsound_reason(differences[s.label], [f"{f.kind}: {f.detail}" for f in flags
                                                        if f.side in (s.label, baseline.label)])
            if why is not None:
                for table in (results, *categories.values()):
                    _withhold(table, s.label, why)
        levels.append(LevelComparison(key, present, results, tuple(flags), categories))

    notes = [f"{s} against {baseline.label}: unsound, no verdicts: the workloads differ: {', '.join(d)}"
             for s, d in differences.items() if d]
    warned = {s.label: list(dict.fromkeys(w for run in s.runs for w in run_workload_warnings(run))) for s in sides}
    repeated = any(len(v) > 1 for v in per_run.values())
    if not repeated:
        # "one run per side" only where that is so: three files at three concurrencies are one run per level
        what = "one run per side" if all(s.repeats == 1 for s in sides) else "no level repeated on a side"
        notes.append(f"{what}: run-to-run variation is not accounted for (the intervals see only "
                     "the variation within each run; repeat runs to include it: report A1 A2 --vs B1 B2)")
    return Comparison(
        baseline=baseline,
        others=others,
        primary=primary,
        min_effect=min_effect,
        metrics=names,
        levels=tuple(levels),
        between=between,
        crossovers=tuple(_crossovers(levels, others, names)),
        shape_flags=tuple(_shape_flags(baseline, others)),
        notes=tuple(notes),
        workload_warnings={k: tuple(v) for k, v in warned.items() if v},
    )


def run_workload_warnings(run: Run) -> list[str]:
    """judgement.workload_warnings of a run: what its end line says, else worked out from its header and
    whether any level shows speculation (the server's figures or the requests' own counts)."""
    said = (run.end or {}).get("workload_warnings")
    if isinstance(said, list):
        return [w for w in said if isinstance(w, str)]
    spec = run.timeline.server_series("accept_len") is not None or any(
        lv.summary is not None and (lv.summary.accept_len is not None or lv.summary.request_accept_rate is not None)
        or (lv.spec_drafted is not None and bool(np.isfinite(lv.spec_drafted).any())) for lv in run.levels)
    return workload_warnings(run.description.request_shape(), spec)


def _any_run_has(sides: Sequence[Side], metric: str) -> bool:
    """A metric that needs a column no run has (per-request speculative counts) is left out."""
    col = METRICS[metric].column
    if col is None:
        return True
    for s in sides:
        for run in s.runs:
            for lv in run.levels:
                v = getattr(lv, col, None)
                if v is not None and bool(np.isfinite(v).any()):
                    return True
    return False


def _workload_differences(baseline: Side, others: Sequence[Side]) -> dict[str, list[str]]:
    """Per other side, how its runs' workloads (or the baseline's repeats') differ from the baseline's
    first run's."""
    ref = baseline.runs[0].description.request_shape()
    base_diff = [d for run in baseline.runs[1:] for d in workload_differences(ref, run.description.request_shape())]
    out = {}
    for s in others:
        diff = [d for run in s.runs for d in workload_differences(ref, run.description.request_shape())]
        out[s.label] = list(dict.fromkeys(base_diff + diff))
    return out


def _withhold(results: dict[tuple[str, str], MetricResult], side: str, why: str) -> None:
    for k, res in list(results.items()):
        if k[0] == side and res.decision is not None:
            results[k] = replace(res, decision=Decision(iv.UNSOUND, why))


def _by_category(sides: Sequence[Side], keyed: dict[str, list[dict[LevelKey, list[LevelRequests]]]],
                 key: LevelKey, names: Sequence[str], min_effect: float) -> dict[str, dict[tuple[str, str], MetricResult]]:
    """The level's categories that every side has, each judged on its own requests."""
    per_side: dict[str, list[LevelRequests]] = {s.label: [lv for m in keyed[s.label] for lv in m.get(key, ())]
                                                for s in sides}
    common = None
    for lvs in per_side.values():
        cats = {c for lv in lvs for c in lv.categories()}
        common = cats if common is None else common & cats
    out: dict[str, dict[tuple[str, str], MetricResult]] = {}
    base = sides[0].label
    for cat in sorted(common or ()):
        table: dict[tuple[str, str], MetricResult] = {}
        for m in (x for x in CATEGORY_METRICS if x in names):
            spec = METRICS[m]
            for s in sides:
                ests = tuple(estimate(lv.of_category(cat), m, seed=_seed(s.label, key, cat, m, i))
                             for i, lv in enumerate(per_side[s.label]))
                res = MetricResult(m, s.label, iv.combine_runs(ests, None), ests)
                if s.label != base and (base, m) in table:
                    res = _decide(res, table[(base, m)].estimate, spec.lower_is_better, spec.kind, min_effect,
                                  key.concurrency, len(ests))
                table[(s.label, m)] = res
        out[cat] = table
    return out


def _pool_shares(keyed: list[dict[LevelKey, list[LevelRequests]]], key: LevelKey) -> Estimate:
    """Error rate over repeats: the counts pooled (a share has no useful log scale for tau²)."""
    failed = total = 0
    for lv in (x for levels in keyed for x in levels.get(key, ())):
        kinds = lv.error_kind or (None,) * lv.n
        for ok, kind in zip(lv.ok, kinds, strict=False):
            if kind == "cancelled":
                continue
            total += 1
            failed += 0 if ok else 1
    return iv.share_ci(failed, total)


def _decide(res: MetricResult, base: Estimate, lower_is_better: bool, kind: str,
            min_effect: float, concurrency: int = 1, runs: int = 1) -> MetricResult:
    est = res.estimate
    if kind == "share":
        d = iv.share_difference(base, est)
        r = None
        if base.value and est.value is not None:
            r = Ratio(est.value / base.value, math.nan, math.nan, math.nan, math.inf)
        why = None if d is not None else "no requests"
        return MetricResult(res.metric, res.side, est, res.per_run, r, d,
                            iv.decide_difference(d, min_effect=min_effect, lower_is_better=lower_is_better,
                                                 why_not=why))
    r = iv.ratio(base, est)
    why = None
    if r is None:
        why = est.note if not est.estimable and est.note else base.note if base.note else "not enough data"
        if est.value is None or base.value is None:
            why = (est.note if est.value is None else base.note) or "missing"
    n = min(base.n, est.n)
    dec = iv.decide(r, lower_is_better=lower_is_better, min_effect=min_effect, n=n, why_not=why)
    if kind == "server":  # the server's samples (acceptance, GPU power) are not requests: no request count
        dec = Decision(dec.verdict, dec.reason, None)
    elif dec.requests_needed is not None:
        # steady-state requests, per side: per run of the level, plus its fill and drain
        per_run = math.ceil(dec.requests_needed / max(runs, 1)) + (0 if concurrency == 1 else 2 * concurrency - 1)
        dec = Decision(dec.verdict, dec.reason, per_run)
    point = r
    if r is None and base.value and est.value is not None:
        # the point ratio is still worth showing next to "insufficient"
        point = Ratio(est.value / base.value, math.nan, math.nan, math.nan, math.inf)
    return MetricResult(res.metric, res.side, est, res.per_run, point, None, dec)


# ------------------------------------------------------------------------------------------ flags


def _shape_flags(baseline: Side, others: Sequence[Side]) -> list[Flag]:
    """Runs whose request shapes differ from the baseline's first run: their figures measure
    different work."""
    ref = baseline.runs[0].description.request_shape()
    out = []
    for s in (baseline, *others):
        for run in s.runs:
            shape = run.description.request_shape()
            diff = [f"{k} {ref[k]!r} vs {shape[k]!r}" for k in ref if ref[k] is not None and shape[k] is not None
                    and ref[k] != shape[k]]
            if diff and run is not baseline.runs[0]:
                out.append(Flag(s.label, "shape", f"{run.label}: " + ", ".join(diff)))
    return out


def _level_flags(sides: Sequence[Side], keyed: dict[str, list[dict[LevelKey, list[LevelRequests]]]],
                 key: LevelKey) -> list[Flag]:
    out: list[Flag] = []
    means: dict[str, tuple[float | None, float | None]] = {}
    for s in sides:
        for i, (run, levels) in enumerate(zip(s.runs, keyed[s.label], strict=True)):
            for lv in levels.get(key, ()):
                _flags_of(out, means, s, run, i, lv)
    base = means.get(sides[0].label)
    if base is not None:
        for s in sides[1:]:
            m = means.get(s.label)
            if m is None:
                continue
            forced = all(r.description.ignore_eos for side in (sides[0], s) for r in side.runs)
            for name, a, b in (("prompt", base[0], m[0]), ("output", base[1], m[1])):
                if a and b and abs(b / a - 1) > SHAPE_TOLERANCE:
                    # answers of their natural length may differ between configurations (that is the
                    # server's doing, flagged); forced lengths or prompts that differ are other work
                    kind = "shape" if name == "prompt" or forced else "output_length"
                    out.append(Flag(s.label, kind,
                                    f"{s.label}: mean {name} tokens per request {b:.0f} vs {a:.0f} "
                                    f"({sides[0].label})"))
    return out


def _flags_of(out: list[Flag], means: dict[str, tuple[float | None, float | None]], s: Side, run: Run,
              index: int, lv: LevelRequests) -> None:
    # which run of the side: its own label, or (a sweep's repeats all carry the configuration's) its number
    name = run.label if run.label != s.label else f"run {index + 1} of {s.repeats}"
    who = s.label if s.repeats == 1 and not lv.repeat else f"{s.label} ({name}" + (
        f" repeat {lv.repeat + 1})" if lv.repeat else ")")
    if lv.tokens_estimated is not None and bool(np.any(lv.tokens_estimated & lv.ok)):
        out.append(Flag(s.label, "estimated_tokens", f"{who}: token counts estimated from chunks"))
    kinds = [k for k in (lv.error_kind or ()) if k is not None and k != "cancelled"]
    if kinds:
        detail = ", ".join(f"{k} {n}" for k, n in Counter(kinds).most_common())
        out.append(Flag(s.label, "errors", f"{who}: {len(kinds)}/{lv.n} failed ({detail})"))
    clients = run.during("client", lv)
    if clients:
        sat = sum(1 for c in clients if c.get("saturated"))
        starved = sum(1 for c in clients if c.get("starved"))
        if sat:
            out.append(Flag(s.label, "client_saturated",
                            f"{who}: specload's client was saturated {sat} s of the level "
                            "(its latencies include client queueing)"))
        if starved:
            out.append(Flag(s.label, "client_starved",
                            f"{who}: another process held the CPU {starved} s of the level "
                            "(its latencies include scheduling delay)"))
    crashes = run.during("crashes", lv)
    if crashes:
        types = sorted({str(c.get("exception_type")) for c in crashes})
        out.append(Flag(s.label, "crash", f"{who}: server crash during the level ({', '.join(types)})"))
    if s.label not in means:
        means[s.label] = (_mean_ok(lv, lv.prompt_tokens), _mean_ok(lv, lv.output_tokens))


def _mean_ok(lv: LevelRequests, col: np.ndarray | None) -> float | None:
    if col is None:
        return None
    v = col[lv.ok]
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else None


# ------------------------------------------------------------------------------------------ crossovers


def _direction(res: MetricResult | None) -> tuple[str, float] | None:
    if res is None or res.ratio is None or not res.ratio.ratio > 0:
        return None
    lower = METRICS[res.metric].lower_is_better
    log_r = math.log(res.ratio.ratio)
    good = (log_r > 0) != lower
    return ("better" if good else "worse"), log_r


def _crossovers(levels: Sequence[LevelComparison], others: Sequence[Side], metrics: Sequence[str]) -> list[Crossover]:
    """Where a side goes from better to worse than the baseline (or back) as concurrency grows: between
    consecutive levels (first occurrence of each concurrency) whose point ratios are on opposite sides
    of 1, at the concurrency where log ratio crosses 0 on a log-concurrency axis."""
    out = []
    firsts = [lc for lc in levels if lc.key.occurrence == 0]
    for s in others:
        for m in metrics:
            pts = []
            for lc in firsts:
                res = lc.result(s.label, m)
                d = _direction(res)
                if d is not None and res is not None and res.decision is not None:
                    pts.append((lc.key.concurrency, d[0], d[1], res.decision.verdict))
            for (c1, d1, l1, v1), (c2, d2, l2, v2) in zip(pts, pts[1:], strict=False):
                if d1 == d2 or l1 == l2:
                    continue
                f = l1 / (l1 - l2)
                at = math.exp(math.log(c1) + f * (math.log(c2) - math.log(c1)))
                decided = v1 in (iv.BETTER, iv.WORSE) and v2 in (iv.BETTER, iv.WORSE)
                out.append(Crossover(m, s.label, c1, c2, at, d1, d2, decided))
    return out


# ------------------------------------------------------------------------------------------ output


def _r(v: float | None, nd: int = 6) -> float | None:
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(f"{v:.{nd}g}")


def _scale(metric: str) -> float:
    return 100.0 if METRICS[metric].kind == "share" else 1.0


def result_dict(res: MetricResult, primary: bool) -> dict:
    """The JSON of one (level, side, metric): value, ci_low, ci_high, ratio, ratio_ci_low,
    ratio_ci_high, verdict (null for the baseline), and what else explains them."""
    e = res.estimate
    d: dict = {
        "value": _r(e.value),
        "ci_low": _r(e.ci_low),
        "ci_high": _r(e.ci_high),
        "n": e.n,
        "ratio": _r(res.ratio.ratio) if res.ratio else None,
        "ratio_ci_low": _r(res.ratio.ci_low) if res.ratio else None,
        "ratio_ci_high": _r(res.ratio.ci_high) if res.ratio else None,
        "verdict": res.decision.verdict if res.decision else None,
        "primary": primary,
        "method": e.method,
    }
    if res.difference is not None:
        d.update(difference=_r(res.difference.difference), difference_ci_low=_r(res.difference.ci_low),
                 difference_ci_high=_r(res.difference.ci_high))
    if res.decision is not None:
        d["reason"] = res.decision.reason
        d["requests_needed"] = res.decision.requests_needed
    if e.note:
        d["note"] = e.note
    if len(res.per_run) > 1:
        d["runs"] = [_r(x.value) for x in res.per_run]
    return d


def to_json(c: Comparison) -> dict:
    def run_dict(side: Side, run: Run) -> dict:
        desc = run.description
        return {
            "label": run.label,
            "side": side.label,
            "source": run.source,
            "kind": run.kind,
            "tool": desc.tool,
            "version": desc.version,
            "target": desc.target,
            "model": desc.model,
            "api": desc.api,
            "request_shape": desc.request_shape(),
            "command": desc.command,
            "started_at": desc.started_at,
            "truncated": run.truncated,
            "end": (run.end or {}).get("reason"),
        }

    levels = []
    for lc in c.levels:
        sides = {}
        for s in c.sides:
            if s.label not in lc.present:
                continue
            sides[s.label] = {
                "baseline": s is c.baseline,
                "metrics": {m: result_dict(res, m == c.primary) for m in c.metrics
                            if (res := lc.result(s.label, m)) is not None},
            }
        headline = {s.label: (r.decision.verdict if (r := lc.result(s.label, c.primary)) and r.decision else None)
                    for s in c.others if s.label in lc.present}
        level = {
            "key": str(lc.key),
            "concurrency": lc.key.concurrency,
            "occurrence": lc.key.occurrence,
            "headline": headline,
            "flags": [{"side": f.side, "kind": f.kind, "detail": f.detail} for f in lc.flags],
            "sides": sides,
        }
        if lc.categories:
            level["categories"] = {
                cat: {s.label: {m: result_dict(res, False) for m in CATEGORY_METRICS
                                if (res := table.get((s.label, m))) is not None} for s in c.sides}
                for cat, table in lc.categories.items()}
        levels.append(level)
    return {
        "baseline": c.baseline.label,
        "primary": c.primary,
        "min_effect": c.min_effect,
        "confidence": 1 - iv.ALPHA,
        "run_to_run": {
            "accounted": c.run_to_run_accounted,
            "between_run_sd_pct": {m: _r(100 * math.sqrt(b.tau2), 3) for m, b in c.between.items() if b},
        },
        "sides": [{"label": s.label, "runs": [run_dict(s, r) for r in s.runs]} for s in c.sides],
        "levels": levels,
        "crossovers": [
            {"metric": x.metric, "side": x.side, "between": [x.low, x.high], "at": _r(x.at, 3),
             "below": x.below, "above": x.above, "decided": x.decided}
            for x in c.crossovers
        ],
        "shape_flags": [{"side": f.side, "kind": f.kind, "detail": f.detail} for f in c.shape_flags],
        "notes": list(c.notes),
        "workload_warnings": {k: list(v) for k, v in c.workload_warnings.items()},
    }


CSV_COLUMNS = (
    "level", "concurrency", "side", "baseline", "metric", "primary", "value", "ci_low", "ci_high", "n",
    "ratio", "ratio_ci_low", "ratio_ci_high", "verdict", "requests_needed", "flags",
)


def to_csv_rows(c: Comparison) -> list[dict]:
    rows = []
    for lc in c.levels:
        for s in c.sides:
            flags = "; ".join(f"{f.kind}: {f.detail}" for f in lc.flags if f.side == s.label)
            for m in c.metrics:
                res = lc.result(s.label, m)
                if res is None:
                    continue
                d = result_dict(res, m == c.primary)
                rows.append({
                    "level": str(lc.key), "concurrency": lc.key.concurrency, "side": s.label,
                    "baseline": s is c.baseline, "metric": m, "primary": m == c.primary,
                    **{k: d.get(k) for k in CSV_COLUMNS if k in d and k not in ("primary",)},
                    "flags": flags,
                })
    return rows


# ------------------------------------------------------------------------------------------ rich

VERDICT_STYLE = {iv.BETTER: "bold green", iv.WORSE: "bold red", iv.NO_DIFFERENCE: "dim",
                 iv.INSUFFICIENT: "yellow", iv.UNSOUND: "bold yellow"}
VERDICT_TEXT = {iv.BETTER: "better", iv.WORSE: "worse", iv.NO_DIFFERENCE: "no difference",
                iv.INSUFFICIENT: "insufficient", iv.UNSOUND: "unsound"}
# without colour the verdict still reads: a symbol per verdict (never red/green alone)
VERDICT_MARK = {iv.BETTER: "▲", iv.WORSE: "▼", iv.NO_DIFFERENCE: "=", iv.INSUFFICIENT: "?", iv.UNSOUND: "⚠"}


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    spec = METRICS[metric]
    v = v * _scale(metric)
    if spec.unit == "tok/s" and abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{spec.digits}f}"


def fmt_estimate(metric: str, e: Estimate) -> str:
    if e.value is None:
        return "missing"
    lo = fmt_value(metric, e.ci_low) if e.ci_low is not None else "?"
    hi = fmt_value(metric, e.ci_high) if e.ci_high is not None else "?"
    return f"{fmt_value(metric, e.value)} [{lo}, {hi}]"


def fmt_ratio(res: MetricResult) -> str:
    if res.difference is not None:
        d = res.difference
        return f"{d.difference * 100:+.1f} pts [{d.ci_low * 100:+.1f}, {d.ci_high * 100:+.1f}]"
    r = res.ratio
    if r is None:
        return "-"
    if not math.isfinite(r.ci_low):
        return f"×{r.ratio:.3f}"
    return f"×{r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]"


def fmt_verdict(dec: Decision | None, rich_markup: bool = True) -> str:
    if dec is None:
        return ""
    text = f"{VERDICT_MARK[dec.verdict]} {VERDICT_TEXT[dec.verdict]}"
    if dec.verdict == iv.INSUFFICIENT and dec.requests_needed:
        text += f" (≈{dec.requests_needed} req)"
    return f"[{VERDICT_STYLE[dec.verdict]}]{text}[/]" if rich_markup else text


EXPLAIN_THROUGHPUT = (
    "output tok/s is the server's capacity at this concurrency: tokens per second of all requests "
    "together (steady state, by Little's law). per-request tok/s is what one user sees: the mean of "
    "each request's tokens / its E2E. They can disagree: a configuration can serve each request faster "
    "yet finish fewer tokens per second in all (a longer prefill or queue before the first token, tail "
    "requests), and a level's wall-clock figure also counts how its first and last requests overlap "
    "other levels. Capacity questions: output tok/s; latency questions: per-request tok/s and TPOT."
)


def side_text(c: Comparison, s: Side) -> str:
    """What a side is, after its label: its file, or how many files and whether they repeat a level."""
    if s.repeats == 1:
        return os.path.basename(s.runs[0].source)
    if any(len(r.per_run) > 1 for lc in c.levels if (r := lc.result(s.label, c.primary)) is not None):
        return f"{s.repeats} runs"
    return f"{s.repeats} files, no level repeated"


def shared_levels(c: Comparison) -> tuple[list[LevelComparison], list[str]]:
    """The levels the baseline shares with another side, and a line for each side's levels that no
    other side has (nothing to compare them with)."""
    shared = [lc for lc in c.levels if c.baseline.label in lc.present and len(lc.present) > 1]
    alone = []
    for s in c.sides:
        only = [str(lc.key) for lc in c.levels if lc.present == (s.label,)]
        if only:
            alone.append(f"{s.label}: {', '.join(only)}")
    return shared, alone


def render(c: Comparison, console: Console) -> None:
    """The comparison on a terminal: the headline table (primary metric, verdict per level), the
    secondary metrics per compared side, flags, crossovers and notes; every table fitted to the
    console's width (``formatting.fit_columns``)."""
    from rich.markup import escape

    from specload.formatting import fitted_table

    p = METRICS[c.primary]
    out = console  # rich.console.Console
    bl = c.baseline
    width = out.width
    out.print(f"[bold]specload compare[/]  baseline [bold]{escape(bl.label)}[/] ({escape(side_text(c, bl))})  vs  "
              + ", ".join(f"[bold]{escape(s.label)}[/] ({escape(side_text(c, s))})" for s in c.others),
              highlight=False)
    shared, alone = shared_levels(c)
    if not shared:
        ran = "; ".join(f"{s.label} ran {', '.join(str(lc.key) for lc in c.levels if s.label in lc.present)}"
                        for s in c.sides)
        out.print(f"[yellow]nothing to compare: the files share no concurrency level ({escape(ran)})[/]",
                  highlight=False)
        return
    out.print(f"headline: {p.label} · verdicts count a difference only beyond ±{c.min_effect * 100:g}% "
              "(--min-effect) · 95% intervals · steady-state requests (fill and drain excluded)")
    for n in c.notes:
        out.print(f"[yellow]{escape(n)}[/]", highlight=False)
    for label, ws in c.workload_warnings.items():
        for w in ws:
            out.print(f"[yellow]⚠ workload of {escape(label)}: {escape(w)}[/]", highlight=False)
    if alone:
        out.print(f"[yellow]levels on one side only, not compared: {escape('; '.join(alone))}[/]", highlight=False)
    if c.run_to_run_accounted:
        sds = ", ".join(f"{METRICS[m].label} {100 * math.sqrt(b.tau2):.1f}%" for m, b in c.between.items()
                        if b and m in (c.primary, "per_request_tok_s", "tpot_p50"))
        out.print(f"run-to-run variation estimated from the repeats (between-run sd: {sds or 'none beyond within-run'})")

    verdict = f"verdict (±{c.min_effect * 100:g}%)"
    ratio = "ratio" if len(c.others) == 1 else None
    headers = ["level", bl.label]
    for s in c.others:
        headers += [s.label, ratio or f"ratio {s.label}", verdict]
    rows = []
    for lc in shared:
        base = lc.result(bl.label, c.primary)
        row = [escape(str(lc.key) + (" ⚠" if lc.flags else "")),
               escape(fmt_estimate(c.primary, base.estimate)) if base else "-"]
        for s in c.others:
            res = lc.result(s.label, c.primary)
            if res is None:
                row += ["-", "-", ""]
                continue
            row += [escape(fmt_estimate(c.primary, res.estimate)), escape(fmt_ratio(res)), fmt_verdict(res.decision)]
        rows.append(row)
    out.print(fitted_table(headers, rows, width, title=f"{p.label} ({p.unit})", left=(verdict,), markup=True,
                           importance=(verdict, bl.label, *(s.label for s in c.others), "ratio")))

    secondary = [m for m in c.metrics if m != c.primary]
    for s in c.others:
        keys = [lc for lc in shared if s.label in lc.present]
        srows = []
        for m in secondary:
            if m in ("tok_per_j", "gpu_power_w") and not any(
                    (r := lc.result(x.label, m)) is not None and r.estimate.value is not None
                    for lc in keys for x in (s, bl)):
                continue  # no GPU samples on either side (no --gpu-metrics): not a row of "missing"
            cells = []
            for lc in keys:
                res = lc.result(s.label, m)
                base = lc.result(bl.label, m)
                if res is None or res.decision is None:
                    cells.append("-")
                    continue
                if res.estimate.value is None or base is None or base.estimate.value is None:
                    who = s.label if res.estimate.value is None else bl.label
                    cells.append(f"[dim]missing ({escape(who)})[/]")
                    continue
                cells.append(f"{escape(fmt_ratio(res).split(' [')[0])} {fmt_verdict(res.decision)}")
            srows.append([escape(METRICS[m].label), *cells])
        sheaders = ["metric", *(str(lc.key) for lc in keys)]
        out.print(fitted_table(sheaders, srows, width, title=f"secondary: {s.label} / {bl.label} (not the headline)",
                               left=tuple(sheaders), markup=True))

    render_categories(c, out)
    notes = unsound_notes(c, shared)
    if notes:
        out.print("[yellow bold]unsound comparisons[/]")
        for n in notes:
            out.print(f"  [yellow]⚠ {escape(n)}[/]", highlight=False)
    insufficient = []
    for lc in shared:
        for s in c.others:
            res = lc.result(s.label, c.primary)
            if res is not None and res.decision is not None and res.decision.verdict == iv.INSUFFICIENT:
                why = res.estimate.note or (res.ratio and res.decision.reason) or res.decision.reason
                insufficient.append(f"{lc.key} {s.label}: {why}")
    for n in insufficient:
        out.print(f"[yellow]insufficient[/] {escape(n)}", highlight=False)
    for x in c.crossovers:
        # a crossing of point estimates that no verdict backs is noise for a secondary metric; for the
        # primary one it is shown, marked as undecided (the JSON has them all)
        if not x.decided and x.metric != c.primary:
            continue
        if x.metric not in (c.primary, "per_request_tok_s", "tpot_p50", "e2e_p50", "ttft_p50"):
            continue
        line = crossover_text(x)
        out.print(escape(line) if x.decided else f"[dim]{escape(line)} (point estimates only: not decided on "
                                                 "both sides)[/]", highlight=False)
    if _throughput_disagrees(c):
        out.print(f"[dim]{EXPLAIN_THROUGHPUT}[/]")


def render_categories(c: Comparison, out: Console) -> None:
    """Per other side, each category's per-request tok/s and acceptance (the requests' own) against the
    baseline's, level by level; fitted to the console's width."""
    for table in category_tables(c, out.width):
        out.print(table)


def unsound_notes(c: Comparison, levels: Sequence[LevelComparison] | None = None) -> list[str]:
    """Why verdicts read unsound: each level's flags (of ``levels``, default all), the request shape."""
    notes = [f"{lc.key}: {f.detail}" for lc in (c.levels if levels is None else levels) for f in lc.flags]
    return notes + [f"request shape differs: {f.detail}" for f in c.shape_flags]


def category_tables(c: Comparison, width: int) -> list:  # rich Tables
    """``render_categories``'s tables, fitted to ``width`` (the TUI shows them at the ramp's end)."""
    from rich.markup import escape

    from specload.formatting import fitted_table

    keys = [lc for lc in c.levels if lc.categories]
    tables: list = []
    for s in c.others if keys else ():
        rows = []
        for cat in sorted({cat for lc in keys for cat in lc.categories}):
            cells = []
            for lc in keys:
                table = lc.categories.get(cat, {})
                parts = []
                for m in ("per_request_tok_s", "request_accept_rate"):
                    res = table.get((s.label, m))
                    # (nothing to set against: a baseline without speculation has no acceptance)
                    if (res is not None and res.decision is not None and res.estimate.value is not None
                            and (res.ratio is not None or res.difference is not None)):
                        parts.append(f"{escape(fmt_ratio(res).split(' [')[0])} {fmt_verdict(res.decision)}")
                cells.append("  ".join(parts) or "-")
            rows.append([escape(cat), *cells])
        headers = ["category", *(str(lc.key) for lc in keys)]
        tables.append(fitted_table(headers, rows, width, title=f"by category: {s.label} / {c.baseline.label} "
                                   "(per-request tok/s; accept rate of the requests' own counts)",
                                   left=tuple(headers), markup=True))
    return tables


def crossover_text(x: Crossover) -> str:
    """One crossover as a sentence (the terminal and the HTML page say it alike)."""
    return (f"crossover: {METRICS[x.metric].label} of {x.side} is {x.below} up to C={x.low} and {x.above} "
            f"from C={x.high} (crosses near C≈{x.at:.0f})")


def _throughput_disagrees(c: Comparison) -> bool:
    for lc in c.levels:
        for s in c.others:
            a = lc.result(s.label, "throughput")
            b = lc.result(s.label, "per_request_tok_s")
            if a and b and a.decision and b.decision and {a.decision.verdict, b.decision.verdict} == {iv.BETTER,
                                                                                                      iv.WORSE}:
                return True
            if a and b and a.ratio and b.ratio and (a.ratio.ratio - 1) * (b.ratio.ratio - 1) < 0:
                return True
    return False
