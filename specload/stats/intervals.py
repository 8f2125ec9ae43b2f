"""Confidence intervals, ratios and verdicts: the statistics behind ``report A B``, ``--baseline``,
``--target-ci`` and the capacity search. Pure numpy and the standard library.

Every figure is an ``Estimate`` carrying the standard error of its logarithm, which is what lets
ratios, repeats and relative half-widths compose; shares have Wilson intervals and are compared by
difference. Each method and the verdict rules are the README's "How the intervals are computed".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

ALPHA = 0.05  # two-sided: 95% intervals
DEFAULT_MIN_EFFECT = 0.02  # a difference below 2% is "no difference" whatever the interval says
MIN_SAMPLES = 8  # fewer requests (or windows) than this and a figure is "insufficient"
N_BOOT = 2000
POWER = 0.8  # for requests_needed
_MAX_CELLS = 4_000_000  # bootstrap index matrix cells per chunk (memory bound)
_BIG_N = 20_000  # above this many samples the bootstrap is replaced by its large-sample equivalent
_PCT_BOOT_N = 1_000  # ... for percentiles, above this many

_NORMAL = NormalDist()

BETTER, WORSE, NO_DIFFERENCE, INSUFFICIENT = "better", "worse", "no_difference", "insufficient"
# the comparison cannot support a verdict (the workloads differ, a client could not keep the load):
# judgement.py's rule decides when
UNSOUND = "unsound"
VERDICTS = (BETTER, WORSE, NO_DIFFERENCE, INSUFFICIENT, UNSOUND)


# ------------------------------------------------------------------------------------------ quantiles


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    if math.isinf(df):
        return _NORMAL.cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Student's t quantile (no scipy): bisection on the cdf; the normal quantile for df = inf."""
    if math.isinf(df) or df > 1e6:
        return _NORMAL.inv_cdf(p)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 10.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@functools.lru_cache(maxsize=4096)
def t_crit(df: float, alpha: float = ALPHA) -> float:
    """The two-sided critical value: 1.96 for df = inf, 2.26 for df = 9, 12.7 for df = 1. Cached: each
    is ~60 bisection steps of the incomplete beta function, and the same few dfs come back every tick."""
    return t_ppf(1.0 - alpha / 2.0, max(df, 1.0))


def z_crit(alpha: float = ALPHA) -> float:
    return _NORMAL.inv_cdf(1.0 - alpha / 2.0)


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), via the incomplete beta function."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return 1.0 - _betainc(k + 1.0, n - k, p)


# ------------------------------------------------------------------------------------------ estimates


@dataclass(frozen=True, slots=True)
class Estimate:
    """One figure with its 95% interval.

    ``value`` None: nothing to estimate (no samples, or the source lacks the data). ``ci_low``/``ci_high``
    None: the interval is not bounded with this many samples (a p99 of 20 requests). ``se_log`` is the
    standard error of ``log(value)`` (None when the value is not positive or not estimable), ``df`` its
    degrees of freedom. ``note`` says why a figure is insufficient, or a caveat worth showing.
    """

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    se_log: float | None
    df: float
    method: str
    note: str | None = None

    @property
    def estimable(self) -> bool:
        """Enough data for an interval and for ratios."""
        return (
            self.value is not None
            and self.ci_low is not None
            and self.ci_high is not None
            and self.se_log is not None
            and self.n >= MIN_SAMPLES
        )

    @property
    def half_width_pct(self) -> float | None:
        """The interval's half-width as a percentage of the value (for ``--target-ci``)."""
        if self.value is None or self.ci_low is None or self.ci_high is None or self.value == 0:
            return None
        return 100.0 * (self.ci_high - self.ci_low) / 2.0 / abs(self.value)


def missing(method: str, note: str, n: int = 0) -> Estimate:
    """A figure the data cannot give (the source lacks it, or no samples): shown as missing, not 0."""
    return Estimate(None, None, None, n, None, math.inf, method, note)


