"""``KeyedTable``: a table whose rows are keyed things that change in place (levels, crash signatures).

A row is added the first time its key is shown and afterwards only the cells whose text changed are
updated (``update_cell``, as aiperf keeps its tables), so a table refreshed at 4 Hz never clears, never
rebuilds and never jumps. Columns can be added later (goodput columns appear with the first level
that has goodput; rows already shown get ``DASH`` in them), or the table laid out again with new
columns in the middle (``relayout``). The table never takes focus: the arrow
keys drive the concurrency.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import DataTable

from specload.formatting import DASH

Column = tuple[str, str]  # (key, label)


class KeyedTable(DataTable):
    COLUMNS: tuple[Column, ...] = ()

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("cursor_type", "row")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.can_focus = False
        self.columns_shown: tuple[Column, ...] = ()
        self._shown: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        self.add_columns_keyed(self.COLUMNS)

    def add_columns_keyed(self, columns: Iterable[Column]) -> None:
        columns = tuple(columns)
        for key, label in columns:
            self.add_column(label, key=key, default=DASH)
        self.columns_shown += columns
        self._shown = {k: v + (DASH,) * len(columns) for k, v in self._shown.items()}

    def relayout(self, columns: Iterable[Column], rows: dict[str, tuple[str, ...]]) -> None:
        """New columns anywhere (rare: once, when a new kind of figure first arrives): the table is laid
        out again with ``rows`` (key -> cells for the new columns)."""
        self.clear(columns=True)
        self.columns_shown, self._shown = (), {}
        self.add_columns_keyed(columns)
        for key, cells in rows.items():
            self.show(key, cells)

    def show(self, key: str, cells: tuple[str, ...]) -> None:
        """Add the row, or update the cells that changed when it is already there."""
        old = self._shown.get(key)
        if old == cells:
            return
        if old is None:
            self.add_row(*cells, key=key)
        else:
            for (col, _), new, was in zip(self.columns_shown, cells, old, strict=True):
                if new != was:
                    self.update_cell(key, col, new)
        self._shown[key] = cells
