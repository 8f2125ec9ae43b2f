"""Snapshot tests on fixed data (``fixed_data.py``): the layout at a large size, at 80x24, before any
data, and in a non-default theme. The static source freezes the elapsed time, so the SVGs are stable.

Regenerate after an intended change: ``pytest tests/ui --snapshot-update``, then read the SVGs' text.
"""

from __future__ import annotations

from specload.ui.app import create_app
from tests.ui.fixed_data import baseline_source, idle_source, mid_run_source


def test_idle_layout(snap_compare) -> None:
    assert snap_compare(create_app(source=idle_source()), terminal_size=(120, 36))


def test_mid_run_large(snap_compare) -> None:
    assert snap_compare(create_app(source=mid_run_source()), terminal_size=(160, 48))


def test_mid_run_80x24(snap_compare) -> None:
    assert snap_compare(create_app(source=mid_run_source()), terminal_size=(80, 24))


def test_mid_run_80x24_chart_panel(snap_compare) -> None:
    # right arrow: the next detail panel (levels -> chart) on a small terminal
    assert snap_compare(create_app(source=mid_run_source()), terminal_size=(80, 24), press=["right"])


def test_contrast_theme(snap_compare) -> None:
    app = create_app(source=mid_run_source(), theme="specload-contrast")
    assert snap_compare(app, terminal_size=(160, 48))


def test_light_theme_80x24(snap_compare) -> None:
    assert snap_compare(create_app(source=mid_run_source(), theme="specload-light"), terminal_size=(80, 24))


def test_baseline_columns(snap_compare) -> None:
    # --baseline: the baseline's figure, the ratio with its interval and the verdict per finished level,
    # and in the load panel the running level so far
    assert snap_compare(create_app(source=baseline_source()), terminal_size=(160, 48))
