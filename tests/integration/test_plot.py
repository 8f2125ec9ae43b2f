"""The static plots: PNG and SVG files written with sane sizes; a missing matplotlib or a bad
suffix is one line naming what to do."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

from specload.report.figures import ReportLevel, ReportSeries
from specload.report.plot import PlotError, render_plot
from tests import processes


def run(label: str, factor: float, intervals: bool = True) -> ReportSeries:
    levels = []
    for c in (1, 4, 16, 64):
        m = {}
        for key, v in (("throughput", 60 * c ** 0.8), ("per_request_tok_s", 60 / c ** 0.2),
                       ("ttft_p50", 20 + c), ("ttft_p99", 30 + 2 * c), ("tpot_p50", 15 + c / 4),
                       ("tpot_p99", 20 + c / 2), ("e2e_p50", 2 + c / 30), ("e2e_p99", 3 + c / 20)):
            v *= factor
            m[key] = {"value": v, "ci_low": v * 0.95 if intervals else None, "ci_high": v * 1.05 if intervals else None}
        levels.append(ReportLevel(c, 4 * c, 4 * c, {}, m, key=f"C={c}"))
    return ReportSeries(label, levels)


def plot_in_child(path: Path, *labels_factors: tuple[str, float, bool]) -> int:
    """``render_plot`` in a child process: matplotlib adds ~80 MB to whatever process imports it, and
    the suite's process is the parent of other tests' subprocesses (whose peak memory some measure)."""
    code = (
        "import sys; from pathlib import Path; from tests.integration.test_plot import run; "
        "from specload.report.plot import render_plot; "
        f"print(render_plot([run(l, f, i) for l, f, i in {list(labels_factors)!r}], Path({str(path)!r})))"
    )
    p = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr[-800:]
    return int(p.stdout.strip())


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_and_svg(tmp_path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:  # not imported here: it would grow this process
        pytest.skip('matplotlib is the [report] extra: pip install "specload[report]"')
    runs = (("baseline", 1.0, True), ("eagle3", 0.9, True), ("no intervals", 1.1, False))
    png = tmp_path / "out.png"
    n = plot_in_child(png, *runs)
    assert n == png.stat().st_size and 30_000 < n < 600_000
    w, h = png_size(png)
    assert (w, h) == (1350, 774)  # 15 x 8.6 in at 90 dpi
    svg = tmp_path / "out.svg"
    plot_in_child(svg, *runs)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text and 20_000 < len(text) < 2_000_000
    # the runs' names are in the figure (SVG keeps text as glyph paths, so look for the legend ids)
    assert text.count("<path") > 50


def test_same_runs_same_svg(tmp_path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:  # not imported here: it would grow this process
        pytest.skip('matplotlib is the [report] extra: pip install "specload[report]"')
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    plot_in_child(a, ("x", 1.0, True))
    plot_in_child(b, ("x", 1.0, True))
    assert a.read_bytes() == b.read_bytes()  # no timestamp: a plot under docs/ diffs cleanly


def test_bad_suffix(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match=r"must end in \.png or \.svg"):
        render_plot([run("x", 1.0)], tmp_path / "out.pdf")


def test_without_matplotlib_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(PlotError) as e:
        render_plot([run("x", 1.0)], tmp_path / "out.png")
    assert 'pip install "specload[report]"' in str(e.value) and "\n" not in str(e.value)
