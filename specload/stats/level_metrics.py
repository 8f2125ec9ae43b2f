"""The figures of one concurrency level with their intervals, from its requests as numpy columns
(``LevelRequests``: a specload record and the peer tools' files alike). ``estimate(level, metric)``
serves the comparison, ``--target-ci``, ``--baseline`` and the capacity search, so a figure means the
same everywhere. Every figure but the error rate uses the level's steady requests (fill and drain
excluded), and throughput is one figure by Little's law: the README's "How the intervals are computed".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specload.datatypes import RequestRecord
from specload.stats import intervals as iv
from specload.stats.intervals import Estimate
from specload.stats.levels import LevelSummary

BATCHES_MIN = 5
BATCHES_MAX = 30


@dataclass(frozen=True, eq=False)
class LevelRequests:
    """One level's counted requests (warm-up excluded) as columns, one entry per request.

    A column that is ``None`` is one the source lacks (a peer tool's file without start times, a record
    without ITL); ``NaN`` in a column is a value that one request lacks (a failed request's TTFT).
    Times are seconds since the run started, latencies milliseconds.
    """

    index: int
    concurrency: int
    ok: np.ndarray  # bool
    start_s: np.ndarray | None = None
    end_s: np.ndarray | None = None
    ttft_ms: np.ndarray | None = None
    tpot_ms: np.ndarray | None = None
    e2e_ms: np.ndarray | None = None
    itl_ms: np.ndarray | None = None  # per request: its median per-token ITL
    output_tokens: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    tokens_estimated: np.ndarray | None = None  # bool
    error_kind: tuple[str | None, ...] = ()
    category: tuple[str | None, ...] = ()  # each request's dataset category (empty: the source has none)
    spec_accepted: np.ndarray | None = None  # the requests' own speculative counts (NaN: not given)
    spec_drafted: np.ndarray | None = None
    manual: bool = False  # a concurrency set by hand (TUI key)
    open_loop: bool = False  # --rate: concurrency is a cap, not the load
    summary: LevelSummary | None = None  # the source's own level line, when it has one
    running: bool = False  # a level still in progress (its finished requests so far): nothing drained yet
    repeat: int = 0  # the k-th repeat of this level in its run (--repeat)
    _steady: list = field(default_factory=list, repr=False)  # cache

    @property
    def n(self) -> int:
        return int(self.ok.size)

    @property
    def n_ok(self) -> int:
        return int(self.ok.sum())

    def steady(self) -> SteadyState:
        if not self._steady:
            self._steady.append(steady_state(self))
        return self._steady[0]

    def categories(self) -> tuple[str, ...]:
        return tuple(sorted({c for c in self.category if c is not None}))

    def of_category(self, name: str) -> LevelRequests:
        """The level's requests of one category, with the steady state of the whole level: which requests
        ran at full load is a property of the level, not of the category."""
        keep = np.array([c == name for c in self.category], dtype=bool)
        st = self.steady()

        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[keep]

        sub = replace(self, ok=self.ok[keep], start_s=cut(self.start_s), end_s=cut(self.end_s),
                      ttft_ms=cut(self.ttft_ms), tpot_ms=cut(self.tpot_ms), e2e_ms=cut(self.e2e_ms),
                      itl_ms=cut(self.itl_ms), output_tokens=cut(self.output_tokens),
                      prompt_tokens=cut(self.prompt_tokens), tokens_estimated=cut(self.tokens_estimated),
                      error_kind=tuple(k for k, m in zip(self.error_kind, keep, strict=False) if m),
                      category=(name,) * int(keep.sum()), spec_accepted=cut(self.spec_accepted),
                      spec_drafted=cut(self.spec_drafted), summary=None, _steady=[])
        sub._steady.append(replace(st, mask=st.mask[keep]))
        return sub


@dataclass(frozen=True, order=True)
class LevelKey:
    concurrency: int
    occurrence: int = 0  # the k-th level at this concurrency in a run (manual levels repeat)

    def __str__(self) -> str:
        return f"C={self.concurrency}" + (f" #{self.occurrence + 1}" if self.occurrence else "")


def level_keys(levels: Iterable[LevelRequests]) -> dict[LevelKey, list[LevelRequests]]:
    """A run's levels by key, as ``report`` and the live judge match levels across runs; a level
    repeated in a row (``--repeat``) is one key with several entries, which the comparison treats as
    repeated runs of that level."""
    out: dict[LevelKey, list[LevelRequests]] = {}
    seen: dict[int, int] = {}
    last: dict[int, LevelKey] = {}
    for lv in levels:
        if lv.n == 0:
            continue
        if lv.repeat and lv.concurrency in last:
            out[last[lv.concurrency]].append(lv)
            continue
        k = seen.get(lv.concurrency, 0)
        seen[lv.concurrency] = k + 1
        key = LevelKey(lv.concurrency, k)
        last[lv.concurrency] = key
        out[key] = [lv]
    return out


@dataclass(frozen=True)
class SteadyState:
    mask: np.ndarray  # bool per request: ran wholly at the level's full load
    span: tuple[float, float] | None  # first start to last end of the steady requests
    mean_in_flight: float | None  # the level's own requests in flight, averaged over ``span``
    note: str | None = None  # why fill and drain could not be excluded, or a caveat

    @property
    def count(self) -> int:
        return int(self.mask.sum())


def _in_flight_at(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Times of start/end events (sorted) and the in-flight count just after each."""
    t = np.concatenate([start, end])
    d = np.concatenate([np.ones_like(start), -np.ones_like(end)])
    # at equal times an end comes before a start: a slot freed and refilled is not C + 1 in flight
    order = np.lexsort((d, t))
    return t[order], np.cumsum(d[order])


def steady_state(level: LevelRequests) -> SteadyState:
    if level.start_s is None or level.end_s is None or level.n == 0:
        return SteadyState(level.ok.copy(), None, None,
                           "no request times: fill and drain could not be excluded")
    start, end = level.start_s, level.end_s
    valid = np.isfinite(start) & np.isfinite(end)
    if not valid.any():
        return SteadyState(np.zeros(level.n, bool), None, None, "no request times")
    s, e = start[valid], end[valid]
    if level.open_loop:
        t_fill = float(e.min())
    elif level.running:
        # only finished requests are known: the fill is the first cohort, C starts
        t_fill = float(np.sort(s)[min(level.concurrency, s.size) - 1])
    else:
        times, count = _in_flight_at(s, e)
        target = min(level.concurrency, int(count.max()))
        t_fill = float(times[np.argmax(count >= target)])
    # the drain begins when the first request in flight at the last start ends: from then on fewer
    # than C run (that first one still ran wholly at full load, so it counts)
    last_start = float(s.max())
    in_flight_then = e[e > last_start]
    t_drain = float(in_flight_then.min()) if in_flight_then.size else last_start
    if level.running:
        t_drain = math.inf  # still at full load
    # at C=1 nothing fills (no shared prefill): the first request counts
    first_counts = level.concurrency == 1 and not level.open_loop
    mask = valid & ((start >= t_fill) if first_counts else (start > t_fill)) & (end <= t_drain)
    if not mask.any():
        return SteadyState(mask, None, None, None)
    a, b = float(start[mask].min()), float(end[mask].max())
    mean_in_flight = None
    if level.running and not level.open_loop:
        mean_in_flight = float(level.concurrency)  # the requests still in flight are not in the arrays
    elif b > a:
        overlap = np.clip(np.minimum(e, b) - np.maximum(s, a), 0.0, None)
        mean_in_flight = float(overlap.sum() / (b - a))
    return SteadyState(mask, (a, b), mean_in_flight, None)


# ------------------------------------------------------------------------------------------ metrics


@dataclass(frozen=True)
class Metric:
    name: str
    label: str  # for tables
    unit: str
    lower_is_better: bool
    kind: str  # "level" (one figure per level), "request" (over requests), "share", "server"
    fn: Callable[..., Estimate]
    digits: int = 1  # decimals when printed
    column: str | None = None  # the LevelRequests column it needs (None: computed)


def _steady_ok(level: LevelRequests) -> tuple[np.ndarray, str | None]:
    st = level.steady()
    return st.mask & level.ok, st.note


def _insufficient_steady(level: LevelRequests, est: Estimate, n: int) -> Estimate:
    if n >= iv.MIN_SAMPLES:
        return est
    need = 2 * level.concurrency + iv.MIN_SAMPLES
    return replace(
        est,
        ci_low=None,
        ci_high=None,
        se_log=None,
        note=f"{n} steady-state requests (fill and drain excluded); at least {iv.MIN_SAMPLES} needed: "
        f"run about {need} requests at C={level.concurrency}",
    )


def _with_note(est: Estimate, note: str | None) -> Estimate:
    if note is None or est.note is not None:
        return est
    return replace(est, note=note)


def _column_pct(column: str, p: float, scale: float = 1.0) -> Callable[..., Estimate]:
    def fn(level: LevelRequests, seed: int = 0, n_boot: int = iv.N_BOOT, **_: object) -> Estimate:
        col = getattr(level, column)
        if col is None:
            return iv.missing("order-statistic", f"the source has no {column.split('_')[0].upper()}")
        sel, note = _steady_ok(level)
        vals = col[sel] * scale
        vals = vals[np.isfinite(vals)]
        est = iv.percentile_ci(vals, p, seed=seed, n_boot=n_boot)
        return _with_note(_insufficient_steady(level, est, int(vals.size)), note)

    return fn


def per_request_tok_s(level: LevelRequests, seed: int = 0, n_boot: int = iv.N_BOOT, **_: object) -> Estimate:
    if level.output_tokens is None or level.e2e_ms is None:
        return iv.missing("bootstrap", "the source has no per-request tokens and E2E")
    sel, note = _steady_ok(level)
    e2e = level.e2e_ms[sel]
    tok = level.output_tokens[sel]
    keep = np.isfinite(e2e) & np.isfinite(tok) & (e2e > 0)
    vals = tok[keep] / (e2e[keep] / 1e3)
    est = iv.mean_ci(vals, seed=seed, n_boot=n_boot)
    return _with_note(_insufficient_steady(level, est, int(vals.size)), note)


def throughput(level: LevelRequests, seed: int = 0, n_boot: int = iv.N_BOOT, **_: object) -> Estimate:
    """Output tok/s of the level at steady state (the module doc explains the estimator)."""
    summary_value = level.summary.throughput_tok_s if level.summary is not None else None
    if summary_value is not None and not math.isfinite(summary_value):
        summary_value = None  # a peer tool's summary without the figure
    if level.start_s is None or level.end_s is None or level.output_tokens is None:
        if summary_value is None:
            return iv.missing("little", "the source has no request times or level throughput")
        return Estimate(summary_value, None, None, level.n, None, math.inf, "level",
                        "the source has no request times: no interval, fill and drain included")
    st = level.steady()
    sel = st.mask
    n = int(sel.sum())
    if n < iv.MIN_SAMPLES or st.mean_in_flight is None:
        value = summary_value if summary_value is not None else _wall_throughput(level)
        est = Estimate(value, None, None, n, None, math.inf, "little")
        return _insufficient_steady(level, est, min(n, iv.MIN_SAMPLES - 1))
    tok = np.where(level.ok[sel], np.nan_to_num(level.output_tokens[sel]), 0.0)
    occ = level.end_s[sel] - level.start_s[sel]
    boot = iv.ratio_of_sums_ci(tok, occ, scale=st.mean_in_flight, seed=seed, n_boot=n_boot)
    boot = replace(boot, method="little+bootstrap")
    bm = _batch_means(level, st)
    if bm is None or bm.se_log is None or boot.se_log is None or boot.value is None or bm.se_log <= boot.se_log:
        return boot
    # the windows vary more than the requests explain: drift or shared slowdowns; their interval wins
    return iv.from_se(boot.value, bm.se_log, n, bm.df, f"little+batch-means x{bm.n}")


def _wall_throughput(level: LevelRequests) -> float | None:
    # a level that has no finished request yet (the live judge asks from its first frame on) has no span
    if level.start_s is None or level.end_s is None or level.output_tokens is None or not level.n:
        return None
    wall = float(np.nanmax(level.end_s) - np.nanmin(level.start_s))
    tok = float(np.nansum(np.where(level.ok, level.output_tokens, 0.0)))
    return tok / wall if wall > 0 else None


def _batch_means(level: LevelRequests, st: SteadyState) -> Estimate | None:
    """Throughput per time window over the steady span, each window at least one mean request long."""
    if st.span is None or level.ttft_ms is None or level.e2e_ms is None or level.output_tokens is None:
        return None
    a, b = st.span
    assert level.start_s is not None and level.end_s is not None
    occ = (level.end_s - level.start_s)[st.mask]
    mean_occ = float(np.mean(occ)) if occ.size else 0.0
    if mean_occ <= 0:
        return None
    k = min(BATCHES_MAX, int((b - a) // mean_occ))
    if k < BATCHES_MIN:
        return None
    ok = level.ok & np.isfinite(level.ttft_ms) & np.isfinite(level.e2e_ms) & np.isfinite(level.start_s)
    t1 = level.start_s[ok] + level.ttft_ms[ok] / 1e3  # first token
    t2 = level.start_s[ok] + level.e2e_ms[ok] / 1e3  # last token
    rest = np.maximum(level.output_tokens[ok] - 1.0, 0.0)
    span = np.maximum(t2 - t1, 1e-9)
    edges = np.linspace(a, b, k + 1)
    rates = np.empty(k)
    for i in range(k):
        lo, hi = edges[i], edges[i + 1]
        first = ((t1 >= lo) & (t1 < hi)).sum()
        spread = (rest * np.clip(np.minimum(t2, hi) - np.maximum(t1, lo), 0.0, None) / span).sum()
        rates[i] = (first + spread) / (hi - lo)
    return iv.samples_mean_ci(rates, method="batch-means")


def request_accept_rate(level: LevelRequests, seed: int = 0, n_boot: int = iv.N_BOOT, **_: object) -> Estimate:
    """Accepted of drafted tokens, pooled over the steady requests that carried the server's own counts."""
    if level.spec_accepted is None or level.spec_drafted is None:
        return iv.missing("bootstrap", "the source has no per-request speculative counts")
    sel, note = _steady_ok(level)
    acc, dr = level.spec_accepted[sel], level.spec_drafted[sel]
    keep = np.isfinite(acc) & np.isfinite(dr)
    if not keep.any() or not dr[keep].sum():
        return iv.missing("bootstrap", "no request carried speculative counts")
    est = replace(iv.ratio_of_sums_ci(acc[keep], dr[keep], seed=seed, n_boot=n_boot), method="pooled+bootstrap")
    return _with_note(_insufficient_steady(level, est, int(keep.sum())), note)


def error_rate(level: LevelRequests, **_: object) -> Estimate:
    # every request of the level counts here, fill and drain included: a failure is a failure whenever
    # it happens. Requests specload itself cancelled (quit, stop on crash) are not the server's errors.
    kinds = level.error_kind or (None,) * level.n
    counted = [k != "cancelled" for k in kinds]
    n = int(sum(counted))
    failed = int(sum(1 for ok, c in zip(level.ok, counted, strict=False) if c and not ok))
    return iv.share_ci(failed, n)


def _samples_during(level: LevelRequests, series: tuple[np.ndarray, np.ndarray], what: str,
                    method: str) -> Estimate:
    """The mean of a run's samples taken while the level ran at steady state (the whole level when it
    has none)."""
    t, v = series
    keep = np.isfinite(v)
    st = level.steady()
    lo_hi = st.span
    if lo_hi is None and level.start_s is not None and level.end_s is not None and level.n:
        lo_hi = (float(np.nanmin(level.start_s)), float(np.nanmax(level.end_s)))
    if lo_hi is None:
        return iv.missing("t", f"no level times to match {what} samples")
    keep &= (t >= lo_hi[0]) & (t <= lo_hi[1])
    if not keep.any():
        return iv.missing("t", f"no {what} samples during the level")
    return iv.samples_mean_ci(v[keep], method=method)


def accept_len(level: LevelRequests, server: tuple[np.ndarray, np.ndarray] | None = None,
               **_: object) -> Estimate:
    """Speculative acceptance length from the server's samples (its /metrics deltas or log lines) taken
    while the level ran at steady state (the whole level when it has none)."""
    if server is None:
        return iv.missing("t", "the source has no server samples")
    return _samples_during(level, server, "acceptance", "server samples")


def gpu_power_w(level: LevelRequests, gpu_power: tuple[np.ndarray, np.ndarray] | None = None,
                **_: object) -> Estimate:
    """The mean power of the server's GPUs together (``--gpu-metrics``) over the level's steady state."""
    if gpu_power is None:
        return iv.missing("t", "the source has no GPU samples (--gpu-metrics)")
    return _samples_during(level, gpu_power, "GPU power", "GPU samples")


def tok_per_j(level: LevelRequests, gpu_power: tuple[np.ndarray, np.ndarray] | None = None, seed: int = 0,
              n_boot: int = iv.N_BOOT, **_: object) -> Estimate:
    """Output tokens per joule at steady state: throughput / the GPUs' mean power over the same span,
    judged as throughput is. Its interval takes both into account (a ratio of two independent
    estimates: their log standard errors in quadrature, the smaller degrees of freedom)."""
    power = gpu_power_w(level, gpu_power)
    if power.value is None or power.value <= 0:
        return iv.missing(power.method, power.note or "no GPU power")
    th = throughput(level, seed=seed, n_boot=n_boot)
    if th.value is None:
        return th
    value = th.value / power.value
    if th.se_log is None or power.se_log is None:
        return Estimate(value, None, None, th.n, None, math.inf, "throughput/power", th.note or power.note)
    se_log = math.hypot(th.se_log, power.se_log)
    df = min(th.df, power.df)
    half = iv.t_crit(df) * se_log
    return Estimate(value, value * math.exp(-half), value * math.exp(half), th.n, se_log, df,
                    "throughput/power", th.note)


_QS = (50, 90, 95, 99)
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("throughput", "output tok/s", "tok/s", False, "level", throughput),
        Metric("per_request_tok_s", "per-request tok/s", "tok/s", False, "request", per_request_tok_s),
        # p50, p90, p95 and p99 of each latency (vLLM's --metric-percentiles 50,90,95,99)
        *(Metric(f"ttft_p{q}", f"TTFT p{q}", "ms", True, "request", _column_pct("ttft_ms", q), column="ttft_ms")
          for q in _QS),
        *(Metric(f"tpot_p{q}", f"TPOT p{q}", "ms", True, "request", _column_pct("tpot_ms", q), 2, "tpot_ms")
          for q in _QS),
        *(Metric(f"e2e_p{q}", f"E2E p{q}", "s", True, "request", _column_pct("e2e_ms", q, 1e-3), 2, "e2e_ms")
          for q in _QS),
        Metric("error_rate", "error rate", "%", True, "share", error_rate),
        Metric("accept_len", "accept len", "tok", False, "server", accept_len, 2),
        Metric("tok_per_j", "tok/J", "tok/J", False, "server", tok_per_j, 3),
        Metric("gpu_power_w", "GPU power", "W", True, "server", gpu_power_w),
        Metric("request_accept_rate", "accept rate (requests)", "", False, "request", request_accept_rate, 3,
               "spec_drafted"),
    )
}
DEFAULT_PRIMARY = "throughput"


def level_from_records(records: Sequence[RequestRecord], *, index: int, concurrency: int, t0_ns: int,
                       running: bool = False, open_loop: bool = False) -> LevelRequests:
    """A level's finished requests, as the engine hands them in, as columns (for live estimates:
    ``--target-ci``, ``--baseline``)."""
    n = len(records)
    col = lambda: np.full(n, np.nan)  # noqa: E731
    start, end, ttft, tpot, e2e, tok, prompt = col(), col(), col(), col(), col(), col(), col()
    ok = np.zeros(n, bool)
    kinds: list[str | None] = []
    acc, drafted = col(), col()
    for i, r in enumerate(records):
        if r.spec_drafted is not None and r.spec_accepted is not None:
            acc[i], drafted[i] = r.spec_accepted, r.spec_drafted
        start[i] = (r.start_ns - t0_ns) / 1e9
        end[i] = (r.end_ns - t0_ns) / 1e9
        ok[i] = r.ok
        tok[i] = r.output_tokens
        if r.prompt_tokens is not None:
            prompt[i] = r.prompt_tokens
        kinds.append(None if r.ok else (r.error_kind.value if r.error_kind else "error"))
        if r.ok:
            if r.ttft_ns is not None:
                ttft[i] = r.ttft_ns / 1e6
            if r.e2e_ns is not None:
                e2e[i] = r.e2e_ns / 1e6
            if r.tpot_ns is not None:
                tpot[i] = r.tpot_ns / 1e6
    return LevelRequests(index=index, concurrency=concurrency, ok=ok, start_s=start, end_s=end, ttft_ms=ttft,
                         tpot_ms=tpot, e2e_ms=e2e, output_tokens=tok, prompt_tokens=prompt,
                         tokens_estimated=np.array([r.tokens_estimated for r in records], bool),
                         error_kind=tuple(kinds), category=tuple(r.category for r in records),
                         spec_accepted=acc, spec_drafted=drafted, open_loop=open_loop, running=running)


def estimate(level: LevelRequests, metric: str, *, seed: int = 0,
             server: tuple[np.ndarray, np.ndarray] | None = None,
             gpu_power: tuple[np.ndarray, np.ndarray] | None = None, fast: bool = False) -> Estimate:
    """``metric`` of ``level`` with its 95% interval. ``server``: (t_s, accept_len) samples of the run,
    for ``accept_len``; ``gpu_power``: (t_s, watts of all its GPUs), for ``tok_per_j`` and
    ``gpu_power_w``. The seed makes the bootstrap (and so the report) reproducible. ``fast``: the
    large-sample formulas instead of the bootstrap (O(n), for checks while a level runs)."""
    return METRICS[metric].fn(level, seed=seed, server=server, gpu_power=gpu_power,
                              n_boot=0 if fast else iv.N_BOOT)


