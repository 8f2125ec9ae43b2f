"""What ``specload report`` writes besides its table: the HTML page (``--html``), the plot
(``--plot``), and the level lines of another tool's result file.

Kept out of ``report.py`` so the command stays a thin front: it loads the runs, compares them when
there are several, and hands the sides and the comparison's JSON here. Output paths are checked
before any work (a missing matplotlib or an unwritable folder is a one-line error at once, not after
the statistics), and each written file is reported on stderr with its size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click


class OutputError(Exception):
    """An output cannot be written; one line for the user."""


def check_outputs(html: str | None, plot: str | None) -> None:
    """Fail before the work: a bad suffix, no matplotlib for a plot, a folder that is not there or
    not writable."""
    for path in (html, plot):
        if path is None:
            continue
        parent = Path(path).parent
        if not parent.is_dir():
            raise OutputError(f"{path}: the folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{path}: the folder {parent} is not writable")
        if Path(path).is_dir():
            raise OutputError(f"{path} is a folder")
    if html is not None and not html.lower().endswith((".html", ".htm")):
        raise OutputError(f"--html {html}: the file must end in .html")
    if plot is not None:
        from specload.report.plot import FORMATS, PlotError, _pyplot

        if Path(plot).suffix.lower() not in FORMATS:
            raise OutputError(f"--plot {plot}: the file must end in .png or .svg")
        try:
            _pyplot()
        except PlotError as e:
            raise OutputError(str(e)) from None


def write_outputs(sides: Sequence[Any], comparison: dict | None, *, html: str | None, plot: str | None) -> None:
    """Write the page and/or the plot of ``sides`` (``compare.Side``-like: ``label``, ``runs``) and the
    comparison's JSON (None for a single run)."""
    if html is None and plot is None:
        return
    from specload.report.figures import page_from_runs

    page = page_from_runs(sides, comparison)
    if html is not None:
        from specload.report.html import write_html

        try:
            size = write_html(html, page)
        except OSError as e:
            raise OutputError(f"cannot write {html}: {e.strerror or e}") from None
        click.echo(f"specload report: wrote {html} ({size / 1e3:.0f} kB)", err=True)
    if plot is not None:
        from specload.report.plot import PlotError, render_plot

        try:
            size = render_plot(page.series, plot, title=page.title)
        except PlotError as e:
            raise OutputError(str(e)) from None
        click.echo(f"specload report: wrote {plot} ({size / 1e3:.0f} kB)", err=True)
