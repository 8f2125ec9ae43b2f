"""The simulator's GPUs (``--gpus N``): utilisation, memory, power, clocks that follow its load, served on
its /metrics in a DCGM exporter's names, so ``--gpu-metrics`` reads them (``auto`` finds them there).

Nothing here is measured: it is a model, good enough that a simulated comparison shows energy figures
that move the way a real server's do. Over the last second of the engine's counters (at least a
second back, so several scrapers of /metrics see the same figures):

- utilisation: the share of that time the step clock was busy (model passes x the modelled step
  time at their mean batch, ``model.decode_step_s``);
- power: idle draw plus, while busy, a share of the rest that grows with the work of a pass (the
  positions it verifies: batch x (1 + draft tokens)), so a wider batch and speculative decoding
  draw more, as compute-bound passes do; the GPUs of a tensor-parallel group share the load alike
  (a per-GPU offset of 1.5 % keeps their lines apart);
- memory: the weights plus the KV cache's share of what is left; SM clock: boost when busy.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from specload.sim.config import SimConfig
from specload.sim.model import decode_step_s
from specload.sim.scheduler import Counters

TOTAL_MIB = 81559.0  # an H100 80GB
IDLE_W, PEAK_W = 70.0, 700.0
SATURATING_POSITIONS = 128.0  # positions verified per pass at which a pass draws all it can
WINDOW_S = 1.0


class SimGpus:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        # (time, model passes, slot steps), from the start: the first scrape sees the time since then
        self._history: deque[tuple[float, int, int]] = deque([(time.perf_counter(), 0, 0)])

    def _load(self, now: float, calls: int, slot_steps: int) -> tuple[float, float]:
        """(busy share, positions per pass) over the last second or so."""
        h = self._history
        while len(h) > 1 and h[1][0] <= now - WINDOW_S:
            h.popleft()
        h.append((now, calls, slot_steps))
        t0, c0, s0 = h[0]
        dt, d_calls, d_steps = now - t0, calls - c0, slot_steps - s0
        if dt <= 0 or d_calls <= 0:
            return 0.0, 0.0
        batch = d_steps / d_calls
        busy = min(1.0, d_calls * decode_step_s(self.cfg, max(1, round(batch))) / dt)
        return busy, batch * (1 + self.cfg.spec_tokens)

    def text(self, counters: Counters, kv_tokens: int) -> bytes:
        """The GPUs' series as Prometheus text, to follow the flavour's own /metrics."""
        registry = CollectorRegistry(auto_describe=False)
        families = list(self.families(time.perf_counter(), counters.decode_calls, counters.busy_slot_steps,
                                      kv_tokens / self.cfg.kv_capacity_tokens))
        registry.register(_Collected(families))
        return generate_latest(registry)

    def families(self, now: float, calls: int, slot_steps: int, kv_share: float) -> Iterator[GaugeMetricFamily]:
        busy, positions = self._load(now, calls, slot_steps)
        work = 0.55 + 0.45 * min(1.0, positions / SATURATING_POSITIONS)
        power = IDLE_W + (PEAK_W - IDLE_W) * busy * work
        used = 0.55 * TOTAL_MIB + 0.4 * TOTAL_MIB * min(1.0, kv_share)
        labels = ["gpu", "UUID", "modelName", "Hostname"]
        rows = [(str(i), f"GPU-5151{i:04x}-0000-4000-8000-{i:012x}", "NVIDIA H100 80GB HBM3 (simulated)",
                 "specload-sim") for i in range(self.cfg.gpus)]
        for name, doc, value in (
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda i: round(100 * busy)),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda i: round(used)),
            ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda i: round(TOTAL_MIB - used)),
            ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda i: round(power * (1 + 0.015 * i), 3)),
            ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda i: 1980 if busy > 0.05 else 345),
            ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda i: round(30 + power / 14) + i % 3),
        ):
            g = GaugeMetricFamily(name, doc, labels=labels)
            for i, row in enumerate(rows):
                g.add_metric(list(row), value(i))
            yield g


class _Collected:
    """Families already made, as a collector the registry takes."""

    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self.families = families

    def collect(self) -> list[GaugeMetricFamily]:
        return self.families
