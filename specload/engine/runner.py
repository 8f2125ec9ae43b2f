"""The runner: sends requests according to a plan, with a target concurrency that can change live.

One dispatcher loop starts requests whenever fewer than ``target`` are in flight (closed loop) or
when the next arrival is due (open loop, with ``target`` as the cap). Lowering the target never
cancels in-flight requests: they finish and are not replaced. Controls (pause, hold, next level,
concurrency changes, stop) are plain synchronous methods that set state and wake the dispatcher,
so the TUI and headless mode drive the same object.

The plan's levels run in order; what ends one is a table of end rules (engine/level_end.py) asked
before each start. In drain mode the dispatcher waits for the level's requests before the next. A
concurrency change made by the user starts a new, held "manual" level, so every level has one
concurrency. ``--ramp-up S`` raises a level's concurrency linearly over S seconds, so 10,000
connections do not open in one burst. A ``LevelSource`` (the capacity search) decides levels while
the run goes, ahead of the plan's remaining ones, and may extend a level whose verdict is pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import (
    ConcurrencyChanged,
    ErrorKind,
    LevelStarted,
    LoadAction,
    LoadControl,
    RequestRecord,
    RunEvent,
)
from specload.engine.level_end import (
    Duration,
    EndRule,
    JudgeExtension,
    Level,
    LevelSource,
    MaxDuration,
    MaxRequests,
    Quota,
    ReplayedPauses,
    SearchProbe,
    Step,
)
from specload.engine.load import Arrivals
from specload.engine.prompts import ConversationPrompt, Prompt, PromptSource, prompt_hash
from specload.plan import LevelSpec, LoadPlan
from specload.stats.levels import LevelBook, LevelSummary

MAX_CONCURRENCY = 100_000


def scaled(n: int, factor: float) -> int:
    """``n`` doubled (factor 2) or halved (factor 0.5, rounding down), never below 1."""
    return max(1, min(MAX_CONCURRENCY, round(n * factor) if factor >= 1 else n // round(1 / factor)))


class LoadClient(Protocol):
    """What the runner sends requests through: the in-process ``StreamingClient``, or the pool of
    load workers (``WorkerPool``: processes or Ray actors) that has its interface."""

    on_cancelled: Callable[[RequestRecord], None]  # a cancelled request's record, set by the runner
    # what the client says of itself (the switch to new connections): a record event and a notice
    on_event: Callable[[RunEvent], None]
    on_notice: Callable[[str], None]

    @property
    def worker_loads(self) -> list[tuple[float | None, float | None, float | None]]:
        """Each live load worker's CPU %, loop lag and of it the wait for a CPU (none in-process)."""
        ...

    @property
    def timeline(self) -> dict:
        """How the times of its records sit on this process's clock, for the record's header."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def send(
        self, prompt: str | list[dict], *, request_id: int = 0, level: int = 0, level_index: int = 0,
        warmup: bool = False, max_tokens: int | None = None, prompt_tokens_requested: int | None = None,
        reply: bool = False,
    ) -> RequestRecord: ...


@dataclass(frozen=True, slots=True)
class _Started:
    level: int
    level_index: int
    warmup: bool
    start_ns: int
    turn: bool = False  # a conversation's turn: its session holds the slot, not the request


@dataclass(frozen=True, slots=True)
class RunnerState:
    """What the runner is doing, for the UI's header and progress bar."""

    state: str  # warmup, ramping, holding, paused, draining, finished, stopped, idle
    target: int
    in_flight: int
    level_index: int  # index of the current level (-1 during warm-up)
    level_number: int  # 1-based position in the plan of the current planned level, 0 for manual
    level_count: int  # planned levels
    level_concurrency: int
    level_done: float  # progress of the current level in its unit
    level_total: float | None
    level_unit: str  # "requests" or "s" ("" when held/manual)
    paused: bool
    held: bool
    started: int  # requests started in the whole run
    sourced: bool = False  # the current level comes from a level source (a capacity search probe)
    requested: int = 0  # the concurrency asked for: a manual one not yet picked up, else the target
    plan_done: bool = False  # every planned level has run (what is left is set by hand)


