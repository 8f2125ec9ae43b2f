"""The GPUs over one level: mean utilisation, peak memory, mean power, and the energy the level cost.

Energy is the integral of each GPU's power over the level's active span, summed over the GPUs. Power is
known only at the samples, so between two consecutive samples of a GPU it is taken as the straight line
joining them (a trapezoid), and a segment that straddles the span's start or end counts only the part
inside it, integrated exactly on that line (not a share of the whole trapezoid). Where the samples say
nothing the energy is not guessed from neighbours far away:

- before a GPU's first sample and after its last one nothing is covered (no extrapolation);
- a segment longer than ``max_gap_ns`` (samples missed: the reader restarting, an exporter down, a
  field gone ``[N/A]``) is a gap: not covered either.

``coverage`` is the covered share of the span. A GPU covered for at least ``MIN_COVERAGE`` of the span
has its energy taken as its measured joules / coverage (its mean power over what was seen, over the
whole span); a GPU covered for less leaves the level's energy unknown (None), since the level's tokens
would then be set against energy of a different time. Tokens per joule and joules per 1k output tokens
use the level's output tokens over the same span.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specload.datatypes import GpuSample

MIN_COVERAGE = 0.5
MAX_SAMPLES_PER_GPU = 20_000  # at 1 s per sample: over five hours of each GPU kept for the level figures


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """The GPUs over one level's span."""

    gpus: int  # GPUs with a sample in the span
    util_pct_mean: float | None  # mean over the GPUs of each one's mean utilisation
    mem_used_mib_peak: float | None  # the most memory one GPU held at a sample
    mem_total_mib: float | None  # that GPU's total
    power_w_mean: float | None  # all the GPUs together: energy / span
    energy_j: float | None  # all the GPUs together, over the span (None: too little of it covered)
    coverage: float  # the least covered GPU's share of the span
    tok_per_j: float | None = None
    j_per_1k_tok: float | None = None

    def as_record(self) -> dict:
        def r(v: float | None, nd: int = 3) -> float | None:
            return None if v is None else round(v, nd)

        return {"gpus": self.gpus, "util_pct_mean": r(self.util_pct_mean, 1),
                "mem_used_mib_peak": r(self.mem_used_mib_peak, 0), "mem_total_mib": r(self.mem_total_mib, 0),
                "power_w_mean": r(self.power_w_mean, 1), "energy_j": r(self.energy_j, 1),
                "coverage": r(self.coverage), "tok_per_j": r(self.tok_per_j, 4),
                "j_per_1k_tok": r(self.j_per_1k_tok, 2)}

    @classmethod
    def from_record(cls, d: dict | None) -> GpuFigures | None:
        if not isinstance(d, dict):
            return None
        return cls(gpus=int(d.get("gpus") or 0), util_pct_mean=d.get("util_pct_mean"),
                   mem_used_mib_peak=d.get("mem_used_mib_peak"), mem_total_mib=d.get("mem_total_mib"),
                   power_w_mean=d.get("power_w_mean"), energy_j=d.get("energy_j"),
                   coverage=float(d.get("coverage") or 0.0), tok_per_j=d.get("tok_per_j"),
                   j_per_1k_tok=d.get("j_per_1k_tok"))


def energy_j(points: Sequence[tuple[int, float]], start_ns: int, end_ns: int,
             max_gap_ns: int) -> tuple[float, int]:
    """(joules, covered ns) of one GPU over [start_ns, end_ns] from its (t_ns, watts) samples in time
    order: trapezoids clipped to the span, gaps longer than ``max_gap_ns`` not covered."""
    joules = 0.0
    covered = 0
    for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False):
        if t1 <= start_ns:
            continue
        if t0 >= end_ns:
            break
        dt = t1 - t0
        if dt <= 0 or dt > max_gap_ns:
            continue
        lo, hi = max(t0, start_ns), min(t1, end_ns)
        slope = (p1 - p0) / dt
        p_lo, p_hi = p0 + slope * (lo - t0), p0 + slope * (hi - t0)
        joules += (p_lo + p_hi) / 2 * (hi - lo) / 1e9
        covered += hi - lo
    return joules, covered


def gpu_figures(samples: Iterable[Sequence[GpuSample]], start_ns: int, end_ns: int, *, max_gap_ns: int,
                output_tokens: int = 0) -> GpuFigures | None:
    """The level's figures from each GPU's samples (one sequence per GPU, in time order); None when no
    GPU has a sample inside the span."""
    span = end_ns - start_ns
    if span <= 0:
        return None
    gpus = 0
    utils: list[float] = []
    peak: tuple[float, float | None] | None = None
    total_j = 0.0
    coverage = 1.0
    for series in samples:
        inside = [s for s in series if start_ns <= s.t_ns <= end_ns]
        if not inside:
            continue
        gpus += 1
        u = [s.util_pct for s in inside if s.util_pct is not None]
        if u:
            utils.append(sum(u) / len(u))
        for s in inside:
            if s.mem_used_mib is not None and (peak is None or s.mem_used_mib > peak[0]):
                peak = (s.mem_used_mib, s.mem_total_mib)
        j, covered = energy_j([(s.t_ns, s.power_w) for s in series if s.power_w is not None],
                              start_ns, end_ns, max_gap_ns)
        share = covered / span
        coverage = min(coverage, share)
        if share > 0:
            total_j += j / share
    if not gpus:
        return None
    energy = total_j if coverage >= MIN_COVERAGE else None
    return GpuFigures(
        gpus=gpus,
        util_pct_mean=sum(utils) / len(utils) if utils else None,
        mem_used_mib_peak=peak[0] if peak else None,
        mem_total_mib=peak[1] if peak else None,
        power_w_mean=energy / (span / 1e9) if energy is not None else None,
        energy_j=energy,
        coverage=coverage,
        tok_per_j=output_tokens / energy if energy and output_tokens else None,
        j_per_1k_tok=1000 * energy / output_tokens if energy is not None and output_tokens else None,
    )


class GpuLevels:
    """Each GPU's recent samples (bounded), for the figures of the levels as they end."""

    def __init__(self, interval_s: float = 1.0, max_samples: int = MAX_SAMPLES_PER_GPU) -> None:
        # a missed sample or two is bridged; longer is a gap (see the module's docstring)
        self.max_gap_ns = int(max(3 * interval_s, 1.0) * 1e9)
        self._max = max_samples
        self._by_gpu: dict[int, deque[GpuSample]] = {}

    def add(self, s: GpuSample) -> None:
        q = self._by_gpu.get(s.gpu)
        if q is None:
            q = self._by_gpu[s.gpu] = deque(maxlen=self._max)
        q.append(s)

    def figures(self, start_ns: int, end_ns: int, output_tokens: int = 0) -> GpuFigures | None:
        return gpu_figures((self._by_gpu[g] for g in sorted(self._by_gpu)), start_ns, end_ns,
                           max_gap_ns=self.max_gap_ns, output_tokens=output_tokens)
