"""Server crashes: one row per root cause, kept in place as counts grow, with an alert on a new one.

A failure prints more than its cause (the parent's sigquit line, exit notices): the watch groups those
under the root cause (``CrashEvent.consequences``), so a row is one cause, its count the failures it
caused. What a person needs at a glance is the type, the message, how often and on which ranks, at every
terminal size: the count and ranks columns are narrow and come before the message, which takes the rest
of the width and wraps over up to ``MESSAGE_LINES`` lines (more in a narrow column; the last one names the
consequences, if any).
The widths follow the panel's size, so a resize re-lays the rows. "First seen" and the full excerpt open
in a modal screen (key ``e``).
"""

from __future__ import annotations

import textwrap

from textual import events
from textual.reactive import var

from specload.datatypes import CrashEvent
from specload.stats.live import StatsSnapshot
from specload.ui.widgets.keyed import KeyedTable

CRASH_COLUMNS = (("type", "type"), ("count", "count"), ("procs", "ranks"), ("message", "message"))
MESSAGE_LINES = 3  # rows grow up to this many lines
MESSAGE_LINES_NARROW = 5  # ... or this many when the message column is narrower than 40
TYPE_MAX = 24
PROCS_MAX = 18


class _Wrapper(textwrap.TextWrapper):
    """``textwrap`` that breaks a word longer than the column (an identifier, a dotted path) after
    one of its own separators when it can, not at whatever character the column ends on:
    ``'draft_model_`` / ``runner'``, not ``'draft_m`` / ``odel_runner'``. Such a word fills the end of
    a line only up to a separator; else it starts the next line (cut at the width there only when it
    has no separator that fits)."""

    SEPARATORS = "_./:"

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str], cur_len: int, width: int) -> None:
        chunk = reversed_chunks[-1]
        space_left = max(width - cur_len, 1)
        cut = max(chunk.rfind(sep, 0, space_left) for sep in self.SEPARATORS) + 1
        if cut > 0:
            cur_line.append(chunk[:cut])
            reversed_chunks[-1] = chunk[cut:]
        elif not cur_line:  # a line of its own, and no separator within it: cut at the width
            super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)
        # else: nothing here; the word starts the next line, where this is asked again


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def crash_procs(c: CrashEvent, width: int = PROCS_MAX) -> str:
    if not c.processes:
        return "–"
    procs = ", ".join(c.processes)
    if len(procs) <= width:
        return procs
    more = f"… ({len(c.processes)})"
    return procs[: max(1, width - len(more))] + more


def crash_message_lines(c: CrashEvent, width: int, lines: int | None = None) -> list[str]:
    """The message wrapped to ``width``; with consequences, the last line says what followed. A narrow
    column (the wide layout's crash panel is a third of the screen) gets more lines."""
    width = max(8, width)
    if lines is None:
        lines = MESSAGE_LINES if width >= 40 else MESSAGE_LINES_NARROW
    then = ""
    if c.consequences:
        kinds = ", ".join(dict.fromkeys(x.exception_type for x in c.consequences))
        then = "↳ then " + kinds
        if len(then) > width:  # a narrow column keeps the consequence's name whole, not the "then"
            then = "↳ " + kinds
    room = lines - (1 if then else 0)
    wrapped = _Wrapper(width).wrap(c.message or "(no message)") or [""]
    if len(wrapped) > room:
        wrapped = wrapped[:room]
        wrapped[-1] = _clip(wrapped[-1] + " …", width) if len(wrapped[-1]) + 2 <= width else _clip(wrapped[-1], width)
    if then:
        wrapped.append(_clip(then, width))
    return wrapped


def crash_type(c: CrashEvent, width: int) -> str:
    """The type; in a narrow column without the mark, then without its module path (the excerpt view
    has it all)."""
    short = c.exception_type.split("(")[0].rsplit(".", 1)[-1]
    for text in ("✖ " + c.exception_type, c.exception_type, "✖ " + short):
        if len(text) <= width:
            return text
    return _clip(short, width)