def _round(v: float | None, nd: int = 6) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.{nd}g}")


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    return a[np.isfinite(a)]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def bootstrap(n: int, statistic: Callable[[np.ndarray], np.ndarray], *, n_boot: int = N_BOOT,
              seed: int = 0) -> np.ndarray:
    """``n_boot`` replicates of ``statistic`` over resampled indices (``statistic`` maps a (b, n)
    index matrix to b values), computed in chunks so memory stays bounded for long levels."""
    rng = _rng(seed)
    out = np.empty(n_boot, dtype=np.float64)
    rows = max(1, min(n_boot, _MAX_CELLS // max(n, 1)))
    for i in range(0, n_boot, rows):
        b = min(rows, n_boot - i)
        out[i : i + b] = statistic(rng.integers(0, n, size=(b, n)))
    return out


def _se_log_from_replicates(reps: np.ndarray, n: int) -> float | None:
    reps = reps[np.isfinite(reps) & (reps > 0)]
    if reps.size < 10:
        return None
    # sqrt(n/(n-1)): the bootstrap's variance is the plug-in one, biased low for small n
    return float(np.std(np.log(reps), ddof=1)) * math.sqrt(n / max(n - 1, 1))


def from_se(value: float, se_log: float | None, n: int, df: float, method: str,
            note: str | None = None) -> Estimate:
    """The estimate ``value`` with its interval from the standard error of its log (none without one)."""
    if se_log is None or value <= 0:
        return Estimate(value, None, None, n, None, df, method, note)
    t = t_crit(df)
    return Estimate(value, value * math.exp(-t * se_log), value * math.exp(t * se_log), n, se_log, df, method,
                    note)


def mean_ci(values: Sequence[float] | np.ndarray, *, seed: int = 0, n_boot: int = N_BOOT) -> Estimate:
    """The mean of per-request values (per-request tok/s): bootstrap over requests."""
    a = _finite(values)
    n = int(a.size)
    if n == 0:
        return missing("bootstrap", "no samples")
    value = float(a.mean())
    if n < 2 or value <= 0:
        return Estimate(value, None, None, n, None, math.inf, "bootstrap", _few(n))
    se: float | None
    if n > _BIG_N or n_boot == 0:  # the bootstrap's large-sample limit, without a 2000 x n matrix
        se = float(a.std(ddof=1)) / math.sqrt(n) / value
    else:
        se = _se_log_from_replicates(bootstrap(n, lambda idx: a[idx].mean(axis=1), n_boot=n_boot, seed=seed), n)
    return from_se(value, se, n, n - 1, "bootstrap", _few(n))


def ratio_of_sums_ci(num: Sequence[float] | np.ndarray, den: Sequence[float] | np.ndarray, *,
                     scale: float = 1.0, seed: int = 0, n_boot: int = N_BOOT) -> Estimate:
    """``scale * sum(num) / sum(den)`` over paired per-request values (e.g. tokens / occupancy),
    bootstrapped over requests (pairs resampled together)."""
    x = np.asarray(num, dtype=np.float64)
    y = np.asarray(den, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n == 0 or y.sum() <= 0:
        return missing("bootstrap", "no samples")
    value = scale * float(x.sum() / y.sum())
    if n < 2 or value <= 0:
        return Estimate(value, None, None, n, None, math.inf, "bootstrap", _few(n))
    se: float | None
    if n > _BIG_N or n_boot == 0:  # delta method (the linearised ratio), the bootstrap's large-sample limit
        r = x.sum() / y.sum()
        se = float(np.std(x - r * y, ddof=1) * math.sqrt(n) / x.sum())
    else:
        se = _se_log_from_replicates(
            bootstrap(n, lambda idx: x[idx].sum(axis=1) / y[idx].sum(axis=1), n_boot=n_boot, seed=seed), n
        )
    return from_se(value, se, n, n - 1, "bootstrap", _few(n))


def order_statistic_ci(values: Sequence[float] | np.ndarray, q: float,
                       alpha: float = ALPHA) -> tuple[float | None, float | None]:
    """Distribution-free interval for the ``q`` quantile: [x_(l), x_(u)] with l, u from Binomial(n, q).

    A bound is None when ``n`` is too small for it (the upper bound of a p99 needs 368 samples at 95%):
    the data cannot bound that side.
    """
    a = np.sort(_finite(values))
    n = int(a.size)
    if n == 0:
        return None, None
    half = alpha / 2.0
    # lower: the largest l (1-based) with P(X <= l-1) <= alpha/2, X ~ Bin(n, q)
    lo: float | None = None
    l_idx = 0
    lo_k, hi_k = 0, n
    # binary search on l: P(Bin <= l-1) is increasing in l
    while lo_k < hi_k:
        mid = (lo_k + hi_k + 1) // 2
        if binom_cdf(mid - 1, n, q) <= half:
            lo_k = mid
        else:
            hi_k = mid - 1
    l_idx = lo_k
    if l_idx >= 1:
        lo = float(a[l_idx - 1])
    # upper: the smallest u with P(X <= u-1) >= 1 - alpha/2
    lo_k, hi_k = 1, n + 1
    while lo_k < hi_k:
        mid = (lo_k + hi_k) // 2
        if binom_cdf(mid - 1, n, q) >= 1.0 - half:
            hi_k = mid
        else:
            lo_k = mid + 1
    hi = float(a[lo_k - 1]) if lo_k <= n else None
    return lo, hi


def min_samples_for_percentile(p: float, alpha: float = ALPHA) -> int:
    """How many samples the order-statistic interval of the ``p``-th percentile needs to be bounded on
    both sides: the extreme order statistics must cover it, max(q, 1-q)^n <= alpha/2 (p99: 368;
    p90: 36; p50: 6)."""
    q = min(max(p / 100.0, 1e-9), 1 - 1e-9)
    return math.ceil(math.log(alpha / 2.0) / math.log(max(q, 1.0 - q)))


def percentile_ci(values: Sequence[float] | np.ndarray, p: float, *, seed: int = 0,
                  n_boot: int = N_BOOT) -> Estimate:
    """The ``p``-th percentile (0..100, linear interpolation as numpy's default, as the level table
    uses) of any per-request array: the order-statistic interval for the value, the bootstrap's
    standard error for ratios. Insufficient when the interval is not bounded."""
    a = _finite(values)
    n = int(a.size)
    if n == 0:
        return missing("order-statistic", "no samples")
    value = float(np.percentile(a, p))
    lo, hi = order_statistic_ci(a, p / 100.0)
    note = None
    if lo is None or hi is None:
        need = min_samples_for_percentile(p)
        note = f"{n} samples cannot bound a p{p:g} (about {need} needed)"
    if value <= 0 or n < 2:
        return Estimate(value, lo, hi, n, None, math.inf, "order-statistic", note or _few(n))
    if n > _PCT_BOOT_N or n_boot == 0:
        # many samples: the order-statistic interval's width gives the standard error (the bootstrap of
        # a percentile, a sort of a b x n matrix, took seconds per level at 5,000 requests)
        se = None
        if lo is not None and hi is not None and lo > 0:
            se = (math.log(hi) - math.log(lo)) / (2.0 * z_crit())
    else:
        se = _se_log_from_replicates(
            bootstrap(n, lambda idx: np.percentile(a[idx], p, axis=1), n_boot=n_boot, seed=seed), n
        )
    if lo is None or hi is None:
        se = None  # a percentile that cannot be bounded makes no ratio either
    return Estimate(value, lo, hi, n, se, n - 1, "order-statistic", note or _few(n))


def samples_mean_ci(values: Sequence[float] | np.ndarray, method: str = "t") -> Estimate:
    """Mean of roughly independent samples (batch means, server samples): Student's t."""
    a = _finite(values)
    n = int(a.size)
    if n == 0:
        return missing(method, "no samples")
    value = float(a.mean())
    if n < 2 or value <= 0:
        return Estimate(value, None, None, n, None, math.inf, method, _few(n))
    se_log = float(a.std(ddof=1)) / math.sqrt(n) / value
    t = t_crit(n - 1)
    half = t * se_log * value
    return Estimate(value, value - half, value + half, n, se_log, n - 1, method, _few(n))


def share_ci(k: int, n: int, alpha: float = ALPHA) -> Estimate:
    """A share k/n (error rate, requests meeting an objective): Wilson's score interval, which stays
    inside [0, 1] and is sound at 0 and 1, where the normal interval collapses."""
    if n <= 0:
        return missing("wilson", "no requests")
    z = z_crit(alpha)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    se_log = math.sqrt((1 - p) / k) if 0 < k else None  # delta method, for ratios of shares
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), n, se_log, math.inf, "wilson",
                    _few(n))


def _few(n: int) -> str | None:
    return f"only {n} samples (at least {MIN_SAMPLES} needed)" if n < MIN_SAMPLES else None


# ------------------------------------------------------------------------------------------ ratios


@dataclass(frozen=True, slots=True)
class Ratio:
    """``other / baseline`` with its 95% interval (on the log scale, back-transformed)."""

    ratio: float
    ci_low: float
    ci_high: float
    se_log: float
    df: float

    @property
    def excludes_one(self) -> bool:
        return self.ci_low > 1.0 or self.ci_high < 1.0


def welch_df(a: float, df_a: float, b: float, df_b: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of two variances."""
    if a + b <= 0:
        return math.inf
    terms = (a * a / df_a if df_a > 0 and math.isfinite(df_a) else 0.0) + (
        b * b / df_b if df_b > 0 and math.isfinite(df_b) else 0.0
    )
    return math.inf if terms == 0 else (a + b) ** 2 / terms


def ratio(baseline: Estimate, other: Estimate, alpha: float = ALPHA) -> Ratio | None:
    """``other / baseline`` for independent estimates (delta method on logs); None when either side
    cannot be estimated."""
    if not (baseline.estimable and other.estimable):
        return None
    assert baseline.value is not None and other.value is not None
    assert baseline.se_log is not None and other.se_log is not None
    if baseline.value <= 0 or other.value <= 0:
        return None
    va, vb = baseline.se_log**2, other.se_log**2
    se = math.sqrt(va + vb)
    df = welch_df(va, baseline.df, vb, other.df)
    r = other.value / baseline.value
    t = t_crit(df, alpha)
    return Ratio(r, r * math.exp(-t * se), r * math.exp(t * se), se, df)


@dataclass(frozen=True, slots=True)
class Difference:
    """``other - baseline`` for shares, with Newcombe's interval."""

    difference: float
    ci_low: float
    ci_high: float

    @property
    def excludes_zero(self) -> bool:
        return self.ci_low > 0.0 or self.ci_high < 0.0


def share_difference(baseline: Estimate, other: Estimate) -> Difference | None:
    """Newcombe's hybrid score interval (method 10) for the difference of two Wilson shares."""
    if baseline.value is None or other.value is None or baseline.ci_low is None or other.ci_low is None:
        return None
    assert baseline.ci_high is not None and other.ci_high is not None
    p1, l1, u1 = baseline.value, baseline.ci_low, baseline.ci_high
    p2, l2, u2 = other.value, other.ci_low, other.ci_high
    d = p2 - p1
    lo = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    hi = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return Difference(d, lo, hi)


# ------------------------------------------------------------------------------------------ verdicts


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: str  # better, worse, no_difference, insufficient, unsound
    reason: str
    requests_needed: int | None = None  # per side, roughly, to resolve a difference of the observed size


def _effect_threshold(min_effect: float) -> float:
    # symmetric on the log scale: +2% and -1.96% are the same size of effect
    return math.log1p(min_effect)


def requests_needed(n: int, se_log: float, log_effect: float, alpha: float = ALPHA,
                    power: float = POWER) -> int | None:
    """Samples per side for an interval that excludes 1 at ``log_effect`` with ``power``: the standard
    error shrinks as 1/sqrt(n)."""
    if n <= 0 or se_log <= 0 or log_effect <= 0:
        return None
    target = log_effect / (z_crit(alpha) + _NORMAL.inv_cdf(power))
    return max(n + 1, math.ceil(n * (se_log / target) ** 2))


def decide(r: Ratio | None, *, lower_is_better: bool, min_effect: float = DEFAULT_MIN_EFFECT,
           n: int = 0, why_not: str | None = None) -> Decision:
    """The verdict of ``other`` against the baseline from the ratio's interval (see the module doc).

    ``n``: the samples per side behind the ratio (the smaller side), for ``requests_needed``."""
    if r is None:
        return Decision(INSUFFICIENT, why_not or "not enough data for an interval")
    log_r = math.log(r.ratio)
    threshold = _effect_threshold(min_effect)
    matters = abs(log_r) >= threshold
    up = log_r > 0
    good = up != lower_is_better
    pct = f"{(r.ratio - 1) * 100:+.1f}%"
    if r.excludes_one and matters:
        return Decision(BETTER if good else WORSE, f"{pct}, interval excludes no change")
    if not matters:
        return Decision(
            NO_DIFFERENCE,
            f"{pct} is within ±{min_effect * 100:g}%" + (" (significant but too small to matter)" if r.excludes_one
                                                           else ""),
        )
    need = requests_needed(n, r.se_log, abs(log_r))
    return Decision(INSUFFICIENT, f"{pct} but the interval includes no change", need)


def decide_difference(d: Difference | None, *, min_effect: float = DEFAULT_MIN_EFFECT,
                      lower_is_better: bool = True, why_not: str | None = None) -> Decision:
    """The verdict for a difference of shares (error rate): ``min_effect`` in share points."""
    if d is None:
        return Decision(INSUFFICIENT, why_not or "not enough data")
    matters = abs(d.difference) >= min_effect - 1e-12
    good = (d.difference > 0) != lower_is_better
    pts = f"{d.difference * 100:+.1f} points"
    if d.excludes_zero and matters:
        return Decision(BETTER if good else WORSE, f"{pts}, interval excludes no change")
    if not matters:
        return Decision(NO_DIFFERENCE, f"{pts} is within ±{min_effect * 100:g} points")
    return Decision(INSUFFICIENT, f"{pts} but the interval includes no change")


class Objective:
    """How an estimate stands against a limit (an SLO): ``met`` when the whole interval is on the good
    side, ``missed`` when it is wholly on the bad side, ``undecided`` when it straddles the limit (the
    capacity search gives such a level more requests)."""

    MET, MISSED, UNDECIDED = "met", "missed", "undecided"

    @staticmethod
    def check(est: Estimate, limit: float, *, lower_is_better: bool = True) -> str:
        if est.value is None:
            return Objective.UNDECIDED
        lo, hi = est.ci_low, est.ci_high
        if lower_is_better:
            if hi is not None and hi <= limit:
                return Objective.MET
            if lo is not None and lo > limit:
                return Objective.MISSED
        else:
            if lo is not None and lo >= limit:
                return Objective.MET
            if hi is not None and hi < limit:
                return Objective.MISSED
        return Objective.UNDECIDED


# ------------------------------------------------------------------------------------------ repeats


@dataclass(frozen=True, slots=True)
class BetweenRuns:
    """The run-to-run variance of log values beyond what the within-run intervals explain (tau²),
    pooled over every group of repeats (levels, sides) of one metric; ``df`` = sum of (runs - 1)."""

    tau2: float
    df: float
    groups: int


def between_run_variance(groups: Sequence[Sequence[Estimate]]) -> BetweenRuns | None:
    """Method-of-moments estimate (as DerSimonian-Laird): per group of k >= 2 runs, the sample variance
    of the runs' log values minus their mean within-run variance; pooled with weights k - 1 and
    floored at 0. None when no group has two estimable runs."""
    num = 0.0
    df = 0.0
    used = 0
    for g in groups:
        ok = [e for e in g if e.estimable and e.value is not None and e.value > 0]
        k = len(ok)
        if k < 2:
            continue
        logs = np.log([float(e.value or 0.0) for e in ok])
        s2 = float(np.var(logs, ddof=1))
        within = float(np.mean([(e.se_log or 0.0) ** 2 for e in ok]))
        num += (k - 1) * (s2 - within)
        df += k - 1
        used += 1
    if used == 0:
        return None
    return BetweenRuns(max(0.0, num / df), df, used)


def combine_runs(estimates: Sequence[Estimate], between: BetweenRuns | None) -> Estimate:
    """Repeats of one figure (one level, one side) as one estimate: the geometric mean of the runs'
    values, with variance (tau² + mean within-run variance) / k (a random-effects model whose tau² is
    pooled across levels, so two runs per side still give it several degrees of freedom). A single run
    is returned as is when ``between`` is None, else its variance gains tau² (the other side's repeats
    showed how much a run varies)."""
    if len(estimates) == 1 and between is None:
        return estimates[0]
    ok = [e for e in estimates if e.estimable and e.value is not None and e.value > 0]
    if not ok:
        if len(estimates) == 1:
            return estimates[0]
        vals = [e.value for e in estimates if e.value is not None and e.value > 0]
        notes = [e.note for e in estimates if e.note]
        value = float(math.exp(np.mean(np.log(vals)))) if vals else None
        return Estimate(value, None, None, sum(e.n for e in estimates), None, math.inf, "runs",
                        notes[0] if notes else "no run could be estimated")
    k = len(ok)
    logs = np.log([float(e.value or 0.0) for e in ok])
    within = float(np.mean([(e.se_log or 0.0) ** 2 for e in ok]))
    df_within = float(min(e.df for e in ok)) * k
    tau2 = between.tau2 if between is not None else 0.0
    var = (tau2 + within) / k
    df = welch_df(within / k, df_within, tau2 / k, between.df if between is not None else math.inf)
    value = float(math.exp(logs.mean()))
    est = from_se(value, math.sqrt(var), sum(e.n for e in ok), df, f"runs x{k}")
    note = None if k == len(estimates) else f"{len(estimates) - k} of {len(estimates)} runs not estimable"
    return replace(est, note=note)


# ------------------------------------------------------------------------------------------ sequential

_CS_TUNE = 10.0  # the mixture is tightest where n = 10 x its prior size: see sequential_multiplier


def sequential_multiplier(n: int, n_design: int, alpha: float = ALPHA) -> float:
    """How many standard errors a *confidence sequence* needs at ``n`` samples, where a fixed-sample
    interval needs 1.96: valid at every n at once, so a live verdict looked at after every request keeps
    its error rate (a fixed interval watched continuously excludes the truth at some point far more
    often than 5%).

    The two-sided normal-mixture boundary (Robbins 1970; Howard, Ramdas et al. 2021): for a mean with
    standard error se = sigma/sqrt(n), |mean - mu| < se * sqrt((1 + m/n) * (log(1 + n/m) + 2 log(2/alpha)))
    for all n with probability 1 - alpha. m, the mixture's prior size, is set to n_design / 10, which
    makes the boundary tightest near ``n_design`` (the level's planned or capped request count): there
    it is about 3.3 standard errors."""
    m = max(1.0, n_design / _CS_TUNE)
    n = max(n, 1)
    return math.sqrt((1.0 + m / n) * (math.log1p(n / m) + 2.0 * math.log(2.0 / alpha)))


def sequential_ratio(baseline: Estimate, live: Estimate, *, n_design: int, alpha: float = ALPHA) -> Ratio | None:
    """``live / baseline`` with an interval valid however often it is looked at: the live figure's
    confidence sequence at alpha/2 and the baseline's fixed interval at alpha/2 (the baseline is a
    finished record; a union bound joins the two)."""
    if not (baseline.estimable and live.estimable):
        return None
    assert baseline.value is not None and live.value is not None
    assert baseline.se_log is not None and live.se_log is not None
    # small samples: widen the live boundary as Student's t widens the normal one
    small = t_crit(live.df, alpha / 2) / z_crit(alpha / 2)
    live_hw = live.se_log * sequential_multiplier(live.n, n_design, alpha / 2) * small
    base_hw = baseline.se_log * t_crit(baseline.df, alpha / 2)
    r = live.value / baseline.value
    hw = live_hw + base_hw
    # se_log of this interval's half-width, so decide() can estimate requests_needed from it
    return Ratio(r, r * math.exp(-hw), r * math.exp(hw), hw / z_crit(alpha), math.inf)


def decided(r: Ratio | None, *, lower_is_better: bool, min_effect: float = DEFAULT_MIN_EFFECT) -> Decision:
    """The live verdict from a sequential ratio: ``better``/``worse`` as ``decide``; ``no_difference`` only
    once the whole interval is within ±min_effect (a level can stop then: no difference that matters
    is left to find); otherwise ``insufficient`` (not decided yet)."""
    if r is None:
        return Decision(INSUFFICIENT, "not enough data yet")
    d = decide(r, lower_is_better=lower_is_better, min_effect=min_effect)
    if d.verdict in (BETTER, WORSE):
        return d
    band = _effect_threshold(min_effect)
    if math.log(r.ci_low) > -band and math.log(r.ci_high) < band:
        return Decision(NO_DIFFERENCE, f"interval within ±{min_effect * 100:g}%")
    return Decision(INSUFFICIENT, f"{(r.ratio - 1) * 100:+.1f}%, not decided yet")
