"""What ``specload report`` writes besides its table: the HTML page (``--html``) and the plot
(``--plot``).

Kept out of ``report.py`` so the command stays a thin front: it loads the runs, compares them when
there are several, and hands the sides and the comparison's JSON here. Output paths are checked
before any work (a missing matplotlib or an unwritable folder is a one-line error at once, not after
the statistics), each is written whole or not at all (``atomic_output``: a full disk leaves no partial
file, and an earlier file of that name as it was), and each written file is reported on stderr with
its size.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
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
        from specload.report.plot import FORMATS, PlotError, pyplot

        if Path(plot).suffix.lower() not in FORMATS:
            raise OutputError(f"--plot {plot}: the file must end in .png or .svg")
        try:
            pyplot()
        except PlotError as e:
            raise OutputError(str(e)) from None


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file beside ``path`` (hidden, with its suffix, so a writer that goes by the suffix
    picks the format) for the block to write; synced and renamed onto ``path`` when the block ends,
    removed when it raises. A reader never sees a partial file, and a full disk leaves none."""
    final = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{final.stem}.", suffix=final.suffix, dir=final.parent)
    tmp = Path(name)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # as open() would have made it, not mkstemp's 0600
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_outputs(sides: Sequence[Any], comparison: dict | None, *, html: str | None, plot: str | None) -> None:
    """Write the page and/or the plot of ``sides`` (``compare.Side``-like: ``label``, ``runs``) and the
    comparison's JSON (None for a single run)."""
    if html is None and plot is None:
        return
    from specload.report.figures import page_from_runs

    page = page_from_runs(sides, comparison)
    if html is not None:
        write_page(html, page)
    if plot is not None:
        from specload.report.figures import crash_lines
        from specload.report.plot import PlotError, render_plot

        try:
            with atomic_output(plot) as tmp:
                size = render_plot(page.series, tmp, title=page.title, crashes=crash_lines(page))
        except PlotError as e:
            raise OutputError(str(e).replace(str(tmp), plot)) from None
        except OSError as e:
            raise OutputError(f"cannot write {plot}: {e.strerror or e}") from None
        click.echo(f"specload report: wrote {plot} ({size / 1e3:.0f} kB)", err=True)


def write_page(path: str, page: Any) -> None:  # a figures.ReportPage
    """The HTML page, whole or not at all, and a line saying so on stderr."""
    from specload.report.html import write_html

    try:
        with atomic_output(path) as tmp:
            size = write_html(tmp, page)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    click.echo(f"specload report: wrote {path} ({size / 1e3:.0f} kB)", err=True)
