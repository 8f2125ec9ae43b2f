"""Live statistics: what the run looks like right now, sampled by the UI as an immutable snapshot.

Producers push cheaply: ``on_tokens`` per streamed chunk (one integer add in the common case) and
``on_record`` per finished request. Consumers pull ``snapshot()`` on a timer (the UI at about 4 Hz,
headless progress at 1 Hz); everything costly (percentiles, series) happens there, never on the push
side: closing a second on the push side only appends two counts and notes the second, whose rolling
percentiles the next snapshot computes, never inside a stream's read.

Rates use per-second buckets and exclude the current second, which is always under-counted.
Rolling latency percentiles cover the requests that ended in the last ``window_s`` seconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import (
    CrashEvent,
    GpuFault,
    GpuSample,
    HealthChanged,
    RequestRecord,
    RunEvent,
    ServerSample,
)
from specload.stats.levels import LevelSummary
from specload.stats.quantiles import percentiles

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class LatencyView:
    """A rolling percentile: its recent per-second history and the current values (ms)."""

    p50_series: tuple[float, ...]
    p99_series: tuple[float, ...]
    p50: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU as the dashboard shows it: its last sample, its recent history, its last fault."""

    last: GpuSample
    power_series: tuple[float, ...]  # one value per sample, oldest first (NaN: not read)
    fault: str | None = None  # the last fault of this GPU ("lost: ..."), if any


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    t_ns: int
    elapsed_s: float
    # throughput
    tok_s_series: tuple[float, ...]  # per completed second, oldest first
    tok_s: float  # the last completed second
    tok_s_avg10: float  # mean of the last 10 completed seconds
    req_s: float  # the last completed second
    # mean of the last 10 completed seconds: requests end in bursts (a level's first C requests
    # together), so one second's count is mostly 0 or C at low concurrency
    req_s_avg10: float
    tokens_total: int  # streamed so far, moves per chunk
    requests_total: int
    requests_ok: int
    requests_failed: int
    # latency, rolling over window_s
    ttft: LatencyView
    tpot: LatencyView
    e2e: LatencyView
    # errors
    errors_by_kind: tuple[tuple[str, int], ...]
    last_errors: tuple[str, ...]
    # levels finished so far
    levels: tuple[LevelSummary, ...]
    # server side
    server: ServerSample | None
    server_gen_tok_s_series: tuple[float, ...]
    accept_len_series: tuple[float, ...]
    crashes: tuple[CrashEvent, ...]
    health: str  # "up", "down" or "unknown"
    # the client itself
    client_cpu_pct: float | None
    loop_lag_ms: float | None
    client_saturated: bool
    client_starved: bool = False  # behind because another process held the CPU, not its own work
    gpus: tuple[GpuView, ...] = ()  # the server's GPUs (--gpu-metrics), by index
    gpu_fault: str | None = None  # the last fault of no one GPU (the reader died, no driver, ...)


class _Ring:
    """(t_ns, value) pairs in preallocated numpy arrays; old entries are overwritten."""

    __slots__ = ("t", "v", "i", "n", "cap")

    def __init__(self, cap: int = 1 << 16) -> None:
        self.t = np.zeros(cap, dtype=np.int64)
        self.v = np.zeros(cap, dtype=np.float64)
        self.i = 0
        self.n = 0
        self.cap = cap

    def add(self, t: int, v: float) -> None:
        i = self.i
        self.t[i] = t
        self.v[i] = v
        self.i = (i + 1) % self.cap
        if self.n < self.cap:
            self.n += 1

    def since(self, t0: int) -> np.ndarray:
        if self.n == 0:
            return self.v[:0]
        t = self.t[: self.n]
        return self.v[: self.n][t >= t0]

    def between(self, t0: int, t1: int) -> np.ndarray:
        """Values with t0 <= t < t1."""
        if self.n == 0:
            return self.v[:0]
        t = self.t[: self.n]
        return self.v[: self.n][(t >= t0) & (t < t1)]


