"""The dashboard's layout, and how it changes with the terminal's size.

One widget tree serves every size; only CSS changes. On a large terminal (at least ``WIDE_COLS`` x
``TALL_ROWS``) the load, throughput and latency panels sit in a bordered row and every detail panel
(levels, chart, server, crashes, errors, log; the GPUs beside the log once they are read) is visible at
once in a grid. Below that the dashboard
is "compact": the top panels stack without borders, and the detail panels share the remaining rows,
one at a time, chosen with a tab strip (or the left/right keys); when it is compact only because it
is narrow (120x40, "medium"), the crashes and the log stay in view below the chosen panel. Moving panels with CSS instead of
composing two layouts keeps a single set of widgets to update. The CSS is ``dashboard.tcss``.
"""

from __future__ import annotations

from textual import events
from textual.containers import Container, Grid, Horizontal
from textual.widgets import Tab, Tabs

WIDE_COLS = 130
TALL_ROWS = 34

DETAIL_PANELS = ("levels", "chart", "server", "crashes", "errors", "gpus", "log")


class TopRow(Horizontal):
    """The load, throughput and latency panels."""


class DetailGrid(Grid):
    """The detail panels: a grid when wide, one at a time when compact."""


class PanelTabs(Tabs):
    """Which detail panel a compact dashboard shows."""

    def __init__(self) -> None:
        super().__init__(*[Tab(name, id=f"tab-{name}") for name in DETAIL_PANELS], id="panel-tabs")
        # left/right are app bindings; a focused tab strip would also swallow them
        self.can_focus = False


class Dashboard(Container):
    """Everything below the header; its classes (``-compact``, ``-show-NAME``) drive dashboard.tcss."""

    def on_mount(self) -> None:
        self.add_class("-show-levels")
        self._fit(self.app.size.width, self.app.size.height)

    def on_resize(self, event: events.Resize) -> None:
        self._fit(self.app.size.width, self.app.size.height)

    def _fit(self, cols: int, rows: int) -> None:
        compact = cols < WIDE_COLS or rows < TALL_ROWS
        # too narrow for the grid but tall (120x40): the tabs choose the top panel, and the crashes
        # and the log stay in view below it (one panel at a time left the levels tab mostly empty
        # with the crashes and the log hidden)
        self.set_classes_at_once({"-compact": compact, "-medium": compact and rows >= TALL_ROWS})

    def set_classes_at_once(self, wanted: dict[str, bool]) -> None:
        """Several of the dashboard's classes, with one restyle of everything below it: each class
        changed on its own restyles every widget of the dashboard (a tab switch changes two)."""
        before = self.classes
        for name, on in wanted.items():
            self.set_class(on, name, update=False)
        if self.classes != before:
            self.update_node_styles()

    @property
    def compact(self) -> bool:
        return self.has_class("-compact")

    def show_panel(self, name: str) -> None:
        """Which detail panel a compact dashboard shows (all are shown when wide)."""
        if name not in DETAIL_PANELS:
            return
        self.set_classes_at_once({f"-show-{other}": other == name for other in DETAIL_PANELS})
        tabs = self.query_one(PanelTabs)
        if tabs.active != f"tab-{name}":
            tabs.active = f"tab-{name}"

    @property
    def shown_panel(self) -> str:
        for name in DETAIL_PANELS:
            if self.has_class(f"-show-{name}"):
                return name
        return DETAIL_PANELS[0]

    def step_panel(self, delta: int) -> None:
        i = DETAIL_PANELS.index(self.shown_panel)
        self.show_panel(DETAIL_PANELS[(i + delta) % len(DETAIL_PANELS)])

    def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        # The strip's ``active`` is the truth; a TabActivated is news about it that may be stale. Two
        # tab keys in one read set ``active`` twice before the first message is handled: acting on the
        # stale one set it back, which queued another, and the two reset each other forever (100 % CPU).
        # A click sets ``active`` too, so a current message is the user's choice.
        if event.tab is None or not event.tab.id or event.tab.id != self.query_one(PanelTabs).active:
            return
        self.show_panel(event.tab.id.removeprefix("tab-"))

