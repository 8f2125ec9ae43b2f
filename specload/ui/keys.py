"""Keys handled in the order they arrive, however many come in one read of the terminal.

Textual sends a key to the widget or screen that has focus *when the app dispatches it*, and that
widget handles it later, in its own queue. Keys that arrive together (one read over ssh, auto-repeat,
an app busy for a moment) are all dispatched before the first is handled, so a key that changes the
screen races the keys after it: after ``c`` opened the concurrency dialog, the ``7`` typed with it
had already gone to the dashboard and was lost (``'' is not a concurrency``), and an ``up`` after
``enter`` reached a dialog that was closing.

The rule here: each of our keys is handled in the app's own queue, one at a time, to the end:

* the dashboard's keys are priority bindings (the app checks them before it forwards anything),
  enabled only while the dashboard is the screen shown (``SpecloadApp.check_action``);
* an action that opens a dialog waits until the dialog is mounted (``open_modal``), so the next key
  finds it;
* our dialogs take their keys from the app (``KeyTaker.take_key``, called from the app's
  ``on_event``): typing, editing, submitting and closing happen in order, and a dialog's result is
  applied before the key after ``enter`` is looked at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.screen import Screen
from textual.widgets import Input
from textual.widgets.input import Selection

if TYPE_CHECKING:
    from textual.app import App


class KeyTaker:
    """A screen that handles its keys from the app's queue (mixed into our modal screens)."""

    def submit(self, value: str) -> None:
        """What ``enter`` in the screen's field does (a screen with a field defines it)."""

    async def take_key(self, event: events.Key) -> bool:
        """Handle ``event`` now; False leaves it to Textual's routing (a focused list's arrows)."""
        screen: Screen = self  # type: ignore[assignment]
        for binding in screen._bindings.key_to_bindings.get(event.key, ()):
            if await screen.app.run_action(binding.action, screen):
                return True
        field = next(iter(screen.query(Input)), None)
        if field is None:
            return False
        if event.key == "enter":
            # not the field's own submit, which posts a message the screen would handle after the
            # app has looked at the next key
            self.submit(field.value)
            return True
        if event.is_printable and event.character:
            # as the field does itself: a character replaces the selection (all of it when opened)
            if field.selection.is_empty:
                field.insert_text_at_cursor(event.character)
            else:
                field.replace(event.character, *field.selection)
            return True
        for binding in field._bindings.key_to_bindings.get(event.key, ()):  # backspace, arrows, home, ...
            if await screen.app.run_action(binding.action, field):
                return True
        return False


async def open_modal(app: App, screen: Screen, callback=None) -> None:  # Textual's callback type
    """Push ``screen`` and return once it is mounted, its input (if any) focused: the keys that came
    with the one that opened it find it. Call from an action run by a priority binding (the app's
    queue), or the next keys are already on their way elsewhere."""
    await app.push_screen(screen, callback)
    field = next(iter(screen.query(Input)), None)
    if field is not None:
        screen.set_focus(field)  # at once: Widget.focus() waits for the app's next turn
        if field.select_on_focus:  # what the field's own focus handler does, later
            field.selection = Selection(0, len(field.value))


async def take_key(app: App, event: events.Event) -> bool:
    """From the app's ``on_event``: a key for one of our dialogs, handled in order; True if taken."""
    if not isinstance(event, events.Key) or event.is_forwarded:
        return False
    screen = app.screen
    if not isinstance(screen, KeyTaker):
        return False
    # the app's own keys that work in a dialog (ctrl+c quits) stay the app's
    if any(b.priority and app.check_action(b.action.partition("(")[0], ())
           for b in app._bindings.key_to_bindings.get(event.key, ())):
        return False
    return await screen.take_key(event)
