"""The run policy: what crashes, a server going down and dying workers do to the load."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from specload.datatypes import CrashEvent, HealthChanged, RunEvent
from specload.headless import HeadlessPrinter
from specload.session.listener import NullListener, SessionListener
from specload.session.policy import RunPolicy
from tests.waiting import until


class FakeRunner:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.paused = False

    def pause(self, why: str = "pause") -> None:
        self.paused = True
        self.calls.append("pause" if why == "pause" else f"pause {why}")

    def cut(self, why: str) -> None:
        self.calls.append(f"cut {why}")

    def resume(self) -> None:
        self.paused = False
        self.calls.append("resume")

    def stop(self, reason: str) -> None:
        self.calls.append(f"stop {reason}")

    def cancel_in_flight(self, reason: str | None = None) -> None:
        self.calls.append("cancel")


def policy(**kw) -> tuple[RunPolicy, FakeRunner, list[str], list[RunEvent]]:
    notices: list[str] = []
    events: list[RunEvent] = []
    opts = {"on_crash": "stop", "down_timeout_s": 30.0, "stay_open": False, "on_worker_death": "continue", **kw}
    p = RunPolicy(**opts, notice=notices.append, event=events.append, now_ns=lambda: 0)
    p.runner = runner = FakeRunner()  # type: ignore[assignment]
    return p, runner, notices, events


def crash(new: bool = True) -> CrashEvent:
    return CrashEvent("sig", "AttributeError", "x", None, (), 1, 0, 0, "", new=new)


@pytest.mark.parametrize(("on_crash", "calls", "end"), [
    ("pause", ["pause crash"], None), ("stop", [], "crashed"), ("continue", [], None)])
def test_a_crash_before_the_load_is_built_follows_the_same_rule(on_crash, calls, end) -> None:
    # issue 22: a crash seen while the prompts were calibrated was ignored (no runner yet): the load
    # ran and the run ended "completed". Now stop ends the start step under way; pause pauses the
    # load as soon as it is built, before its first request
    stopped: list[bool] = []
    p = RunPolicy(on_crash=on_crash, down_timeout_s=30.0, stay_open=False, on_worker_death="continue",
                  notice=lambda _: None, event=lambda _: None, now_ns=lambda: 0, on_stop=lambda: stopped.append(True))
    p.crash(crash())
    assert p.end_reason == end and stopped == ([True] if end else [])
    runner = FakeRunner()
    p.attach(runner)  # type: ignore[arg-type]
    assert runner.calls == calls


@pytest.mark.parametrize(("on_crash", "calls", "end"), [
    ("pause", ["pause crash"], None), ("stop", ["cut crash", "stop crashed", "cancel"], "crashed"), ("continue", [], None)])
def test_a_new_crash_does_what_on_crash_says(on_crash, calls, end) -> None:
    p, runner, _, _ = policy(on_crash=on_crash)
    p.crash(crash(new=False))  # a repeat of a signature already handled changes nothing
    assert runner.calls == []
    p.crash(crash())
    assert runner.calls == calls and p.end_reason == end


def health(value: str) -> RunEvent:
    return HealthChanged(0, value)


async def test_the_load_pauses_while_the_server_is_down_and_resumes_when_it_is_back() -> None:
    p, runner, notices, _ = policy()
    p.health(health("down"), "connection refused")
    assert runner.calls == ["pause server_down"] and p.server_down and notices == ["server down: connection refused"]
    p.health(health("up"), "")
    assert runner.calls == ["pause server_down", "resume"] and notices[-1] == "server up again"
    p.cancel_timers()


async def test_a_user_pause_is_not_undone_when_the_server_comes_back() -> None:
    p, runner, _, _ = policy()
    runner.paused = True
    p.health(health("down"), "x")
    p.health(health("up"), "")
    assert runner.calls == ["cut server_down"]  # the down time is not the level's, the pause stays
    p.cancel_timers()


async def test_down_for_the_timeout_stops_the_run_but_a_crash_before_keeps_its_reason() -> None:
    p, runner, notices, _ = policy(down_timeout_s=0.01)
    p.health(health("down"), "refused")
    await until(lambda: p.end_reason is not None, 5)
    assert p.end_reason == "server down" and "stop stopped" in runner.calls
    assert notices[-1] == "server down for 0.01 s: stopping"

    p, runner, _, _ = policy(down_timeout_s=0.01)
    p.crash(crash())
    p.health(health("down"), "refused")
    await until(lambda: runner.calls.count("cancel") == 2, 5)
    assert p.end_reason == "crashed"  # the first reason wins


async def test_the_tui_stays_open_while_the_server_is_down() -> None:
    p, runner, _, _ = policy(down_timeout_s=0.0, stay_open=True)
    p.health(health("down"), "refused")
    await asyncio.sleep(0.05)  # the timer (0 s) has fired: nothing may have stopped the run
    assert runner.calls == ["pause server_down"] and p.end_reason is None


@pytest.mark.parametrize(("left", "on_death", "stops"), [(1, "continue", False), (0, "continue", True),
                                                          (1, "stop", True)])
def test_a_lost_worker_stops_the_run_only_when_none_is_left_or_asked(left, on_death, stops) -> None:
    p, runner, notices, events = policy(on_worker_death=on_death)
    p.worker_lost(0, "worker 0 (pid 9) was killed by SIGKILL", left)
    assert [e.kind for e in events] == ["worker_lost"] and events[0].value["left"] == left
    assert (p.end_reason == "worker lost") is stops and ("cancel" in runner.calls) is stops
    assert ("stopping" in notices[0]) is stops


@pytest.mark.parametrize("listener", [HeadlessPrinter, NullListener])
def test_front_ends_implement_every_listener_method(listener) -> None:
    from specload.ui.messages import MessageListener

    for cls in (listener, MessageListener):
        for name, method in inspect.getmembers(SessionListener, inspect.isfunction):
            if name.startswith("_"):
                continue
            impl = getattr(cls, name)
            assert list(inspect.signature(impl).parameters) == list(inspect.signature(method).parameters), (cls, name)
