"""``ValueLabel``: a label for a number refreshed on every sample, without re-running the layout.

``Label.update`` re-runs the screen's layout by default (the new text might change the widget's size),
which at 4 Hz on a large screen was most of the UI's CPU. Value labels have a size fixed by their CSS,
so they repaint only, and only when the text actually changed.
"""

from __future__ import annotations

from textual.widgets import Label


class ValueLabel(Label):
    def __init__(self, text: str = "", **kwargs: object) -> None:
        super().__init__(text, **kwargs)  # type: ignore[arg-type]
        self._text = text

    def show(self, text: str, *, sized: bool = False) -> None:
        """``sized``: the label is as wide as its text (``width: auto``), so a new length re-runs the layout."""
        if text != self._text:
            layout = sized and len(text) != len(self._text)
            self._text = text
            self.update(text, layout=layout)
