"""Modal screens: typing an exact concurrency, a marker note, the key help, a crash's full excerpt and
the per-category verdicts against a --baseline.

All share ``Modal`` (the look, and escape to cancel). Each returns its answer through ``dismiss`` and
the app applies it, so the screens know nothing of the session. Bad input (a concurrency that is not a positive whole number) keeps the modal open with
a notice; nothing typed can raise.
"""

from __future__ import annotations

from typing import TypeVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from specload.datatypes import CrashEvent
from specload.engine.runner import MAX_CONCURRENCY
from specload.formatting import clock
from specload.ui.keys import KeyTaker

T = TypeVar("T")


class Modal(KeyTaker, ModalScreen[T]):
    """The dialogs' common look and behaviour: centred on a dimmed dashboard, a titled box, escape
    cancels (answers None). They take their keys from the app's queue, in order (``ui/keys.py``)."""

    DEFAULT_CSS = """
    Modal { align: center middle; background: $background 60%; }
    Modal > Vertical {
        width: 60; max-width: 95%; height: auto; max-height: 90%;
        border: thick $primary; background: $panel; padding: 1 2;
    }
    Modal .modal-title { text-style: bold; margin: 0 0 1 0; }
    Modal .modal-hint { color: $text-muted; margin: 1 0 0 0; }
    Modal .modal-error { color: $error; text-style: bold; width: 1fr; }
    Modal Label { max-width: 100%; }
    /* a dialog is not covered by information toasts (the start-up one took half of it at 80x24);
       they are back when it closes, and warnings and errors (a crash) show over it */
    Modal Toast.-information { display: none; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit(event.value)


def parse_concurrency(text: str) -> int | None:
    """A positive whole number within the runner's limit, or None."""
    text = text.strip()
    if not text.isdigit():
        return None
    n = int(text)
    return n if 1 <= n <= MAX_CONCURRENCY else None


class ConcurrencyScreen(Modal[int | None]):
    def __init__(self, current: int | None) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Set concurrency", classes="modal-title")
            yield Input(
                value="" if self.current is None else str(self.current),
                placeholder=f"a whole number from 1 to {MAX_CONCURRENCY}",
                id="conc-input",
            )
            yield Label("", id="conc-error", classes="modal-error")
            # the limit is said before anything is typed (a cut error line once hid it)
            yield Label(f"1 to {MAX_CONCURRENCY} · enter: apply · escape: cancel", classes="modal-hint")

    def submit(self, value: str) -> None:
        n = parse_concurrency(value)
        if n is None:
            msg = f"{value.strip()!r} is not a concurrency: type a whole number from 1 to {MAX_CONCURRENCY}"
            self.query_one("#conc-error", Label).update(msg)
            self.notify(msg, severity="warning", title="concurrency")
            return
        self.dismiss(n)

class MarkerScreen(Modal[str | None]):
    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Marker", classes="modal-title")
            yield Input(placeholder="optional note (what you just changed on the server)", id="marker-input")
            yield Label("enter: add the marker to the record · escape: cancel", classes="modal-hint")

    def submit(self, value: str) -> None:
        self.dismiss(value.strip())  # an empty note is a valid marker


KEYS_HELP = (
    ("↑ / +", "concurrency +1 (a held manual level)"),
    ("↓ / -", "concurrency -1"),
    ("]  /  [", "double / halve the concurrency"),
    ("c", "type an exact concurrency"),
    ("space", "pause / resume sending"),
    ("n", "next level of the ramp"),
    ("h", "hold the current level / resume the ramp"),
    ("m", "marker with an optional note (into the record)"),
    ("e", "crash excerpts"),
    ("v", "verdicts by category against --baseline (shown at the ramp's end)"),
    ("f", "capacity search from the current load (--slo objectives) / stop it"),
    ("b", "hold the load at the best point the search found"),
    ("← / →", "switch panel (small terminals)"),
    ("ctrl+p", "command palette (colours: its 'Theme' entry)"),
    ("?", "this help"),
    ("q", "quit (in-flight requests recorded as cancelled)"),
)


