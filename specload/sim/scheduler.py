"""The simulator's continuous-batching scheduler: one chain of event-loop timers advances every running
sequence, with no task or sleep per request, so hundreds of streams stay cheap on two cores.

Two timing regimes share the bookkeeping: the batch model (one step clock; admitted prefills slow
the step; a FIFO queue beyond ``max_batch``; seeded noise; late timers caught up, not stretched) and
pinned timing (``ttft_ms``/``itl_ms``: exact per-sequence deadlines for tests). ``freeze`` is the
simulated crash; ``on_admit`` serves llama.cpp's slot log line and its ``prompt_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import time
from collections import deque
from collections.abc import Callable

from specload.sim.config import SimConfig
from specload.sim.greedy import Greedy
from specload.sim.model import StepDraw, decode_step_s, draw_step, jitter, prefill_s, request_accept_rate

# The batch model's step clock runs on its own schedule (the simulated GPU does not slow down because
# the event loop woke late): each step is due a step's time after the previous one was *due*, so a
# late timer is caught up instead of stretching every later step. Only after a longer stall (a
# stopped process, a frozen machine) does the clock restart from now, so as not to burst steps.
_CATCH_UP_S = 0.25
# Deadlines closer than this to "now" are served in the same tick: timers fire up to ~1 ms late or,
# rarely, a hair early, and splitting one logical step over two ticks would be pure overhead.
_DUE_SLACK_S = 0.0002


class Counters:
    """Engine-wide counters behind /metrics, the periodic log line and ``SimServer.stats``."""

    __slots__ = (
        "generation_tokens",
        "prompt_tokens",
        "drafts",
        "draft_tokens",
        "accepted_tokens",
        "accepted_per_pos",
        "verify_steps",
        "prompt_eval_tokens",
        "prompt_eval_s",
        "decode_calls",
        "busy_slot_steps",
    )

    def __init__(self, spec_tokens: int) -> None:
        self.generation_tokens = 0
        self.prompt_tokens = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.accepted_per_pos = [0] * spec_tokens
        self.verify_steps = 0  # decode steps, all sequences; the denominator of accept length
        # llama.cpp's view: prompts count when their processing ends (first token), not on arrival,
        # and time is the slot's processing time, queueing excluded
        self.prompt_eval_tokens = 0
        self.prompt_eval_s = 0.0
        self.decode_calls = 0  # model passes (llamacpp:n_decode_total)
        self.busy_slot_steps = 0  # sequences advanced, summed over passes (n_busy_slots_per_decode)

    def count(self, d: StepDraw, first: bool, spec_tokens: int) -> None:
        self.generation_tokens += d.tokens
        if first:
            return
        self.verify_steps += 1
        if spec_tokens:
            self.drafts += 1
            self.draft_tokens += spec_tokens
            self.accepted_tokens += d.accepted
            per = self.accepted_per_pos
            for i in range(d.accepted):
                per[i] += 1


class Sequence:
    """One request's generation state, shared by the scheduler (producer) and its handler."""

    __slots__ = (
        "rid",
        "prompt_tokens",
        "cached_tokens",
        "max_tokens",
        "ignore_eos",
        "rng",
        "arrival",
        "admitted_at",
        "slot",
        "task",
        "first_token_at",
        "last_token_at",
        "completion_tokens",
        "verify_steps",
        "accepted",
        "finish_reason",
        "pending",
        "waiter",
        "cancelled",
        "due",
        "accept_rate",
        "accept_mean",
        "eos_prob",
        "generated",
        "greedy",
        "logprobs",
    )

    def __init__(
        self,
        rid: str,
        prompt_tokens: int,
        max_tokens: int,
        ignore_eos: bool,
        rng: random.Random,
        arrival: float,
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0  # of those, served by the prefix cache: not prefilled
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.rng = rng
        # measurement times are time.perf_counter(): uvloop's loop.time() only has ms resolution.
        # Scheduling deadlines (call_at) stay on loop.time().
        self.arrival = arrival  # when the request was accepted
        self.admitted_at: float | None = None  # when it left the queue for a batch slot
        self.slot = -1  # llamacpp flavour: the slot id shown in its log lines
        self.task = -1  # llamacpp flavour: the task id
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.completion_tokens = 0
        self.verify_steps = 0
        self.accepted = 0
        self.finish_reason: str | None = None
        self.pending: list[StepDraw] = []  # drawn but not yet written by the handler
        self.waiter: asyncio.Future[None] | None = None
        self.cancelled = False
        self.due = 0.0
        self.accept_rate: float | None = None  # drawn at the first step (it needs the config)
        # the request's category's mean acceptance and EOS chance (model.request_profile; None: the config's)
        self.accept_mean: float | None = None
        self.eos_prob: float | None = None
        self.generated: list[str] | None = None  # the answer's text, kept for a prefix cache (else None)
        self.greedy: Greedy | None = None  # temperature 0: the text is the prompt's (greedy.py)
        self.logprobs = False  # a sampled request that asked for logprobs

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def advance(self, cfg: SimConfig, now: float, counters: Counters, batch: int = 1) -> StepDraw:
        """Draw and record this sequence's next step (the scheduler and max-speed mode both use it);
        ``batch``: the sequences its forward pass serves (a greedy text's near-ties flip with it)."""
        first = self.completion_tokens == 0
        if first and cfg.spec_tokens and cfg.accept_spread > 0.0:
            self.accept_rate = request_accept_rate(self.rng, cfg, self.accept_mean)
        elif first:
            self.accept_rate = self.accept_mean
        d = draw_step(
            self.rng,
            cfg,
            remaining=self.max_tokens - self.completion_tokens,
            ignore_eos=self.ignore_eos,
            first=first,
            accept_rate=self.accept_rate,
            eos_prob=self.eos_prob,
            greedy=self.greedy,
            shape=batch if first else batch * (1 + cfg.spec_tokens),
            logprobs=self.logprobs,
        )
        if first:
            self.first_token_at = now
            counters.prompt_eval_tokens += self.prompt_tokens - self.cached_tokens
            counters.prompt_eval_s += now - (self.arrival if self.admitted_at is None else self.admitted_at)
        elif cfg.spec_tokens:
            # SGLang's spec_verify_ct: 0 when speculation is off
            self.verify_steps += 1
            self.accepted += d.accepted
        self.last_token_at = now
        self.completion_tokens += d.tokens
        if self.generated is not None:
            self.generated.append(d.text)
        if d.finish_reason is not None:
            self.finish_reason = d.finish_reason
        counters.count(d, first, cfg.spec_tokens)
        return d

    async def next_steps(self) -> list[StepDraw]:
        """Wait until the scheduler has produced at least one step, then take all produced so far."""
        while not self.pending:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        out, self.pending = self.pending, []
        return out


class Scheduler:
    def __init__(self, cfg: SimConfig, counters: Counters) -> None:
        self.cfg = cfg
        self.counters = counters
        self._loop = asyncio.get_running_loop()
        self._running: dict[int, Sequence] = {}  # id(seq) -> seq, insertion ordered
        self._waiting: deque[Sequence] = deque()
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._timer_due = 0.0
        self._kick: asyncio.Handle | None = None
        self._frozen = False
        # batch model: the step in flight (decoding, prefilling) and when it is due to end
        self._step: tuple[list[Sequence], list[Sequence]] | None = None
        self._step_due: float | None = None
        # pinned: (due, tie-break, seq)
        self._heap: list[tuple[float, int, Sequence]] = []
        self._tie = itertools.count()
        self.extra_running = 0  # max-speed sequences, which bypass the scheduler
        self.on_admit: Callable[[Sequence], None] | None = None
        # the batch model's step and prefill noise: a stream of its own, seeded from the server's seed
        # (per-request draws stay keyed by request, so they do not depend on step timing)
        self._noise = random.Random(None if cfg.seed is None else f"{cfg.seed}:steps")

    # --- gauges -------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._running) + self.extra_running

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def kv_tokens(self) -> int:
        return sum(s.prompt_tokens + s.completion_tokens for s in self._running.values())

    # --- requests -----------------------------------------------------------------------------

    def submit(self, seq: Sequence) -> None:
        if self._frozen:
            self._waiting.append(seq)  # never admitted: the crashed server just hangs
            return
        self.counters.prompt_tokens += seq.prompt_tokens
        if self.cfg.pinned:
            if len(self._running) < self.cfg.max_batch:
                self._admit_pinned(seq, self._loop.time())
                self._arm_pinned()
            else:
                self._waiting.append(seq)
            return
        self._waiting.append(seq)
        if self._timer is None and self._kick is None:
            # call_soon, not a direct call: arrivals in the same loop iteration share one prefill
            self._kick = self._loop.call_soon(self._start_step)

    def cancel(self, seq: Sequence) -> None:
        """The handler is gone (client left, injected fault): free the slot."""
        if seq.cancelled:
            return
        seq.cancelled = True
        if self._running.pop(id(seq), None) is not None:
            if self.cfg.pinned:
                self._fill_slots_pinned(self._loop.time())
                self._arm_pinned()
        else:
            with contextlib.suppress(ValueError):
                self._waiting.remove(seq)

    def freeze(self) -> None:
        self._frozen = True
        for h in (self._timer, self._kick):
            if h is not None:
                h.cancel()
        self._timer = self._kick = None

    # --- batch model --------------------------------------------------------------------------

    def _start_step(self, after: float | None = None) -> None:
        """Start the next step; ``after``: when the previous step was due to end (None: from idle)."""
        self._kick = None
        self._timer = None
        if self._frozen:
            return
        cfg = self.cfg
        decoding = list(self._running.values())
        admitted: list[Sequence] = []
        while self._waiting and len(decoding) + len(admitted) < cfg.max_batch:
            admitted.append(self._waiting.popleft())
        if not decoding and not admitted:
            self._step = None
            return  # idle until the next submit
        dur = decode_step_s(cfg, len(decoding)) * jitter(self._noise, cfg.step_jitter) if decoding else 0.0
        if admitted:
            # one batched prefill pass for everything admitted at this boundary
            dur += prefill_s(cfg, sum(s.prompt_tokens - s.cached_tokens for s in admitted)) * jitter(
                self._noise, cfg.prefill_jitter)
        now = time.perf_counter()
        for s in admitted:
            self._running[id(s)] = s
            self._admitted(s, now)
        self._step = (decoding, admitted)
        now_loop = self._loop.time()
        base = after if after is not None and now_loop - after < _CATCH_UP_S else now_loop
        self._step_due = base + dur
        self._timer = self._loop.call_at(self._step_due, self._end_step)

    def _end_step(self) -> None:
        self._timer = None
        step, self._step = self._step, None
        if self._frozen or step is None:
            return
        now = time.perf_counter()
        decoding, admitted = step
        cfg, counters = self.cfg, self.counters
        counters.decode_calls += 1
        batch = len(decoding) + len(admitted)
        for group in (decoding, admitted):
            for s in group:
                if s.cancelled:
                    continue
                counters.busy_slot_steps += 1
                self._deliver(s, s.advance(cfg, now, counters, batch))
                if s.finish_reason is not None:
                    self._running.pop(id(s), None)
        self._start_step(self._step_due)

    # --- pinned -------------------------------------------------------------------------------

    def _admitted(self, seq: Sequence, now: float) -> None:
        seq.admitted_at = now
        if self.on_admit is not None:
            self.on_admit(seq)

    def _admit_pinned(self, seq: Sequence, t0: float) -> None:
        self._running[id(seq)] = seq
        # admitted at t0 on the schedule (a freed slot's instant), also when this call comes late:
        # its prefill runs from there, so prompt_ms is the pinned prefill, not the prefill less the delay
        self._admitted(seq, time.perf_counter() - max(0.0, self._loop.time() - t0))
        seq.due = t0 + prefill_s(self.cfg, seq.prompt_tokens - seq.cached_tokens)
        heapq.heappush(self._heap, (seq.due, next(self._tie), seq))

    def _fill_slots_pinned(self, t0: float) -> None:
        while self._waiting and len(self._running) < self.cfg.max_batch:
            self._admit_pinned(self._waiting.popleft(), t0)

    def _arm_pinned(self) -> None:
        if self._frozen:
            return
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        if not heap:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        due = heap[0][0]
        if self._timer is not None:
            # the due time is kept by us: uvloop returns a plain Handle (no when()) for past times
            if self._timer_due <= due:
                return
            self._timer.cancel()
        self._timer_due = due
        self._timer = self._loop.call_at(due, self._tick_pinned)

    def _tick_pinned(self) -> None:
        self._timer = None
        if self._frozen:
            return
        now_loop = self._loop.time()
        now = time.perf_counter()
        cfg, counters, heap = self.cfg, self.counters, self._heap
        # one tick is one model pass over the sequences due in it
        advanced = 0
        while heap and heap[0][0] <= now_loop + _DUE_SLACK_S:
            due, _, s = heapq.heappop(heap)
            if s.cancelled:
                continue
            advanced += 1
            self._deliver(s, s.advance(cfg, now, counters, len(self._running)))
            if s.finish_reason is not None:
                self._running.pop(id(s), None)
                # the freed slot goes to the head of the queue at the instant it freed
                self._fill_slots_pinned(due)
            else:
                s.due = due + decode_step_s(cfg, len(self._running))
                heapq.heappush(heap, (s.due, next(self._tie), s))
        if advanced:
            # a late tick (a busy machine) serves in one go sequences that freed and refilled a slot
            # meanwhile: more than max_batch of them are more than one model pass
            counters.decode_calls += -(-advanced // cfg.max_batch)
            counters.busy_slot_steps += advanced
        self._arm_pinned()

    # --- delivery -----------------------------------------------------------------------------

    @staticmethod
    def _deliver(s: Sequence, d: StepDraw) -> None:
        s.pending.append(d)
        w = s.waiter
        if w is not None and not w.done():
            w.set_result(None)