def crash_cells(c: CrashEvent, type_w: int, procs_w: int, message_w: int) -> tuple[str, ...]:
    return (
        crash_type(c, type_w),
        str(c.count),
        crash_procs(c, procs_w),
        "\n".join(crash_message_lines(c, message_w)),
    )


class CrashTable(KeyedTable):
    DEFAULT_CSS = """
    CrashTable { height: 1fr; background: $surface; }
    CrashTable > .datatable--header { color: $text-muted; }
    CrashTable.-has-crashes > .datatable--header { color: $error; }
    CrashTable.-alert { background: $specload-flash; }
    """
    BORDER_TITLE = "crashes (e: excerpt)"
    # laid out here (the widths follow the panel and the rows grow with the message), not by KeyedTable
    COLUMNS = ()

    snapshot: var[StatsSnapshot | None] = var(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.t0_ns = 0
        self._widths: tuple[int, int, int] | None = None
        self.crashes: dict[str, CrashEvent] = {}

    def _layout(self) -> tuple[int, int, int]:
        """(type, ranks, message) widths for the panel's current width; count is 5 wide. The message
        keeps most of a narrow panel: type and ranks get what they need up to a share of it."""
        # each column carries one blank of padding on either side
        inner = self.scrollable_content_region.width - 2 * len(CRASH_COLUMNS)
        types = [len(c.exception_type) + 2 for c in self.crashes.values()] or [12]
        procs = [len(crash_procs(c, PROCS_MAX)) for c in self.crashes.values()] or [5]
        type_w = min(max(types + [4]), TYPE_MAX, max(10, int(inner * 0.35)))
        procs_w = min(max(procs + [5]), PROCS_MAX, max(6, int(inner * 0.2)))
        return type_w, procs_w, max(10, inner - type_w - 5 - procs_w)

    def _relayout(self) -> None:
        widths = self._layout()
        if widths == self._widths and self.columns:
            return
        self._widths = widths
        type_w, procs_w, message_w = widths
        self.clear(columns=True)
        self._shown.clear()
        for (key, label), w in zip(CRASH_COLUMNS, (type_w, 5, procs_w, message_w), strict=True):
            self.add_column(label, key=key, width=w)
        self.columns_shown = CRASH_COLUMNS
        for c in self.crashes.values():
            self._put(c)

    def on_mount(self) -> None:
        self._relayout()

    def on_resize(self, _event: events.Resize) -> None:
        self._relayout()

    def _put(self, c: CrashEvent) -> None:
        assert self._widths is not None
        cells = crash_cells(c, *self._widths)
        old = self._shown.get(c.signature)
        if old == cells:
            return
        height = cells[3].count("\n") + 1
        if old is None or old[3].count("\n") + 1 != height:
            if old is not None:
                self.remove_row(c.signature)  # a row's height is fixed when added
            self.add_row(*cells, key=c.signature, height=height)
            self._shown[c.signature] = cells
        else:
            self.show(c.signature, cells)

    def show_crash(self, c: CrashEvent) -> None:
        new_type = c.signature not in self.crashes
        self.crashes[c.signature] = c
        if self._widths is None:
            return  # not mounted yet: on_mount lays it out
        if new_type and self._layout() != self._widths:
            self._relayout()  # a longer type or ranks list: the columns change
        else:
            self._put(c)

    def watch_snapshot(self, snap: StatsSnapshot | None) -> None:
        if snap is None:
            return
        for c in snap.crashes:
            if self.crashes.get(c.signature) != c:
                self.show_crash(c)
        self.set_class(bool(self.crashes), "-has-crashes")
        # nothing to show in the crash and error panels: the wide grid gives their row's room to the
        # levels and the log (at 160x48 they sat mostly empty)
        self.app.query_one("Dashboard").set_class(not snap.crashes and not snap.errors_by_kind, "-quiet")

    def flash(self, seconds: float = 2.0) -> None:
        self.add_class("-alert")
        self.set_timer(seconds, lambda: self.remove_class("-alert"))