class HelpScreen(Modal[None]):
    """The keys, as one table in one widget: a label per key and per line (50 widgets) made opening
    the help cost the UI's process a fifth of a second of CPU beside a run at full speed; a line too
    long for the box wraps under its own column."""

    DEFAULT_CSS = """
    HelpScreen > Vertical { width: 72; }
    HelpScreen VerticalScroll { height: auto; max-height: 55vh; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "cancel", "Close")]

    def compose(self) -> ComposeResult:
        from rich.table import Table
        from rich.text import Text

        accent = f"bold {self.app.theme_variables.get('accent', '')}"
        keys = Table.grid()
        keys.add_column(width=10, no_wrap=True)
        keys.add_column(ratio=1)
        for key, what in KEYS_HELP:
            keys.add_row(Text(key, style=accent), what)
        with Vertical():
            yield Label("Keys", classes="modal-title")
            with VerticalScroll():
                yield Static(keys, id="help-keys")
            yield Label("escape or ?: close", classes="modal-hint")

class CrashScreen(Modal[None]):
    """Every crash signature on the left; the highlighted one's full excerpt on the right."""

    DEFAULT_CSS = """
    CrashScreen > Vertical { width: 95%; height: 90%; max-height: 90%; border: thick $error; padding: 0 1; }
    CrashScreen .modal-title { color: $error; }
    CrashScreen Horizontal { height: 1fr; }
    CrashScreen OptionList { width: 40; max-width: 40%; height: 1fr; }
    CrashScreen VerticalScroll { width: 1fr; height: 1fr; background: $surface; }
    CrashScreen #crash-head { width: 1fr; height: auto; margin-bottom: 1; }
    CrashScreen #crash-excerpt { width: auto; }
    CrashScreen .modal-hint { margin: 0; }
    """
    BINDINGS = [Binding("escape,q,e", "cancel", "Close")]

    def __init__(self, crashes: list[CrashEvent], t0_ns: int) -> None:
        super().__init__()
        self.crashes = crashes
        self.t0_ns = t0_ns

    def compose(self) -> ComposeResult:
        with Vertical():
            n = len(self.crashes)
            yield Label(f"✖ Server crashes ({n} root cause{'s' if n != 1 else ''})", classes="modal-title")
            with Horizontal():
                yield OptionList(
                    *[
                        Option(f"{c.exception_type} ×{c.count} (+{clock((c.first_seen_ns - self.t0_ns) / 1e9)})", id=str(i))
                        for i, c in enumerate(self.crashes)
                    ]
                )
                with VerticalScroll():
                    # the head wraps (the whole message, at any width); the excerpt keeps its lines
                    yield Static("", id="crash-head", markup=False)
                    yield Static("", id="crash-excerpt", markup=False)
            yield Label("↑/↓: choose · escape: close", classes="modal-hint")

    def on_mount(self) -> None:
        if self.crashes:
            self.query_one(OptionList).highlighted = len(self.crashes) - 1
            self.show(len(self.crashes) - 1)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index is not None:
            self.show(event.option_index)

    def show(self, i: int) -> None:
        c = self.crashes[i]
        where = f"\nat {c.innermost_frame}" if c.innermost_frame else ""
        procs = f"\nprocesses: {', '.join(c.processes)}" if c.processes else ""
        first = clock((c.first_seen_ns - self.t0_ns) / 1e9)
        times = f"{c.count} failure{'s' if c.count != 1 else ''}"
        head = f"{c.exception_type}: {c.message}{where}{procs}\n{times} · first seen +{first} · signature {c.signature}"
        for x in c.consequences:
            on = f" on {', '.join(x.processes)}" if x.processes else ""
            head += f"\nthen {x.exception_type}: {x.message}{on}" + (f" (×{x.count})" if x.count > 1 else "")
        self.query_one("#crash-head", Static).update(head)
        self.query_one("#crash-excerpt", Static).update(c.excerpt)


class CategoryScreen(Modal[None]):
    """``--baseline`` with a dataset's categories, at the ramp's end: each category judged against the
    baseline, level by level, in ``report BASE RUN``'s tables (a mix may win on code, lose on chat)."""

    DEFAULT_CSS = """
    CategoryScreen > Vertical { width: 95%; padding: 0 1; }
    CategoryScreen VerticalScroll { height: auto; max-height: 1fr; }
    """
    BINDINGS = [Binding("escape,q,v", "cancel", "Close")]

    def __init__(self, tables: list) -> None:  # rich Tables
        super().__init__()
        self.tables = tables

    def compose(self) -> ComposeResult:
        from rich.console import Group

        with Vertical():
            yield Label("Verdicts by category against the baseline", classes="modal-title")
            with VerticalScroll():
                yield Static(Group(*self.tables), id="category-tables")
            yield Label("escape: close · v: show again", classes="modal-hint")
