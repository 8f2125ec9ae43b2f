"""The one forwarder (``session/listener.py``): a protocol's every method, by name, to one function.

It replaced three ``__getattr__`` forwarders (the local source's relay, the UI loop's queue, the
engine process's wire), which took any name: a misspelt method was forwarded, and failed (or did
nothing) on the far side. Now the methods are the protocol's own, and nothing else exists.
"""

from __future__ import annotations

import inspect

import pytest

from specload.session.listener import NullListener, SessionListener, forwarding_listener
from specload.sources.frame import RunControl, forwarding_control


def _methods(protocol: type) -> set[str]:
    return {n for n, v in vars(protocol).items() if not n.startswith("_") and inspect.isfunction(v)}


def test_every_listener_method_is_forwarded_by_name_with_its_arguments_in_order() -> None:
    calls: list[tuple[str, tuple]] = []
    listener = forwarding_listener(lambda name, args: calls.append((name, args)))
    assert {n for n in dir(listener) if not n.startswith("_")} == _methods(SessionListener)
    assert _methods(SessionListener) == _methods(NullListener)  # the no-op listener has them all too
    listener.notice("server up")
    listener.client_load("load", level=4)  # a keyword argument arrives in its place
    listener.target_found("http://h", None, "chat")
    assert calls == [("notice", ("server up",)), ("client_load", ("load", 4)),
                     ("target_found", ("http://h", None, "chat"))]


def test_a_misspelt_method_does_not_exist_and_wrong_arguments_fail_where_they_are_made() -> None:
    listener = forwarding_listener(lambda name, args: None)
    with pytest.raises(AttributeError):
        listener.notic("x")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        listener.notice("x", "y")  # type: ignore[call-arg]


def test_every_control_command_is_forwarded_and_a_default_stays_the_far_sides() -> None:
    calls: list[tuple[str, tuple]] = []
    control = forwarding_control(lambda name, args: calls.append((name, args)))
    assert {n for n in dir(control) if not n.startswith("_")} == _methods(RunControl)
    control.set_target(8)
    control.find_max(None)
    control.quit()
    control.quit(sig=15)
    assert calls == [("set_target", (8,)), ("find_max", (None,)), ("quit", ()), ("quit", (15,))]
