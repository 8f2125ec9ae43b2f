"""What a session tells its front end: one typed method per kind of happening.

The headless printer implements ``SessionListener`` directly; the TUI's adapter turns each call into a
typed message (or, for state, nothing: state reaches the screen through the snapshot). Every method is
called synchronously in the session's event loop, so an implementation must be quick and must not
block: print a line, post a message, append to a list.

``NullListener`` implements every method as a no-op; subclass it and override what you need.
``forwarding_listener`` hands every call, by name, to one function (to another listener later, onto
another loop, over a socket); ``forwarder`` builds such an object for any protocol of methods.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from specload.datatypes import CrashEvent, RunEvent
    from specload.session.policy import SessionResult
    from specload.stats.client_load import ClientLoad
    from specload.stats.levels import LevelSummary


class SessionListener(Protocol):
    def phase(self, phase: str) -> None:
        """The session moved on: ``starting``, ``waiting for server``, ``running``, ``finished``."""

    def notice(self, text: str) -> None:
        """One line for the user (server started, server down, waiting for the server); secrets masked."""

    def target_found(self, url: str, model: str | None, api: str) -> None:
        """The server answers and its API (and model) are known: the load is about to start."""

    def run_event(self, event: RunEvent) -> None:
        """A change recorded as an ``event`` line: level, concurrency, pause, marker, health, ..."""

    def level_done(self, summary: LevelSummary) -> None:
        """A level's statistics are final."""

    def crash(self, crash: CrashEvent) -> None:
        """A crash signature, new (``crash.new``) or seen again with a higher count."""

    def client_load(self, load: ClientLoad, level: int) -> None:
        """specload's own CPU and loop lag, every second, with the concurrency it was measured at."""

    def ended(self, result: SessionResult) -> None:
        """The run is over: the record is closed and the server stopped."""


class NullListener:
    """A ``SessionListener`` that ignores everything; subclass it to hear only some things."""

    def phase(self, phase: str) -> None:
        pass

    def notice(self, text: str) -> None:
        pass

    def target_found(self, url: str, model: str | None, api: str) -> None:
        pass

    def run_event(self, event: RunEvent) -> None:
        pass

    def level_done(self, summary: LevelSummary) -> None:
        pass

    def crash(self, crash: CrashEvent) -> None:
        pass

    def client_load(self, load: ClientLoad, level: int) -> None:
        pass

    def ended(self, result: SessionResult) -> None:
        pass


_FORWARDERS: dict[type, type] = {}


def forwarder(protocol: type, forward: Callable[[str, tuple], object]) -> Any:
    """An object with every public method of ``protocol`` (a ``Protocol`` of methods), each of which
    hands its name and its arguments (positional, as the protocol orders them) to ``forward``. Typed
    by the caller as the protocol, a misspelt method is a type error (mypy); at run time, an
    ``AttributeError``. The methods come from the protocol itself: one added there is forwarded."""
    cls = _FORWARDERS.get(protocol)
    if cls is None:
        methods = {name: _forwarding(name, inspect.signature(fn)) for name, fn in vars(protocol).items()
                   if not name.startswith("_") and inspect.isfunction(fn)}
        cls = _FORWARDERS[protocol] = type(f"Forwarding{protocol.__name__}", (), {"__slots__": ("_forward",),
                                                                                 **methods})
    obj = cls()
    obj._forward = forward
    return obj


def _forwarding(name: str, signature: inspect.Signature) -> Callable[..., None]:
    def method(self: Any, *args: object, **kwargs: object) -> None:
        self._forward(name, signature.bind(self, *args, **kwargs).args[1:])

    method.__name__ = method.__qualname__ = name
    return method


def forwarding_listener(forward: Callable[[str, tuple], object]) -> SessionListener:
    """A ``SessionListener`` whose every call goes to ``forward(name, args)``."""
    listener: SessionListener = forwarder(SessionListener, forward)
    return listener
