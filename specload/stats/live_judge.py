"""Judging levels while they run (``--target-ci``, ``--baseline``, ``--until-decided``): what to show of
each running level against its baseline, and whether it has enough (the runner's ``extend`` hook).

It runs on the engine's loop, so it uses the large-sample formulas; the live verdict is a confidence
sequence (``intervals.sequential_ratio``), since an interval looked at after every request would call
a difference where there is none far more often than 5 %. ``--target-ci`` is about precision, so it
uses the ordinary interval. Levels pair with the baseline's as ``report`` pairs them, under the same
soundness rule (``judgement.unsound_reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from specload.datatypes import RequestRecord
from specload.stats import intervals as iv
from specload.stats.intervals import Decision, Estimate, Ratio
from specload.stats.judgement import LevelJudgement, unsound_reason, workload_differences
from specload.stats.level_metrics import (
    METRICS,
    LevelKey,
    LevelRequests,
    estimate,
    level_from_records,
    level_keys,
)


class _Timeline(Protocol):
    def server_series(self, key: str) -> tuple[np.ndarray, np.ndarray] | None: ...


class Baseline(Protocol):
    """What the judge reads of a baseline run (``record.runs.Run`` is one)."""

    @property
    def levels(self) -> Sequence[LevelRequests]: ...

    @property
    def timeline(self) -> _Timeline: ...

    @property
    def description(self) -> Any: ...  # a RunDescription: its request_shape()

    def during(self, kind: str, level: LevelRequests) -> tuple[dict, ...] | None: ...


def default_cap(concurrency: int) -> int:
    """``--max-requests-per-level`` when not given: 25 rounds of C, at least 200 requests."""
    return max(200, 25 * concurrency)


def min_requests(concurrency: int) -> int:
    """The fewest requests a judged level starts with: enough for MIN_SAMPLES steady-state requests
    (the first cohort and the drain are not counted)."""
    return 2 * concurrency + iv.MIN_SAMPLES


@dataclass(frozen=True)
class LiveView:
    """What to show for one level while it runs (and once it ended)."""

    index: int
    concurrency: int
    metric: str
    estimate: Estimate  # the level's primary figure so far
    baseline: Estimate | None  # the baseline's at the same level (None: no baseline, or it lacks the level)
    ratio: Ratio | None  # live / baseline, sequential interval
    decision: Decision | None  # the verdict so far (None without a baseline)
    done: str | None = None  # why the level has enough: "target", "decided", "cap" (None: not yet)


class LiveJudge:
    def __init__(self, *, t0_ns: int, primary: str = "throughput", baseline: Baseline | None = None,
                 min_effect: float = iv.DEFAULT_MIN_EFFECT, target_ci_pct: float | None = None,
                 until_decided: bool = False, max_requests_per_level: int | None = None,
                 workload: dict | None = None) -> None:
        if primary not in METRICS:
            raise ValueError(f"unknown metric {primary!r}")
        self.t0_ns = t0_ns
        self.primary = primary
        self.lower_is_better = METRICS[primary].lower_is_better
        self.min_effect = min_effect
        self.target_ci_pct = target_ci_pct
        self.until_decided = until_decided and baseline is not None
        self.cap = max_requests_per_level
        self._records: dict[int, list[RequestRecord]] = {}
        self._conc: dict[int, int] = {}
        self._keys: dict[int, LevelKey] = {}
        self._seen: dict[int, int] = {}
        self._done: dict[int, str] = {}
        self._finished: set[int] = set()
        self._base: dict[LevelKey, Estimate] = {}
        # the soundness rule's inputs: how the workloads differ, the client's flags per level of each side
        self.differences: list[str] = []
        self._flags: dict[int, set[str]] = {}
        self._base_flags: dict[LevelKey, set[str]] = {}
        if baseline is not None:
            if workload is not None:
                self.differences = workload_differences(baseline.description.request_shape(), workload)
            accept = baseline.timeline.server_series("accept_len")
            for key, lvs in level_keys(baseline.levels).items():
                ests = [estimate(lv, primary, server=accept) for lv in lvs]
                self._base[key] = iv.combine_runs(ests, iv.between_run_variance([ests]) if len(ests) > 1 else None)
                self._base_flags[key] = {f"{kind}: the baseline" for lv in lvs for c in (baseline.during("client", lv) or ())
                                         for kind in ("client_saturated", "client_starved") if c.get(kind.split("_")[1])}

    @property
    def judging(self) -> bool:
        """Whether levels are extended until they have enough (the runner needs the hook)."""
        return self.target_ci_pct is not None or self.until_decided

    def level_cap(self, concurrency: int) -> int:
        return self.cap if self.cap is not None else default_cap(concurrency)

    def level_started(self, index: int, concurrency: int, *, repeat: int = 0) -> None:
        self._records[index] = []
        self._conc[index] = concurrency
        if repeat and concurrency in self._seen:
            self._keys[index] = LevelKey(concurrency, self._seen[concurrency] - 1)
        else:
            k = self._seen.get(concurrency, 0)
            self._seen[concurrency] = k + 1
            self._keys[index] = LevelKey(concurrency, k)

    def add(self, rec: RequestRecord) -> None:
        recs = self._records.get(rec.level_index)
        if recs is not None and not rec.warmup:
            recs.append(rec)

    def level(self, index: int) -> LevelRequests | None:
        recs = self._records.get(index)
        if recs is None:
            return None
        return level_from_records(recs, index=index, concurrency=self._conc[index], t0_ns=self.t0_ns,
                                  running=index not in self._finished)

    def client_flag(self, index: int, kind: str) -> None:
        """This run's client was ``client_saturated`` or ``client_starved`` in a second of level ``index``."""
        self._flags.setdefault(index, set()).add(kind)

    def unsound(self, index: int) -> str | None:
        """Why level ``index`` cannot be judged against the baseline (None: it can)."""
        key = self._keys.get(index)
        flags = sorted(self._flags.get(index, set()) | (self._base_flags.get(key, set()) if key else set()))
        return unsound_reason(self.differences, flags)

    def level_finished(self, index: int) -> None:
        """The level's last request is in: its figures now exclude the drain, as ``report``'s do."""
        self._finished.add(index)

    def baseline_for(self, index: int) -> Estimate | None:
        key = self._keys.get(index)
        return self._base.get(key) if key is not None else None

    def view(self, index: int) -> LiveView | None:
        lv = self.level(index)
        if lv is None:
            return None
        est = estimate(lv, self.primary, fast=True)
        base = self.baseline_for(index)
        r = dec = None
        if base is not None:
            n_design = self.level_cap(lv.concurrency)
            r = iv.sequential_ratio(base, est, n_design=n_design)
            dec = iv.decided(r, lower_is_better=self.lower_is_better, min_effect=self.min_effect)
            why = self.unsound(index)
            if why is not None:
                dec = Decision(iv.UNSOUND, why)
            if r is None and base.value and est.value:
                r = Ratio(est.value / base.value, float("nan"), float("nan"), float("nan"), float("inf"))
        return LiveView(index, lv.concurrency, self.primary, est, base, r, dec, self._done.get(index))

    def judgement(self, index: int) -> LevelJudgement | None:
        """The level's judgement as plain data, for its summary (headless line, table, record)."""
        v = self.view(index)
        if v is None:
            return None
        e, r = v.estimate, v.ratio
        finite = r is not None and r.ci_low == r.ci_low  # NaN: a point ratio without an interval
        return LevelJudgement(
            metric=self.primary, value=e.value, ci_low=e.ci_low, ci_high=e.ci_high,
            half_width_pct=e.half_width_pct if e.estimable else None,
            baseline=v.baseline.value if v.baseline is not None else None,
            ratio=r.ratio if r is not None else None,
            ratio_ci_low=r.ci_low if finite and r is not None else None,
            ratio_ci_high=r.ci_high if finite and r is not None else None,
            verdict=v.decision.verdict if v.decision is not None else None,
            done=v.done,
        )

    def extend(self, index: int, started: int) -> int:
        """The runner's hook, called when level ``index`` has started its request count: how many more
        to start. One more round of C at a time, until the target interval or a decided verdict is
        reached, or the cap."""
        c = self._conc.get(index, 1)
        cap = self.level_cap(c)
        if started >= cap:
            self._done[index] = "cap"
            return 0
        v = self.view(index)
        if v is not None:
            hw = v.estimate.half_width_pct
            if hw is not None and c > 1:
                # the finished level's figure excludes its drain (about C - 1 of these requests): aim
                # for the interval it will have then, not the one it has now
                n = v.estimate.n
                hw = hw * (n / max(1, n - c + 1)) ** 0.5
            if self.target_ci_pct is not None and v.estimate.estimable and hw is not None and hw <= self.target_ci_pct:
                self._done[index] = "target"
                return 0
            if self.until_decided and v.decision is not None and v.decision.verdict != iv.INSUFFICIENT:
                # an unsound level is not decided by more requests either
                self._done[index] = "unsound" if v.decision.verdict == iv.UNSOUND else "decided"
                return 0
        return min(c, cap - started)
