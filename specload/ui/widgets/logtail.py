"""The server log's tail: the last lines the session read, crash lines highlighted.

Each frame carries the newest lines as ``(seq, line)`` (``tail``, bound to the app's sampled
state about once a second); only lines with a higher sequence number than the last one shown are
written. A log flood is cut to its last ``MAX_PER_PULL``
lines per refresh: a person cannot read faster than that and the UI must stay cheap.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.reactive import var
from textual.widgets import RichLog

# Lines that belong to a crash report, shown in the crash colour (and bold: colour is never alone).
CRASH_LINE = re.compile(
    r"Traceback \(most recent call last\)|^\s+File \"|\b\w*(Error|Exception)\b:|\bFATAL\b|\bCRITICAL\b|"
    r"Segmentation fault|core dumped|terminate called|what\(\):|CUDA error|\bpanicked\b"
)


HANG = "  "  # a wrapped line's continuation is indented by this: each log line reads as one


def hang(line: str, width: int | None) -> str:
    """``line`` wrapped at ``width`` with a hanging indent (as it is when it fits, or no width yet)."""
    if width is None or len(line) <= width:
        return line
    wrapper = textwrap.TextWrapper(width=width, subsequent_indent=HANG, break_on_hyphens=False,
                                   replace_whitespace=False, tabsize=4)
    return "\n".join(wrapper.wrap(line)) or line


class LogTail(RichLog):
    DEFAULT_CSS = """
    LogTail { height: 1fr; background: $surface; color: $text-muted; scrollbar-size-vertical: 1; }
    """
    BORDER_TITLE = "server log"
    MAX_PER_PULL = 200

    tail: var[tuple[tuple[int, str], ...]] = var(())  # (``lines`` is RichLog's own)

    def watch_tail(self, tail: tuple[tuple[int, str], ...]) -> None:
        if tail:
            self.pull(tail)

    def __init__(self, **kwargs: Any) -> None:
        # wrapped at the panel's width (a long line was cut at its edge: a traceback's message is at
        # the end); min_width: RichLog's default of 78 columns would still cut in a narrow panel
        super().__init__(max_lines=1000, wrap=True, min_width=20, markup=False, highlight=False, **kwargs)
        self.can_focus = False
        self.last_seq = 0
        self._wrap_width: int | None = None  # the width lines are wrapped at, once the panel has one

    def on_resize(self, event: events.Resize) -> None:
        super().on_resize(event)  # RichLog learns its size here (writes before it are deferred)
        # wrapped lines keep the width they were written at: written again at the new one (a tab
        # switch at 120x40 changes the panel's width)
        self.call_after_refresh(self._rewrap)  # once the layout has given the region its width

    def _rewrap(self) -> None:
        width = max(20, self.scrollable_content_region.width - 1)  # room for the vertical scrollbar
        if width != self._wrap_width:
            self._wrap_width = width
            if self.tail:
                self.clear()
                self.last_seq = 0
                self.pull(self.tail)

    def pull(self, lines: Iterable[tuple[int, str]]) -> int:
        """Write the lines newer than the last one shown; returns how many were written."""
        last = self.last_seq
        # the deque is ordered by seq: walk back from its end to the first unseen line
        fresh: list[tuple[int, str]] = []
        for seq, line in reversed(lines):  # type: ignore[call-overload]
            if seq <= last:
                break
            fresh.append((seq, line))
            if len(fresh) >= self.MAX_PER_PULL:
                break
        if not fresh:
            return 0
        fresh.reverse()
        crash_style = Style(color=self.app.theme_variables.get("specload-crash-line"), bold=True)
        for _, line in fresh:
            text = hang(line, self._wrap_width)
            self.write(Text(text, style=crash_style) if CRASH_LINE.search(line) else Text(text), width=self._wrap_width)
        self.last_seq = fresh[-1][0]
        return len(fresh)