class LiveStats:
    def __init__(
        self, clock: Clock = SYSTEM_CLOCK, *, history_s: int = 300, window_s: float = 10.0, max_errors: int = 8
    ) -> None:
        self._clock = clock
        self.t0 = clock.now_ns()
        self.history_s = history_s
        self.window_ns = int(window_s * NS)
        # per-second buckets: the open second and closed history
        self._sec = 0
        self._sec_tokens = 0.0
        self._sec_requests = 0
        self._tok_hist: deque[float] = deque(maxlen=history_s)
        self._req_hist: deque[float] = deque(maxlen=history_s)
        self._lat_hist: dict[str, tuple[deque[float], deque[float]]] = {
            k: (deque(maxlen=history_s), deque(maxlen=history_s)) for k in ("ttft", "tpot", "e2e")}
        # closed seconds whose rolling percentiles the next snapshot computes (their end times)
        self._lat_pending: deque[int] = deque(maxlen=history_s)
        self.tokens_total = 0.0
        self.requests_total = 0
        self.requests_ok = 0
        self.requests_failed = 0
        self._rings = {"ttft": _Ring(), "tpot": _Ring(), "e2e": _Ring()}
        self._errors: dict[str, int] = {}
        self._last_errors: deque[str] = deque(maxlen=max_errors)
        self._levels: list[LevelSummary] = []
        self._server: ServerSample | None = None
        self._server_gen: deque[float] = deque(maxlen=history_s)
        self._accept_len: deque[float] = deque(maxlen=history_s)
        self._crashes: dict[str, CrashEvent] = {}
        self._gpus: dict[int, tuple[GpuSample, deque[float]]] = {}
        self._gpu_faults: dict[int | None, str] = {}
        self.health = "unknown"
        self.client_cpu_pct: float | None = None
        self.loop_lag_ms: float | None = None
        self.client_saturated = False
        self.client_starved = False

    # ---- push side (cheap) ----

    def _roll(self, now_ns: int) -> None:
        sec = (now_ns - self.t0) // NS
        if sec - self._sec > self.history_s + 1:
            # a long quiet gap: everything older than the history is empty anyway
            self._close_second()
            self._sec = sec - self.history_s - 1
        while self._sec < sec:
            self._close_second()
            self._sec += 1

    def _close_second(self) -> None:
        self._tok_hist.append(float(self._sec_tokens))
        self._req_hist.append(float(self._sec_requests))
        self._sec_tokens = 0.0
        self._sec_requests = 0
        self._lat_pending.append(self.t0 + (self._sec + 1) * NS)

    def _settle_latency_history(self) -> None:
        """The rolling percentiles of the seconds closed since the last snapshot (pull side)."""
        pending = self._lat_pending
        while pending:
            end = pending.popleft()
            for key, ring in self._rings.items():
                # values that ended before this second's end: later ones belong to later seconds
                vals = ring.between(end - self.window_ns, end)
                p50s, p99s = self._lat_hist[key]
                if vals.size:
                    p50, p99 = percentiles(vals, (50, 99))
                    p50s.append(p50 / 1e6)
                    p99s.append(p99 / 1e6)
                else:
                    p50s.append(float("nan"))
                    p99s.append(float("nan"))

    def on_tokens(self, now_ns: int, n: float) -> None:
        if (now_ns - self.t0) // NS != self._sec:
            self._roll(now_ns)
        self._sec_tokens += n
        self.tokens_total += n

    def on_record(self, rec: RequestRecord) -> None:
        end = rec.end_ns
        if (end - self.t0) // NS != self._sec:
            self._roll(end)
        if rec.warmup:
            return
        self._sec_requests += 1
        self.requests_total += 1
        if rec.ok:
            self.requests_ok += 1
            if rec.ttft_ns is not None:
                self._rings["ttft"].add(end, rec.ttft_ns)
            tpot = rec.tpot_ns
            if tpot is not None:
                self._rings["tpot"].add(end, tpot)
            if rec.e2e_ns is not None:
                self._rings["e2e"].add(end, rec.e2e_ns)
        else:
            self.requests_failed += 1
            kind = rec.error_kind.value if rec.error_kind is not None else "error"
            self._errors[kind] = self._errors.get(kind, 0) + 1
            self._last_errors.append(f"{kind}: {rec.error_detail or ''}"[:240])

    def on_level(self, summary: LevelSummary) -> None:
        self._levels.append(summary)

    def on_server(self, sample: ServerSample) -> None:
        self._server = sample
        if sample.gen_tok_s is not None:
            self._server_gen.append(sample.gen_tok_s)
        if sample.accept_len is not None:
            self._accept_len.append(sample.accept_len)

    def on_gpu(self, s: GpuSample) -> None:
        _, power = self._gpus.get(s.gpu) or (s, deque(maxlen=self.history_s))
        power.append(float("nan") if s.power_w is None else s.power_w)
        self._gpus[s.gpu] = (s, power)

    def on_gpu_fault(self, f: GpuFault) -> None:
        if f.kind != "unsupported":  # a field never read is not news for the panel
            self._gpu_faults[f.gpu] = f"{f.kind}: {f.message}"

    def on_crash(self, event: CrashEvent) -> None:
        self._crashes[event.signature] = event

    def on_event(self, event: RunEvent) -> None:
        if isinstance(event, HealthChanged):
            self.health = event.state

    def on_client_load(
        self, cpu_pct: float | None, lag_ms: float | None, saturated: bool, starved: bool = False
    ) -> None:
        self.client_cpu_pct, self.loop_lag_ms, self.client_saturated = cpu_pct, lag_ms, saturated
        self.client_starved = starved

    # ---- pull side ----

    def snapshot(self, now_ns: int | None = None) -> StatsSnapshot:
        now = self._clock.now_ns() if now_ns is None else now_ns
        self._roll(now)
        self._settle_latency_history()
        tok = tuple(self._tok_hist)
        req = tuple(self._req_hist)
        last10, req10 = tok[-10:], req[-10:]
        return StatsSnapshot(
            t_ns=now,
            elapsed_s=(now - self.t0) / NS,
            tok_s_series=tok,
            tok_s=tok[-1] if tok else 0.0,
            tok_s_avg10=sum(last10) / len(last10) if last10 else 0.0,
            req_s=req[-1] if req else 0.0,
            req_s_avg10=sum(req10) / len(req10) if req10 else 0.0,
            tokens_total=round(self.tokens_total),
            requests_total=self.requests_total,
            requests_ok=self.requests_ok,
            requests_failed=self.requests_failed,
            ttft=self._latency("ttft", now),
            tpot=self._latency("tpot", now),
            e2e=self._latency("e2e", now),
            errors_by_kind=tuple(sorted(self._errors.items(), key=lambda kv: -kv[1])),
            last_errors=tuple(self._last_errors),
            levels=tuple(self._levels),
            server=self._server,
            server_gen_tok_s_series=tuple(self._server_gen),
            accept_len_series=tuple(self._accept_len),
            crashes=tuple(self._crashes.values()),
            health=self.health,
            client_cpu_pct=self.client_cpu_pct,
            loop_lag_ms=self.loop_lag_ms,
            client_saturated=self.client_saturated,
            client_starved=self.client_starved,
            gpus=tuple(GpuView(last, tuple(p), self._gpu_faults.get(g)) for g, (last, p) in sorted(self._gpus.items())),
            gpu_fault=self._gpu_faults.get(None),
        )

    def _latency(self, key: str, now: int) -> LatencyView:
        vals = self._rings[key].since(now - self.window_ns)
        p50s, p99s = self._lat_hist[key]
        cur50: float | None
        cur99: float | None
        if vals.size:
            p50, p99 = percentiles(vals, (50, 99))
            cur50, cur99 = p50 / 1e6, p99 / 1e6
        else:
            cur50 = cur99 = None
        return LatencyView(tuple(p50s), tuple(p99s), cur50, cur99)