class Runner:
    def __init__(
        self,
        client: LoadClient,
        prompts: PromptSource,
        plan: LoadPlan,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_record: Callable[[RequestRecord], None] | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        on_level: Callable[[LevelSummary], None] | None = None,
        stay_open: bool = False,
        seed: int = 0,
        source: LevelSource | None = None,
        extend: Callable[[int, int], int] | None = None,
        arrivals: Arrivals | None = None,
        before_level: Callable[[int], Awaitable[None]] | None = None,
        on_ramp_end: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        # awaited before each measured level starts (--check-outputs: the prompts begin again, the
        # server's cache is reset)
        self.before_level = before_level
        # a run that stays open: called as it becomes "finished" (the ramp over, nothing in flight),
        # before anyone can see that state (the session writes out the record's batch then)
        self._on_ramp_end = on_ramp_end or (lambda: None)
        self.prompts = prompts
        self.plan = plan
        self.clock = clock
        self._on_record = on_record or (lambda r: None)
        self._on_event = on_event or (lambda e: None)
        self._on_level = on_level or (lambda s: None)
        self.stay_open = stay_open
        self.source = source
        # any level that reached its request count may get more (--target-ci, --until-decided):
        # extend(level_index, started) -> how many more requests to start (0: the level ends)
        self.extend = extend
        self._seed = seed
        # open-loop arrivals: drawn at the plan's rate, or given (a trace's own, engine/trace.py)
        self._arrivals = arrivals or (Arrivals(plan.rate, plan.burstiness, seed) if plan.rate else None)
        self.book = LevelBook()
        client.on_cancelled = self._finished
        self.target = plan.levels[0].concurrency if plan.levels else 1
        self.in_flight = 0
        self.started = 0
        self.paused = False
        self.held = False
        self.state = "idle"
        self.end_reason: str | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        # every request started and not yet handed in: id -> what its record needs if the task
        # ends without one (see _task_done)
        self._open: dict[int, _Started] = {}
        self.lost = 0  # requests whose task failed inside specload (recorded with kind "client")
        self._stop = False
        self._skip = False
        self._manual: int | None = None
        self._manual_rate: float | None = None
        self._cursor = 0
        self._level: Level | None = None  # the level running, or the last one
        self._level_open = False  # it runs (False before the first and while a run that stays open waits)
        self._level_ends: tuple[EndRule, ...] = ()  # the end rules that apply to it
        self._ramp: tuple[int, int] | None = None  # --ramp-up in progress: (its start ns, in flight then)
        self._next_id = 0
        self._time_bound = MaxDuration(plan.max_duration_s, clock, self._end_by_max_duration)
        # what ends a level, asked in this order before each start: the first with a say wins
        self.ends: tuple[EndRule, ...] = (
            ReplayedPauses(self.pause, self.resume),
            SearchProbe(lambda: self.source),
            JudgeExtension(lambda: self.extend),
            Quota(),
            Duration(),
            MaxRequests(plan.max_requests, lambda: self.started, lambda: self.stop("completed")),
            self._time_bound,
        )

    # ---------------------------------------------------------------- controls

    def set_target(self, n: int, *, force: bool = False, rate: float | None = None) -> None:
        """The user sets the concurrency: a new held manual level at ``n`` (with ``force`` even when
        it is the current target: holding the capacity search's best point after its last probe;
        ``rate``: open loop at that rate, ``n`` its cap)."""
        n = max(1, min(MAX_CONCURRENCY, int(n)))
        if n == self.target and self._manual is None and not force:
            return
        self._manual = n
        self._manual_rate = rate
        self._skip = True
        self._wake.set()

    @property
    def plan_done(self) -> bool:
        """Every level of the plan has run (a run that stays open may go on with levels set by hand)."""
        last_running = self._level_open and self._level is not None and self._level.number > 0
        return self._cursor >= len(self.plan.levels) and not last_running

    @property
    def requested(self) -> int:
        """The concurrency asked for: a manual one not yet picked up by the dispatcher, else the target."""
        return self._manual or self.target

    def pause(self, why: str = "pause") -> None:
        """Stop starting requests; ``why`` (pause, crash, server_down) is what the levels running now
        are marked as cut by (their throughput counts their active time only: stats/levels.py)."""
        self.book.cut_begin(why, self.clock.now_ns())
        if not self.paused:
            self.paused = True
            if self._level is not None:
                self._level.stop_clock()
            self._refresh_state()
            self._control("pause", self.target)
            self._wake.set()

    def resume(self) -> None:
        if self.paused:
            self.book.cut_end(self.clock.now_ns())
            self.paused = False
            if self._level is not None:
                self._level.start_clock()
            self._refresh_state()
            self._control("resume", self.target)
            self._wake.set()

    def toggle_pause(self) -> None:
        self.resume() if self.paused else self.pause()

    def set_hold(self, held: bool) -> None:
        if held == self.held:
            return
        self.held = held
        self._refresh_state()
        self._control("hold", held)
        if not held and self._level_open and self._level is not None and self._level.number == 0:
            # releasing the hold of a manual level hands control back to the plan
            self._skip = True
        self._wake.set()

    def toggle_hold(self) -> None:
        self.set_hold(not self.held)

    def set_source(self, source: LevelSource | None) -> None:
        """Hand the levels to ``source`` (the current level ends), or take them back (None)."""
        self.source = source
        if source is not None:
            self._manual = None
            if self.held:
                self.set_hold(False)
            self._skip = True
        self._wake.set()

    def next_level(self) -> None:
        self._skip = True
        self._control("next", self._level.index if self._level is not None else -1)
        self._wake.set()

    def cut_levels(self) -> tuple[LevelSummary, ...]:
        """The levels a cut going on has cut, as they stand (``LevelBook.cut_open``)."""
        return self.book.cut_open(self.clock.now_ns())

    def cut(self, why: str) -> None:
        """The server crashed or went down and the run stops: the time from now does not count in the
        levels still open (their hung requests may take a minute to end)."""
        self.book.cut_begin(why, self.clock.now_ns())

    def stop(self, reason: str = "stopped") -> None:
        """End the run: no new requests; the caller decides whether in-flight ones are cancelled."""
        if self.end_reason is None:
            self.end_reason = reason
        self._stop = True
        self._wake.set()

    def cancel_in_flight(self, reason: str | None = None) -> None:
        """Cancel the requests in flight. ``reason`` (a server's: "server down") travels as the
        cancel message, so a request stuck in a silent server is recorded as the stall it is."""
        for t in list(self._tasks):
            t.cancel(reason)

    async def cancel_and_wait(self) -> None:
        """Cancel the requests in flight and wait until each has handed in its (cancelled) record."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ---------------------------------------------------------------- state

    def snapshot(self) -> RunnerState:
        lv = self._level
        total: float | None = None
        unit = ""
        done: float = 0.0
        if lv is not None and self._level_open and not self.held and (lv.number or lv.sourced):
            if lv.quota is not None:
                total, unit, done = float(lv.quota), "requests", float(lv.started)
            elif lv.spec.duration_s is not None:
                total, unit, done = lv.spec.duration_s, "s", lv.active_s()
        return RunnerState(
            state=self.state,
            target=self.target,
            in_flight=self.in_flight,
            level_index=lv.index if lv is not None else -1,
            level_number=lv.number if lv is not None else 0,
            level_count=len(self.plan.levels),
            level_concurrency=self.target,
            level_done=done,
            level_total=total,
            level_unit=unit,
            paused=self.paused,
            held=self.held,
            started=self.started,
            sourced=lv is not None and lv.sourced,
            requested=self.requested,
            plan_done=self.plan_done,
        )

    def _set_state(self) -> None:
        if self._stop:
            self.state = "stopped"
        elif self.paused:
            self.state = "paused"
        elif self._level_open and self._level is not None and self._level.warmup:
            self.state = "warmup"
        elif self.held:
            self.state = "holding"
        else:
            self.state = "ramping"

    def _refresh_state(self) -> None:
        # a control takes effect on the state at once, not when the dispatcher next wakes
        if self.state in ("ramping", "holding", "paused", "warmup"):
            self._set_state()

    def _control(self, action: LoadAction, arg: int | bool) -> None:
        self._on_event(LoadControl(self.clock.now_ns(), action, arg))

    # ---------------------------------------------------------------- the loop

    async def run(self) -> str:
        try:
            if self.plan.warmup_requests and (self.plan.levels or self.source is not None):
                warm = LevelSpec(self.target, self.plan.warmup_requests, None)
                await self._run_level(Level(warm, -1, self.clock, warmup=True))
            index = 0
            while not self._stop:
                manual = self._manual
                sourced = None
                if manual is None and self.source is not None:
                    sourced = await self.source.next_level(index)
                    if self._stop:
                        break
                    if sourced is None:
                        self.source = None  # the source is done: the plan goes on
                if manual is not None:
                    self._manual = None
                    self.held = True
                    spec, number = LevelSpec(manual, rate=self._manual_rate), 0
                    self._manual_rate = None
                elif sourced is not None:
                    spec, number = sourced, 0
                elif self._cursor < len(self.plan.levels):
                    spec, number = self.plan.levels[self._cursor], self._cursor + 1
                    self._cursor += 1
                elif self.stay_open:
                    # the ramp is over; the TUI stays and waits for the user to set a concurrency
                    self.state = "finished" if self.in_flight == 0 else "draining"
                    if self.state == "finished":
                        self._on_ramp_end()
                    self._level_open = False
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                else:
                    break
                if self.before_level is not None:
                    await self.before_level(index)
                await self._run_level(Level(spec, index, self.clock, number=number, sourced=sourced is not None))
                index += 1
            if self.end_reason is None:
                self.end_reason = "completed"
        finally:
            if self._tasks:
                # stop() without cancel: let in-flight requests finish (bounded by their timeouts)
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            for summary in self.book.flush():
                if summary.level_index >= 0:
                    self._on_level(summary)
            self.state = "finished" if self.end_reason == "completed" else "stopped"
        return self.end_reason or "completed"

    async def _run_level(self, level: Level) -> None:
        """Start the level's requests as arrivals and concurrency allow until an end rule ends it."""
        arrivals = self._begin(level)
        while True:
            self._set_state()
            if self._stop or self._skip:
                break
            level.held = self.held and not level.warmup
            step = await self._end_step(level)
            if step is Step.END:
                break
            if step is Step.AGAIN:
                continue
            if self.paused or self.in_flight >= self.target:
                await self._sleep_until_woken(self._due_in_s(level))
                continue
            if (ramp_wait := self._ramp_wait_s()) is not None:
                await self._sleep_until_woken(self._due_in_s(level, ramp_wait))
                continue
            if arrivals is not None and (wait := arrivals.wait_s(self.clock.now_ns())) > 0:
                await self._sleep_until_woken(self._due_in_s(level, wait))
                continue
            self._launch(level)
        await self._end(level)

    async def _end(self, level: Level) -> None:
        """The level ended: in drain mode (and after the warm-up) its requests are waited for, within
        the run's bound, before its summary."""
        level.stop_clock()
        drain = self.plan.drain_between_levels if level.spec.drain is None else level.spec.drain
        if (level.warmup or drain) and not self._stop:
            self.state = "draining"
            while self.book.in_flight(level.index) > 0 and not self._stop and not self._time_bound.over():
                await self._sleep_until_woken(self._time_bound.left_s())
        for summary in self.book.close(level.index):
            if summary.level_index >= 0:
                self._on_level(summary)

    def _begin(self, level: Level) -> Arrivals | None:
        """The level begins: its clock, concurrency and record line; its arrivals when open loop."""
        spec = level.spec
        self._level, self._level_open = level, True
        self._level_ends = tuple(rule for rule in self.ends if rule.applies(level))
        if not self.paused:
            level.start_clock()
        self._skip = False
        base = min(self.in_flight, spec.concurrency)
        self._ramp = (self.clock.now_ns(), base) if self.plan.ramp_up_s > 0 and spec.concurrency > base else None
        if spec.concurrency != self.target:
            self.target = spec.concurrency
            self._on_event(ConcurrencyChanged(self.clock.now_ns(), self.target))
        if not level.warmup:
            manual = level.number == 0 and not level.sourced if spec.manual is None else spec.manual
            self._on_event(LevelStarted(self.clock.now_ns(), level.index, spec.concurrency, manual, spec.repeat,
                                        spec.rate, level.sourced))
        rate = spec.rate if spec.rate is not None else self.plan.rate
        self.book.open(level.index, spec.concurrency, rate, self.clock.now_ns())
        if not rate:
            return None
        if self._arrivals is None:
            self._arrivals = Arrivals(rate, self.plan.burstiness, self._seed)
        self._arrivals.rate = rate
        self._arrivals.restart()
        return self._arrivals

    def _ramp_wait_s(self) -> float | None:
        """While ``--ramp-up`` paces the level: how long until one more request may be in flight
        (None: one may start now). The cap rises from the in-flight count at the level's start
        to the target in equal steps over the ramp; the first step is at once."""
        if self._ramp is None:
            return None
        t0, base = self._ramp
        span_s, steps = self.plan.ramp_up_s, self.target - base
        elapsed = (self.clock.now_ns() - t0) / 1e9
        if elapsed >= span_s or steps <= 0:
            self._ramp = None
            return None
        allowed = base + 1 + int(steps * elapsed / span_s)  # requests allowed in flight now
        if self.in_flight < allowed:
            return None
        return span_s * (allowed - base) / steps - elapsed

    async def _end_step(self, level: Level) -> Step:
        for rule in self._level_ends:
            step = await rule.check(level)
            if step is not Step.GO:
                return step
        return Step.GO

    def _due_in_s(self, level: Level, *more: float) -> float | None:
        """How long the dispatcher may sleep: until an end rule may have a say (or ``more``: the next arrival)."""
        due = [*more, *(d for rule in self._level_ends if (d := rule.due_in_s(level)) is not None)]
        return min(due) if due else None

    def _end_by_max_duration(self) -> None:
        # the bound is on the whole run: requests still in flight (stalled ones too) are cancelled
        self.stop("completed")
        self.cancel_in_flight()

    async def _sleep_until_woken(self, timeout: float | None) -> None:
        self._wake.clear()
        if timeout is None:
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    def _launch(self, level: Level) -> None:
        session = self.prompts.multi_turn and not level.warmup
        rid = self._request(level, turn=session)
        self.in_flight += 1  # one slot of the concurrency: a request, or a whole conversation
        if session:
            self.book.started(level.index)  # the session holds its level open until its last turn
            current = [rid]
            task = asyncio.ensure_future(self._conversation(self.prompts.next_conversation(), level, current))
            task.add_done_callback(functools.partial(self._session_done, level.index, current))
        else:
            prompt = self.prompts.next()
            task = asyncio.ensure_future(self._one(prompt, rid, level.index, level.spec.concurrency, level.warmup))
            task.add_done_callback(functools.partial(self._task_done, rid))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _request(self, level: Level, *, turn: bool = False) -> int:
        """A request of the level begins: its id, counted in the level and the run."""
        rid = self._next_id
        self._next_id += 1
        level.started += 1
        if not level.warmup:
            self.started += 1
        self.book.started(level.index)
        self._open[rid] = _Started(level.spec.concurrency, level.index, level.warmup, self.clock.now_ns(), turn)
        return rid

    async def _conversation(self, conv: ConversationPrompt, level: Level, current: list[int]) -> None:
        """``--multi-turn``: one session's user turns in order, each sent with the history so far (the
        server's replies included), ``--think-time`` apart; the level's figures get each turn. A failed
        turn ends the conversation (there is no reply to go on from), as does the run's stop."""
        history = [] if conv.system is None else [{"role": "system", "content": conv.system}]
        for n, text in enumerate(conv.turns, 1):
            if n > 1:
                await asyncio.sleep(self.prompts.think_s())
                while self.paused and not self._stop:  # no new request while paused
                    await asyncio.sleep(0.05)
                if self._stop:
                    return
                current[0] = self._request(level, turn=True)
            history.append({"role": "user", "content": text})
            rec = await self.client.send(list(history), request_id=current[0], level=level.spec.concurrency,
                                         level_index=level.index, max_tokens=conv.max_tokens, reply=True)
            reply = rec.reply
            rec = replace(rec, category=conv.category, conversation=conv.number, turn=n, reply=None)
            if conv.ident is not None:  # --check-outputs: the turn, and all it was sent (an earlier answer too)
                rec = replace(rec, prompt_id=f"{conv.ident}:t{n}", prompt_sha=prompt_hash(json.dumps(history)))
            self._finished(rec)
            if not rec.ok:
                return
            history.append({"role": "assistant", "content": reply or ""})

    def _session_done(self, level_index: int, current: list[int], task: asyncio.Task) -> None:
        """A conversation ended, however: its open turn (if any) gets its record, its slot and its
        hold on the level are given back."""
        self._task_done(current[0], task)
        self.in_flight -= 1
        for summary in self.book.done(level_index):
            if summary.level_index >= 0:
                self._on_level(summary)
        self._wake.set()

    async def _one(self, prompt: Prompt, rid: int, level_index: int, concurrency: int, warmup: bool) -> None:
        rec = await self.client.send(
            prompt.body(), request_id=rid, level=concurrency, level_index=level_index, warmup=warmup,
            max_tokens=prompt.max_tokens, prompt_tokens_requested=prompt.tokens_requested,
        )
        if prompt.category is not None:  # the prompt's, not the client's: every client and worker kind alike
            rec = replace(rec, category=prompt.category)
        if prompt.ident is not None:  # --check-outputs: which prompt it was
            rec = replace(rec, prompt_id=prompt.ident[0], prompt_sha=prompt.ident[1])
        self._finished(rec)

    def _task_done(self, rid: int, task: asyncio.Task) -> None:
        """Every request task ends here, however it ended. One that did not hand in its record (an
        exception inside the client, a cancellation before it started) gets one now: a request
        sent is never lost from the record, its slot never leaks and no drain waits for it."""
        if rid not in self._open:
            if not task.cancelled():
                task.exception()  # retrieved: a session's failure after its last record says nothing more
            return
        if task.cancelled():
            kind, detail = ErrorKind.CANCELLED, "cancelled by specload"
        else:
            exc = task.exception()  # retrieved here: no "exception was never retrieved" on stderr
            kind = ErrorKind.CLIENT
            detail = f"request failed inside specload: {type(exc).__name__}: {exc}".replace("\n", " ")[:300]
            self.lost += 1
        s = self._open[rid]
        now = self.clock.now_ns()
        self._finished(RequestRecord(
            request_id=rid, level=s.level, level_index=s.level_index, warmup=s.warmup, start_ns=s.start_ns,
            end_ns=now, ttft_ns=None, e2e_ns=None, output_tokens=0, tokens_estimated=True, prompt_tokens=None,
            chunks=0, error_kind=kind, error_detail=detail,
        ))

    def _finished(self, rec: RequestRecord) -> None:
        s = self._open.pop(rec.request_id, None)
        if s is None:
            return  # already handed in: exactly one record per request
        if not s.turn:
            self.in_flight -= 1
        self._on_record(rec)
        for summary in self.book.add(rec):
            if summary.level_index >= 0:  # the warm-up (-1) is never a level of the table
                self._on_level(summary)
        self._wake.set()
