"""Energy per level from power samples (stats/gpu_levels.py): trapezoids clipped to the span, gaps not
bridged, per-token figures; exact expected values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specload.datatypes import GpuSample
from specload.stats.gpu_levels import GpuLevels, energy_j, gpu_figures

S = 1_000_000_000


def series(gpu: int, points: list[tuple[float, float | None]], **kw) -> list[GpuSample]:
    return [GpuSample(t_ns=int(t * S), gpu=gpu, source="test", power_w=p, **kw) for t, p in points]


def test_constant_power_over_a_span_inside_the_samples():
    pts = [(t * S, 100.0) for t in range(11)]
    assert energy_j(pts, 2 * S, 7 * S, 3 * S) == (500.0, 5 * S)


def test_a_straddling_segment_is_integrated_on_its_line_not_shared_out():
    # one segment 0 W at 0 s to 100 W at 10 s; over [2 s, 6 s] the line goes 20 -> 60 W: 160 J
    # (a share of the whole trapezoid would say 500 J * 0.4 = 200 J)
    assert energy_j([(0, 0.0), (10 * S, 100.0)], 2 * S, 6 * S, 20 * S) == (pytest.approx(160.0), 4 * S)
    # half a second inside at each end of a 1 s grid: 50 W*s per half-second at 100 W
    pts = [(t * S, 100.0) for t in range(5)]
    assert energy_j(pts, S // 2, 3 * S + S // 2, 2 * S) == (pytest.approx(300.0), 3 * S)


def test_gaps_and_edges_are_not_covered():
    pts = [(0, 100.0), (S, 100.0), (2 * S, 100.0), (10 * S, 100.0), (11 * S, 100.0)]
    # 2 s -> 10 s is longer than the 3 s allowed: 0-2 s and 10-11 s covered
    assert energy_j(pts, 0, 11 * S, 3 * S) == (300.0, 3 * S)
    # before the first sample and after the last: nothing
    assert energy_j([(5 * S, 100.0), (6 * S, 100.0)], 0, 20 * S, 3 * S) == (100.0, S)
    assert energy_j([(5 * S, 100.0)], 0, 20 * S, 3 * S) == (0.0, 0)


def test_level_figures_two_gpus_tokens_per_joule():
    g0 = series(0, [(t, 100.0) for t in range(8)], util_pct=40.0, mem_used_mib=1000.0, mem_total_mib=81559.0)
    g1 = series(1, [(t, 300.0) for t in range(8)], util_pct=80.0, mem_used_mib=70000.0, mem_total_mib=81559.0)
    f = gpu_figures([g0, g1], S, 6 * S, max_gap_ns=3 * S, output_tokens=4000)
    assert f is not None
    assert (f.gpus, f.energy_j, f.power_w_mean, f.coverage) == (2, 2000.0, 400.0, 1.0)
    assert (f.tok_per_j, f.j_per_1k_tok) == (2.0, 500.0)
    assert (f.util_pct_mean, f.mem_used_mib_peak, f.mem_total_mib) == (60.0, 70000.0, 81559.0)
    assert f.as_record()["energy_j"] == 2000.0


def test_partial_coverage_scales_up_to_the_span_or_gives_up():
    # samples every second 0..2 s, then nothing: over [0, 3 s] 2 s of 3 covered at 100 W
    g = series(0, [(0, 100.0), (1, 100.0), (2, 100.0)])
    f = gpu_figures([g], 0, 3 * S, max_gap_ns=3 * S, output_tokens=600)
    assert f is not None and f.coverage == pytest.approx(2 / 3)
    assert f.energy_j == pytest.approx(300.0) and f.j_per_1k_tok == pytest.approx(500.0)
    # over [0, 5 s] 2 s of 5: less than half: unknown, not guessed
    f = gpu_figures([g], 0, 5 * S, max_gap_ns=3 * S, output_tokens=600)
    assert f is not None and f.coverage == pytest.approx(0.4)
    assert (f.energy_j, f.power_w_mean, f.tok_per_j) == (None, None, None)


def test_power_unread_at_a_sample_is_bridged_by_its_neighbours():
    g = series(0, [(0, 100.0), (1, None), (2, 300.0)])
    f = gpu_figures([g], 0, 2 * S, max_gap_ns=3 * S)
    assert f is not None and f.energy_j == 400.0 and f.tok_per_j is None


def test_no_sample_in_the_span_gives_none_and_levels_keep_each_gpu():
    levels = GpuLevels(interval_s=1.0)
    for s in series(0, [(t, 50.0) for t in range(5)]) + series(1, [(t, 150.0) for t in range(5)]):
        levels.add(s)
    assert levels.figures(10 * S, 12 * S) is None
    f = levels.figures(S, 3 * S, output_tokens=100)
    assert f is not None and (f.gpus, f.energy_j, f.tok_per_j) == (2, 400.0, 0.25)


@given(st.lists(st.tuples(st.integers(0, 20 * S), st.floats(0, 1000)), min_size=2, max_size=20),
       st.integers(0, 20 * S), st.integers(0, 20 * S), st.integers(0, 20 * S))
def test_energy_adds_up_over_adjoining_spans(raw, a, b, c):
    pts = sorted(dict(raw).items())
    a, b, c = sorted((a, b, c))
    ja, ca = energy_j(pts, a, b, 5 * S)
    jb, cb = energy_j(pts, b, c, 5 * S)
    jc, cc = energy_j(pts, a, c, 5 * S)
    assert ja + jb == pytest.approx(jc, rel=1e-9, abs=1e-6) and ca + cb == cc


def test_level_line_and_table_say_the_gpus():
    from specload.formatting import level_cells, level_line, table_columns
    from specload.stats.gpu_levels import GpuFigures
    from specload.stats.levels import LevelSummary

    base = dict(level_index=0, concurrency=16, requests=50, ok=50, errors=(), output_tokens=6000,
                tokens_estimated=False, wall_s=15.0, throughput_tok_s=400.0, per_request_tok_s=25.0, req_s=3.3,
                ttft_ms_avg=None, ttft_ms_p50=None, ttft_ms_p99=None, tpot_ms_p50=None, tpot_ms_p99=None,
                itl_ms_p50=None, itl_ms_p99=None, e2e_s_avg=None, e2e_s_p50=None, e2e_s_p99=None)
    g = GpuFigures(gpus=8, util_pct_mean=87.4, mem_used_mib_peak=71.2 * 1024, mem_total_mib=81559.0,
                   power_w_mean=3600.0, energy_j=54000.0, coverage=1.0, tok_per_j=6000 / 54000, j_per_1k_tok=9000.0)
    s = LevelSummary(**base, gpu=g)
    assert level_line(s).endswith(" | GPUs x8: util 87%, peak mem 71.2/80 GiB, power 3600 W, energy 54.00 kJ = "
                                  "9000 J/1k tok (0.111 tok/J)")
    unknown = LevelSummary(**base, gpu=GpuFigures(gpus=1, util_pct_mean=None, mem_used_mib_peak=None,
                                                  mem_total_mib=None, power_w_mean=None, energy_j=None, coverage=0.3))
    assert level_line(unknown).endswith("GPUs x1: util -%, peak mem - GiB, power - W, energy - (30% of the level sampled)")
    cols = table_columns([s])
    assert cols[-4:] == ("GPU W", "J/1k tok", "ok", "errors")
    assert "GPU W" not in table_columns([LevelSummary(**base)])
    cells = level_cells(s)
    assert (cells["GPU W"], cells["J/1k tok"], cells["tok/J"], cells["energy kJ"]) == ("3600", "9000", "0.111", "54.00")
    kept = LevelSummary.from_record(s.as_record()).gpu  # the record keeps them, at its precision
    assert kept is not None and (kept.energy_j, kept.j_per_1k_tok, kept.tok_per_j, kept.mem_used_mib_peak) == (
        54000.0, 9000.0, 0.1111, 72909.0)


def test_tokens_per_joule_is_throughput_over_power_with_both_uncertainties():
    import math

    import numpy as np

    from specload.stats.level_metrics import estimate
    from tests.unit.test_level_metrics import closed_loop

    lv = closed_loop(4, 80, np.random.default_rng(3))  # from t = 10 s, about 20 s long
    t = np.arange(0.0, 40.0, 0.5)
    power = (t, 400.0 + 10.0 * np.sin(t))  # a GPU drawing 400 W, +-10
    th = estimate(lv, "throughput", gpu_power=power)
    p = estimate(lv, "gpu_power_w", gpu_power=power)
    e = estimate(lv, "tok_per_j", gpu_power=power)
    assert e.value == th.value / p.value
    assert e.se_log == math.hypot(th.se_log, p.se_log)
    assert e.ci_low < e.value < e.ci_high
    assert estimate(lv, "tok_per_j").value is None and "no GPU samples" in estimate(lv, "gpu_power_w").note
