"""The interval machinery: quantiles of t, coverage of each interval on data with a known truth,
ratios, verdicts, repeats. Seeded numpy draws, so every test is deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specload.stats import intervals as iv
from specload.stats.intervals import Estimate, Objective


def test_t_quantiles_match_the_tables() -> None:
    # two-sided 95% critical values from any t table
    assert iv.t_crit(1) == pytest.approx(12.706, abs=1e-3)
    assert iv.t_crit(9) == pytest.approx(2.262, abs=1e-3)
    assert iv.t_crit(30) == pytest.approx(2.042, abs=1e-3)
    assert iv.t_crit(math.inf) == pytest.approx(1.960, abs=1e-3)
    assert iv.t_cdf(0.0, 5) == pytest.approx(0.5)
    assert iv.binom_cdf(5, 10, 0.5) == pytest.approx(0.623046875)  # 638/1024


def test_order_statistic_interval_covers_the_true_median() -> None:
    rng = np.random.default_rng(1)
    true_median = 1.0  # lognormal(0, s): median exp(0)
    hits = 0
    trials = 300
    for _ in range(trials):
        lo, hi = iv.order_statistic_ci(rng.lognormal(0.0, 0.5, 40), 0.5)
        assert lo is not None and hi is not None
        hits += lo <= true_median <= hi
    # exact method: coverage is at least 95%; 300 trials leave about +-2.5% of noise
    assert hits / trials >= 0.92


def test_a_p99_of_too_few_requests_is_not_bounded() -> None:
    assert iv.min_samples_for_percentile(99) == 368  # 0.99^368 < 0.025 <= 0.99^367
    assert iv.min_samples_for_percentile(50) == 6
    rng = np.random.default_rng(2)
    few = iv.percentile_ci(rng.normal(100, 10, 100), 99)
    assert few.value is not None and few.ci_high is None and not few.estimable
    assert "368" in (few.note or "")
    many = iv.percentile_ci(rng.normal(100, 10, 1000), 99)
    assert many.estimable and many.ci_low < many.value < many.ci_high  # type: ignore[operator]
    assert 100 + 2.0 * 10 < many.value < 100 + 2.7 * 10  # type: ignore[operator]  # z(0.99) = 2.33


def test_bootstrap_mean_interval_covers_about_95_percent() -> None:
    rng = np.random.default_rng(3)
    hits = 0
    trials = 200
    for i in range(trials):
        e = iv.mean_ci(rng.gamma(4.0, 25.0, 30), seed=i, n_boot=400)  # mean 100
        hits += e.ci_low <= 100.0 <= e.ci_high  # type: ignore[operator]
    assert 0.88 <= hits / trials <= 0.99


def test_ratio_of_sums_is_the_ratio_and_its_interval_shrinks_with_n() -> None:
    rng = np.random.default_rng(4)
    tok = np.full(400, 100.0)
    dur = rng.gamma(20.0, 0.05, 400)  # mean 1 s
    small = iv.ratio_of_sums_ci(tok[:40], dur[:40], scale=4.0, seed=1)
    big = iv.ratio_of_sums_ci(tok, dur, scale=4.0, seed=1)
    assert big.value == pytest.approx(4.0 * tok.sum() / dur.sum())
    assert big.half_width_pct < small.half_width_pct / 2.5  # type: ignore[operator]  # ~1/sqrt(10)


def test_wilson_share_interval() -> None:
    zero = iv.share_ci(0, 50)
    assert zero.value == 0.0 and zero.ci_low == 0.0
    assert zero.ci_high == pytest.approx(3.8415 / (50 + 3.8415), rel=1e-3)  # z²/(n+z²) at k = 0
    some = iv.share_ci(5, 100)
    assert some.ci_low < 0.05 < some.ci_high  # type: ignore[operator]
    assert iv.share_ci(0, 0).value is None  # no requests: missing, not 0


def est(value: float, se_log: float, n: int = 100) -> Estimate:
    return iv.from_se(value, se_log, n, n - 1, "test")


def test_verdicts_follow_interval_and_threshold() -> None:
    base = est(100.0, 0.01)
    # clearly faster: better for a throughput, worse for a latency
    r = iv.ratio(base, est(120.0, 0.01))
    assert r is not None and r.ci_low > 1.0
    assert iv.decide(r, lower_is_better=False).verdict == iv.BETTER
    assert iv.decide(r, lower_is_better=True).verdict == iv.WORSE
    # significant but below the 2% threshold: no difference
    r = iv.ratio(est(100.0, 0.001), est(101.0, 0.001))
    assert r is not None and r.excludes_one
    d = iv.decide(r, lower_is_better=False, min_effect=0.02)
    assert d.verdict == iv.NO_DIFFERENCE and "significant" in d.reason
    assert iv.decide(r, lower_is_better=False, min_effect=0.005).verdict == iv.BETTER
    # a difference that would matter, but the interval includes 1: insufficient, with how many requests
    r = iv.ratio(est(100.0, 0.05, 20), est(106.0, 0.05, 20))
    assert r is not None and not r.excludes_one
    d = iv.decide(r, lower_is_better=False, n=20)
    assert d.verdict == iv.INSUFFICIENT and d.requests_needed is not None and d.requests_needed > 20
    # the needed count shrinks as the effect grows
    r2 = iv.ratio(est(100.0, 0.05, 20), est(112.0, 0.05, 20))
    assert iv.requests_needed(20, r2.se_log, math.log(1.12)) < d.requests_needed  # type: ignore[union-attr,operator]
    # too few samples on one side: no ratio at all
    assert iv.ratio(base, est(120.0, 0.01, 5)) is None
    assert iv.decide(None, lower_is_better=False, why_not="5 requests").verdict == iv.INSUFFICIENT


def test_identical_distributions_rarely_get_a_verdict() -> None:
    # the false-positive rate of the whole chain (bootstrap -> ratio -> decide) on iid data is at most
    # about 5%, and the min-effect threshold only lowers it
    rng = np.random.default_rng(5)
    wrong = 0
    trials = 200
    for i in range(trials):
        a = iv.mean_ci(rng.gamma(9.0, 10.0, 40), seed=2 * i, n_boot=400)
        b = iv.mean_ci(rng.gamma(9.0, 10.0, 40), seed=2 * i + 1, n_boot=400)
        wrong += iv.decide(iv.ratio(a, b), lower_is_better=False, min_effect=0.0).verdict in (iv.BETTER, iv.WORSE)
    assert wrong / trials <= 0.09


def test_share_difference_and_its_verdict() -> None:
    d = iv.share_difference(iv.share_ci(0, 200), iv.share_ci(30, 200))
    assert d is not None and d.excludes_zero and d.difference == pytest.approx(0.15)
    assert iv.decide_difference(d).verdict == iv.WORSE  # lower error rate is better
    same = iv.share_difference(iv.share_ci(1, 100), iv.share_ci(1, 100))
    assert iv.decide_difference(same).verdict == iv.NO_DIFFERENCE


def test_between_run_variance_recovers_a_known_spread() -> None:
    rng = np.random.default_rng(6)
    tau = 0.05  # 5% run-to-run
    within = 0.01
    groups = []
    for _ in range(40):  # 40 levels x 3 runs
        truth = rng.normal(0, 1)
        groups.append([est(math.exp(5 + 0.1 * truth + rng.normal(0, tau) + rng.normal(0, within)), within)
                       for _ in range(3)])
    b = iv.between_run_variance(groups)
    assert b is not None and b.df == 80
    assert math.sqrt(b.tau2) == pytest.approx(tau, rel=0.25)
    # the combined figure of 3 runs carries tau² / 3 (plus within): wider than any single run
    c = iv.combine_runs(groups[0], b)
    assert c.se_log == pytest.approx(math.sqrt((b.tau2 + within**2) / 3), rel=1e-6)
    # a single run, once tau² is known, is widened by it
    assert iv.combine_runs(groups[0][:1], b).se_log == pytest.approx(math.sqrt(b.tau2 + within**2))
    assert iv.combine_runs(groups[0][:1], None) is groups[0][0]
    assert iv.between_run_variance([[est(1.0, 0.1)]]) is None  # no repeats, no estimate


def test_objective_against_a_limit() -> None:
    assert Objective.check(est(100.0, 0.01), 120.0) == Objective.MET
    assert Objective.check(est(100.0, 0.01), 90.0) == Objective.MISSED
    assert Objective.check(est(100.0, 0.2), 110.0) == Objective.UNDECIDED
    assert Objective.check(iv.share_ci(95, 100), 0.9, lower_is_better=False) == Objective.UNDECIDED
    assert Objective.check(iv.share_ci(990, 1000), 0.95, lower_is_better=False) == Objective.MET


def test_a_confidence_sequence_keeps_its_error_rate_when_watched_after_every_sample() -> None:
    rng = np.random.default_rng(7)
    streams, steps = 400, 400
    x = rng.normal(0.0, 1.0, (streams, steps))
    n = np.arange(1, steps + 1)
    mean = np.cumsum(x, axis=1) / n
    se = 1.0 / np.sqrt(n)
    watch = n >= 5  # looked at from the 5th sample on, after every sample
    fixed_miss = np.any((np.abs(mean) > 1.96 * se) & watch, axis=1).mean()
    mult = np.array([iv.sequential_multiplier(int(k), steps) for k in n])
    seq_miss = np.any((np.abs(mean) > mult * se) & watch, axis=1).mean()
    assert fixed_miss > 0.15  # peeking at a fixed 95% interval: wrong far more often than 5%
    assert seq_miss <= 0.05
    # the price: about 3.3 standard errors near the design size instead of 1.96
    assert 3.0 < iv.sequential_multiplier(steps, steps) < 3.6


def test_live_verdicts_from_a_sequential_ratio() -> None:
    base = est(100.0, 0.01, 400)
    clearly = iv.sequential_ratio(base, est(130.0, 0.01, 200), n_design=400)
    assert clearly is not None and iv.decided(clearly, lower_is_better=False).verdict == iv.BETTER
    # the sequential interval is wider than the fixed one for the same data
    fixed = iv.ratio(base, est(130.0, 0.01, 200))
    assert (clearly.ci_high - clearly.ci_low) > (fixed.ci_high - fixed.ci_low)  # type: ignore[union-attr]
    # no difference is decided only once the whole interval, the baseline's share included, is in ±2%
    assert iv.decided(iv.sequential_ratio(base, est(100.5, 0.002, 400), n_design=400),
                      lower_is_better=False).verdict == iv.INSUFFICIENT
    same = iv.sequential_ratio(est(100.0, 0.003, 400), est(100.5, 0.002, 400), n_design=400)
    assert iv.decided(same, lower_is_better=False).verdict == iv.NO_DIFFERENCE
    unsure = iv.sequential_ratio(base, est(100.5, 0.02, 50), n_design=400)
    assert iv.decided(unsure, lower_is_better=False).verdict == iv.INSUFFICIENT
