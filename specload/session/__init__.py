"""The composition root: one run, built from one ``RunConfig``, shared by the TUI and headless mode.

``Session.run`` does four things in order under one TaskGroup: start the server (or find it), build
the engine (discover the API, the client, the runner; open the record; start the server watch), run
the load, and tear everything down in the order ``_teardown`` spells out, whatever happened. The
parts are elsewhere: the server supervisor, the log watch and the server watch (``watch/``), the
record sink (``record/sink.py``), the crash/down/worker rules (``policy.py``) and the listener
protocol (``listener.py``). The session routes what they report to the live stats, the record, the
policy and the front end.

Front ends talk to it the same way: controls are the runner's methods (``runner``), continuous state
is pulled (``snapshot``, ``runner_state``, ``state_label``, ``log_lines``), discrete happenings are
pushed to a ``SessionListener``. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from specload.clock import SYSTEM_CLOCK, Clock
from specload.config import RunConfig
from specload.datatypes import Marker, Noted
from specload.engine import answers
from specload.engine.answers import OutputCheck
from specload.engine.capacity import SearchView
from specload.engine.probe import TargetError, discover, server_info, wait_answered
from specload.engine.prompts import PromptError, PromptSource
from specload.engine.runner import LoadClient, Runner, RunnerState
from specload.engine.search import SearchResult
from specload.exitcode import ExitCode
from specload.plan import Lengths
from specload.record.sink import RecordError, RecordSink
from specload.secrets import Scrubber
from specload.session import search
from specload.session.fanout import Fanout
from specload.session.listener import NullListener, SessionListener
from specload.session.policy import RunPolicy
from specload.stats.levels import LevelSummary
from specload.stats.live import LiveStats, StatsSnapshot
from specload.stats.live_judge import LiveJudge, LiveView
from specload.stats.lossless import LiveOutputs, OutputsView
from specload.warmup import after_load, settle_before_load
from specload.watch.gpu import is_local
from specload.watch.logwatch import LogWatch
from specload.watch.serverwatch import ServerWatch
from specload.watch.supervisor import ServerStartError, ServerSupervisor

if TYPE_CHECKING:
    from specload.record.runs import Run

T = TypeVar("T")

__all__ = ["Session", "SessionError", "SessionListener", "SessionResult", "NullListener"]

# the run's end reason -> exit status (interrupted: by the signal, see _exit_code)
_EXIT = {"completed": ExitCode.OK, "crashed": ExitCode.CRASHED, "server down": ExitCode.SERVER_DOWN,
         "worker lost": ExitCode.WORKER_LOST, "diverged": ExitCode.DIVERGED}
# the run's end reason -> the record's end line
_END_LINE = {"server down": "stopped", "worker lost": "stopped"}


@dataclass(frozen=True, slots=True)
class SessionResult:
    reason: str  # completed, interrupted, stopped, crashed, server down, worker lost, error
    exit_code: int
    levels: tuple[LevelSummary, ...]
    message: str | None = None  # one line for the user when reason == "error"
    search: SearchResult | None = None  # the capacity search's result (the last one, in the TUI)


class SessionError(Exception):
    """A run that cannot start; the message is one line for the user."""


class Session:
    def __init__(self, cfg: RunConfig, *, clock: Clock = SYSTEM_CLOCK, listener: SessionListener | None = None,
                 stay_open: bool = False, on_crash: str | None = None, handle_signals: bool = False,
                 down_timeout_s: float | None = None) -> None:
        self.cfg, self.clock, self.stay_open, self.handle_signals = cfg, clock, stay_open, handle_signals
        self.listener: SessionListener = listener or NullListener()
        self.stats = LiveStats(clock)
        self.t0_ns = self.stats.t0
        self.scrub = Scrubber(cfg.secret_values())  # never on screen, in the record or a request error
        self.runner: Runner | None = None
        self.client: LoadClient | None = None  # once built
        self.url, self.model = cfg.target.url, cfg.target.model
        self.api: str | None = None  # the flavour discovery settled on
        self.phase = "starting"  # starting, waiting for server, running, finished
        self.signal: int | None = None  # the signal that interrupted the run, if one did
        self.record = RecordSink(cfg.record, clock=clock, t0_ns=self.t0_ns, scrub=self.scrub,
                                 on_error=self._record_failed, on_notice=lambda text: self.fan.notice(text))
        self.fan = fan = Fanout(stats=self.stats, record=self.record, listener=self.listener, scrub=self.scrub,
                                now_ns=clock.now_ns, gpu_interval_s=cfg.watch.metrics_interval_s)
        self.capacity = fan.capacity = search.capacity_part(cfg, stay_open=stay_open, clock=clock, t0_ns=self.t0_ns,
                                                            on_event=fan.search_event)
        w = cfg.watch
        self.policy = fan.policy = RunPolicy(
            on_crash=on_crash or w.on_crash, down_timeout_s=w.down_timeout_s if down_timeout_s is None else down_timeout_s,
            stay_open=stay_open, on_worker_death=cfg.on_worker_death, notice=fan.notice, event=fan.event,
            now_ns=clock.now_ns)
        self.policy.capacity = self.capacity
        self.policy.on_divergence = cfg.compare.on_divergence
        self.supervisor = ServerSupervisor(cfg, on_notice=fan.notice, scrub=self.scrub)
        self.logs = LogWatch(w, clock=clock, scrub=self.scrub, on_crash=fan.crash, on_server=fan.server,
                             on_notice=fan.notice)
        self.logs.observers.append(self.supervisor.observe_line)
        self.watch: ServerWatch | None = None
        self.judge: LiveJudge | None = None  # --baseline, --target-ci, --until-decided
        self._starting: asyncio.Future | None = None
        self._background: list[asyncio.Task] = []
        self._prompts: PromptSource | None = None  # the record's flush loop, the launched server's exit watch
        self.outputs: LiveOutputs | None = None  # --check-outputs with --baseline

    # ------------------------------------------------------------------ what front ends read and do

    on_crash = property(lambda self: self.policy.on_crash)
    log_lines = property(lambda self: self.logs.lines)
    log_seq = property(lambda self: self.logs.seq)
    notices = property(lambda self: self.fan.notices)

    def snapshot(self) -> StatsSnapshot:
        return self.stats.snapshot()

    def runner_state(self) -> RunnerState | None:
        return self.runner.snapshot() if self.runner is not None else None

    def state_label(self) -> str:
        if self.phase != "running" or self.runner is None:
            return self.phase
        return "server down" if self.policy.server_down else self.runner.state

    def live_view(self) -> LiveView | None:
        """The running level against its goal (--target-ci) and the baseline (--baseline), or None."""
        if self.judge is None or self.runner is None:
            return None
        rs = self.runner.snapshot()
        return self.judge.view(rs.level_index) if rs.level_index >= 0 else None

    def search_view(self) -> SearchView | None:
        return self.capacity.view() if self.capacity is not None else None

    def start_search(self, *, start: float | None = None) -> bool:
        """A capacity search now (the TUI's key); False when there is no run to search on."""
        if self.capacity is None or self.runner is None or self.phase != "running":
            return False
        search.start_search(self.cfg, self.capacity, self.runner, start=start)
        return True

    def stop_search(self, *, hold_best: bool = False) -> SearchResult | None:
        return search.stop_search(self.cfg, self.capacity, self.runner, hold_best=hold_best) if self.capacity else None

    def workload_warnings(self) -> list[str]:
        """What about the run's workload weakens what it measured, one line each: speculative decoding
        on synthetic prompts, with ignore_eos or without the chat template; dataset prompts sent again."""
        out = list(self.fan.workload_warnings)
        p = self._prompts
        if p is not None and p.dataset is not None and p.sent > p.rows:
            what = "conversations" if p.multi_turn else "requests"
            out.append(f"the run sent {p.sent:,} {what} from {p.rows:,} dataset rows: prompts were sent again, "
                       "and a prefix cache served the repeats from their first time")
        return out

    def marker(self, note: str = "") -> None:
        self.fan.event(Marker(self.clock.now_ns(), note))

    def interrupt(self, reason: str = "interrupted") -> None:
        """Quit: no new requests, in-flight ones recorded as cancelled, the record closed."""
        self.policy.interrupt(reason)
        if self._starting is not None:  # still waiting for the server (it may load for minutes)
            self._starting.cancel()

    def signalled(self, sig: int) -> None:
        """SIGINT, SIGTERM, SIGHUP: quit as 'q' does; the exit status says which (128 + signal)."""
        self.signal = self.signal or sig
        self.interrupt()

    # ------------------------------------------------------------------ the run

    async def run(self) -> SessionResult:
        if self.handle_signals:
            # SIGHUP: the terminal went away; the launched server, in a session of its own, would be
            # left running and the record without its end line
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    asyncio.get_running_loop().add_signal_handler(sig, self.signalled, sig)
        _check_fd_limit(self.cfg, self.fan.notice)
        if self.cfg.target.url_dropped:
            self.fan.notice(f"the URL's {self.cfg.target.url_dropped!r} is not used: specload sends to "
                            f"{self.cfg.target.url} + /v1/chat/completions, /v1/completions or /generate itself")
        outcome: tuple[str, int, str | None] = ("error", ExitCode.ERROR, None)
        try:
            async with asyncio.TaskGroup() as tg:
                try:
                    outcome = await self._run(tg)
                except (TargetError, RecordError, PromptError, SessionError, ServerStartError) as e:
                    outcome = ("error", ExitCode.ERROR, str(e))
                finally:
                    after_load()
                    await self._teardown()
        except* Exception as eg:  # noqa: BLE001 - a programming error in one of the run's tasks: end cleanly, say it
            first = eg.exceptions[0]
            outcome = ("error", ExitCode.ERROR, f"internal error: {type(first).__name__}: {first}")
        return self._finish(*outcome)

    async def _run(self, tg: asyncio.TaskGroup) -> tuple[str, int, str | None]:
        await self._until_interrupted(self._start_server(tg))
        runner = None if self.policy.interrupted else await self._until_interrupted(self._build(tg))
        if runner is None:
            return "interrupted", self._exit_code("interrupted"), None
        settle_before_load()
        self._set_phase("running")
        ran = await runner.run() if self.policy.end_reason is None else None  # None: a quit while building
        reason = self.policy.end_reason or ran or "completed"
        if reason == "interrupted" and self.stay_open and self.signal is None:
            reason = self._quit_reason()
        if self.capacity is not None:
            self.capacity.run_ended(reason)
        return reason, self._exit_code(reason), None

    def _quit_reason(self) -> str:
        """The user quit a run that stays open (the TUI): the record and the exit status say what had
        happened by then, as a headless run's would. A TUI record once ended ``interrupted`` even
        after the ramp finished, and after a crash its exit status was 3 with the record saying
        ``interrupted``."""
        if self.stats.snapshot().crashes:
            return "crashed"
        if self.policy.server_down:
            return "server down"
        r = self.runner
        searching = self.capacity is not None and self.capacity.searching
        if r is not None and r.plan_done and not searching:
            return "completed"
        return "interrupted"

    async def _until_interrupted(self, step: Coroutine[Any, Any, T]) -> T | None:
        """A step that may wait for minutes (a server loading, Ray joining a cluster), in a task of its
        own so that a quit cancels just that wait; its errors are the run's, not the group's."""
        self._starting = asyncio.ensure_future(step)
        try:
            return await self._starting
        except asyncio.CancelledError:
            if not self.policy.interrupted:
                raise
            return None
        finally:
            self._starting = None

    async def _start_server(self, tg: asyncio.TaskGroup) -> None:
        launched = await self.supervisor.spawn()
        if launched is not None:
            self._set_phase("waiting for server")
        self.logs.start(tg, launched)
        self.url = await self.supervisor.wait_ready()
        for pattern, line in await self.logs.expected():
            self.fan.event(Noted(self.clock.now_ns(), "expect", {"pattern": pattern, "seen": line is not None}))
            self.fan.notice(f"expected log line {pattern!r}: " + ("seen" if line is not None else "NOT seen"))

    async def _build(self, tg: asyncio.TaskGroup) -> Runner:
        cfg, url, fan = self.cfg, self.url, self.fan
        assert url is not None
        headers, probes, notes = cfg.request_headers(), list[dict](), list[str]()
        server = self.supervisor.launched if cfg.watch.launch else None
        wait = functools.partial(wait_answered, url, timeout_s=cfg.watch.ready_timeout_s, headers=headers,
                                 alive=lambda: server is not None and server.running)
        try:  # a launched server is ready once it answers a real request, not at its first health 200
            if server is not None:
                await wait()
            api, self.model = await discover(url, api=cfg.target.api, model=cfg.target.model, headers=headers,
                                             sent=probes, notes=notes)
            if server is not None:
                await wait(api=api, model=self.model, sent=probes)
        finally:
            if probes:  # the server saw (and counts) these requests: say so in the record
                fan.event(Noted(self.clock.now_ns(), "probe", {"requests": probes}))
        for note in notes:  # a server that does not stream: said before the load, not after it
            fan.notice(note)
            fan.warned_unstreamed = True
        self.api = api
        if cfg.watch.launch:  # what the server says about itself (its args, version, properties)
            fan.event(Noted(self.clock.now_ns(), "server_info", await server_info(url, headers)))
        self.listener.target_found(url, self.model, api)
        r = cfg.request
        prompts = PromptSource.from_options(
            prompt=r.prompt, prompt_file=r.prompt_file, dataset=r.dataset, dataset_format=r.dataset_format,
            trace=r.trace, trace_block_tokens=r.trace_block_tokens, nonce=r.prompt_nonce,
            prompt_tokens=Lengths.parse(r.prompt_tokens),
            output_lengths=Lengths.parse(r.max_tokens_dist) if r.max_tokens_dist else None, output_len=r.output_len,
            ignore_eos=r.ignore_eos, max_tokens=r.max_tokens, shared_prefix_tokens=r.shared_prefix_tokens, seed=cfg.seed,
            multi_turn=r.multi_turn, think_time=r.think_time, identify=r.check_outputs)
        if prompts.synthetic:
            await self._calibrate_prompts(prompts, url, headers)
        if not prompts.synthetic or prompts.trace is not None:
            fan.notice(prompts.summary())
        self._prompts = prompts
        check = await self._check_outputs(url, headers, prompts) if r.check_outputs else None
        cfg = self.cfg  # --check-outputs settled --logprobs
        self.client = client = _client(cfg, url, api, self.model, headers, self.clock, self.stats, self.scrub,
                                       self.policy.worker_lost)
        client.on_event, client.on_notice = fan.event, fan.notice  # the switch to new connections
        await _start_client(client, cfg)
        # --find-max: the search decides every level; the ramp's levels only give it its start
        plan = dataclasses.replace(cfg.plan, levels=()) if cfg.capacity.find_max else cfg.plan
        arrivals = None
        if prompts.trace is not None:  # one level: the trace's requests at its own times (engine/trace.py)
            from specload.engine.trace import TraceArrivals, trace_plan

            plan = trace_plan(plan, prompts.trace, r.trace_speed)
            arrivals = TraceArrivals(prompts.trace, r.trace_speed)
        from specload.record.runs import description_from_header

        fan.workload_shape = description_from_header(self._header()).request_shape()
        baseline = _baseline(cfg)
        self.judge = fan.judge = _judge(cfg, self.t0_ns, fan.workload_shape, baseline)
        if self.judge is not None and self.judge.differences:
            fan.notice("--baseline: unsound, no verdicts: the workloads differ: " + ", ".join(self.judge.differences))
        if check is not None and baseline is not None:
            self.outputs = fan.outputs = _live_outputs(baseline, fan.notice)
        extend = self.judge.extend if self.judge is not None and self.judge.judging else None
        self.runner = self.policy.runner = Runner(
            client, prompts, plan, clock=self.clock, on_record=fan.request, on_event=fan.event,
            on_level=fan.level, stay_open=self.stay_open, seed=cfg.seed, extend=extend, arrivals=arrivals,
            before_level=check.before_level if check is not None else None)
        if self.capacity is not None and cfg.capacity.find_max:
            search.search_from_the_start(cfg, self.capacity, self.runner)
        fan.tg = tg
        self.record.open(self._header())
        self._background = [tg.create_task(self.record.flush_loop()),
                            tg.create_task(self.supervisor.watch_exit(fan.server_exit))]
        self.watch = fan.watch = ServerWatch(
            cfg.watch, url, clock=self.clock, on_health=fan.health, on_server=fan.server,
            on_client_load=fan.client_load, on_notice=fan.notice, worker_loads=lambda: client.worker_loads,
            on_gpu=fan.gpu, on_gpu_fault=fan.gpu_fault,
            server_local=self.supervisor.command() is not None or is_local(url))
        await self.watch.start(tg)
        return self.runner

    async def _check_outputs(self, url: str, headers: dict[str, str], prompts: PromptSource) -> OutputCheck:
        """--check-outputs: ask the server once whether it returns logprobs and how its cache is reset
        (engine/answers.py), settle --logprobs, and say what the run will do."""
        from specload.engine.api import build_body

        assert self.api is not None
        r, sent = self.cfg.request, list[dict]()
        support = await answers.probe(url, self.api, build_body(self.api, "Say hello.", r, self.model), headers,
                                      timeout_s=min(30.0, self.cfg.target.request_timeout_s or 30.0), sent=sent)
        logprobs = support.logprobs if r.logprobs is None else r.logprobs
        self.cfg = dataclasses.replace(self.cfg, request=dataclasses.replace(r, logprobs=logprobs))
        self.fan.event(Noted(self.clock.now_ns(), "check_outputs", {
            "logprobs": logprobs, "logprobs_returned": support.logprobs, "reset": support.reset,
            "reset_missing": support.detail or None, "requests": sent}))
        said = [f"checking outputs at temperature {r.temperature:g}: the same prompts at every level"]
        if logprobs and support.logprobs:
            said.append("logprobs on (each divergence's margin tells a near-tie from a bug)")
        elif logprobs:
            said.append("the server returned no logprobs: a divergence cannot be told from a near-tie")
        else:
            said.append("no logprobs: answers compared by text, a divergence cannot be told from a near-tie")
        said.append(f"the server's prefix cache is reset before each level ({answers.RESET_CALLS[support.reset]})"
                    if support.reset else f"no cache reset ({support.detail})")
        self.fan.notice("; ".join(said))
        return answers.OutputCheck(url, headers, support, prompts, on_event=self.fan.event, on_notice=self.fan.notice,
                                   now_ns=self.clock.now_ns)

    def outputs_view(self) -> OutputsView | None:
        """--check-outputs with --baseline: the answers compared so far."""
        return self.outputs.view() if self.outputs is not None else None

    async def _calibrate_prompts(self, prompts: PromptSource, url: str, headers: dict[str, str]) -> None:
        """Size synthetic prompts in the server's own tokens (engine/calibrate.py); the requests this
        sends reach the server's counters, so they are recorded, as the API probe's are. With
        ``--tokens-per-word`` the user's figure is taken and nothing is sent."""
        from specload.engine.calibrate import calibrate
        from specload.engine.prompts import TokenModel

        assert self.api is not None
        sent: list[dict] = []
        given = self.cfg.request.tokens_per_word
        model = (TokenModel("given", given, 0.0, given, detail="--tokens-per-word: not calibrated") if given
                 else await calibrate(url, self.api, self.model, headers=headers, sent=sent, seed=self.cfg.seed))
        prompts.set_model(model)
        self.fan.event(Noted(self.clock.now_ns(), "calibration", {"prompts": model.describe(), "requests": sent}))
        if model.method in ("guess", "given"):
            self.fan.notice(f"prompt lengths: {model.detail}")
        else:
            self.fan.notice(f"prompt lengths in the server's tokens: {model.per_word:.2f} tokens a word, "
                            f"{model.overhead:.0f} added by the server ({model.detail})")

    async def _teardown(self) -> None:
        """The order matters: requests recorded as cancelled first; the last /metrics and log lines
        read while the server still runs; the watchers stopped before the detector is flushed (its
        crashes get recorded); the server stopped last. The record is closed after all of it."""
        if self.runner is not None:
            await self.runner.cancel_and_wait()
        if self.capacity is not None:
            self.capacity.run_ended(self.policy.end_reason or "stopped")
        if self.fan.level_chain is not None:  # the last levels' goodput and server figures, before the record closes
            await asyncio.gather(self.fan.level_chain, return_exceptions=True)
        if self.watch is not None and self.phase == "running" and not self.policy.server_down:
            await self.watch.final_scrape()  # a server found down would only cost its 3 s timeout
        await self.logs.drain()
        self.fan.running = False
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.watch is not None:
            await self.watch.stop()
        await self.logs.stop()
        self.logs.finish()
        self.policy.cancel_timers()
        if self.client is not None:
            await self.client.close()
        await self.supervisor.stop()
        self._set_phase("finished", tell=False)

    def _finish(self, reason: str, code: int, message: str | None) -> SessionResult:
        end = "crashed" if reason == "error" and self.stats.snapshot().crashes else _END_LINE.get(reason, reason)
        record_error = self.record.close("stopped" if end == "error" else end, header=self._header(),
                                         failed=reason == "error", message=message,
                                         extra={"workload_warnings": self.workload_warnings()})
        if record_error is not None:
            message, code = message or record_error, code or ExitCode.ERROR
        found = self.capacity.results[-1] if self.capacity is not None and self.capacity.results else None
        result = SessionResult(reason, code, tuple(self.stats.snapshot().levels), message, found)
        self.listener.ended(result)
        return result

    def _exit_code(self, reason: str) -> int:
        if reason == "interrupted":
            return ExitCode.for_signal(self.signal)
        code = _EXIT.get(reason, ExitCode.OK)
        # --on-divergence continue: the run went on to its end, and its answer is still no
        return ExitCode.DIVERGED if code == ExitCode.OK and self.policy.diverged else code

    def _header(self) -> dict:
        header = self.cfg.describe()
        header.update({"target": self.url, "model": self.model, "api": self.api, "builtin_sim": self.supervisor.builtin})
        if self._prompts is not None:
            header["prompts"] = self._prompts.describe()
        # how the times of requests measured by other processes or machines sit on this timeline
        if self.client is not None:
            header["timeline"] = self.client.timeline
        else:
            from specload.engine.client import local_timeline

            header["timeline"] = local_timeline(workers=self.cfg.workers > 1)
        return header

    def _set_phase(self, phase: str, *, tell: bool = True) -> None:
        self.phase = phase
        self.fan.running = phase == "running"
        if tell:
            self.listener.phase(phase)

    def _record_failed(self, error: str) -> None:
        self.policy.record_failed(error)


def _baseline(cfg: RunConfig) -> Run | None:
    """--baseline's run, read once (the config checked it is a readable run)."""
    if cfg.compare.baseline is None:
        return None
    from specload.record.runs import RunReadError, load_run

    try:
        return load_run(cfg.compare.baseline)
    except RunReadError as e:
        raise SessionError(str(e)) from None


def _live_outputs(baseline: Run, notice: Callable[[str], None]) -> LiveOutputs | None:
    if baseline.answers is None:
        notice(f"the baseline {baseline.label} has no recorded outputs (record it with --check-outputs): "
               "outputs are not compared as the run goes")
        return None
    return LiveOutputs(baseline.answers)


def _judge(cfg: RunConfig, t0_ns: int, workload: dict, baseline: Run | None) -> LiveJudge | None:
    """The live judge when levels are compared or judged as they run."""
    c = cfg.compare
    if c.baseline is None and not c.judging:
        return None
    return LiveJudge(t0_ns=t0_ns, primary=c.primary, baseline=baseline, min_effect=c.min_effect_pct / 100,
                     target_ci_pct=c.target_ci_pct, until_decided=c.until_decided,
                     max_requests_per_level=c.max_requests_per_level,
                     workload=workload)


def _check_fd_limit(cfg: RunConfig, notice: Callable[[str], None]) -> None:
    """Each stream holds a socket: raise the open-file limit for the highest planned concurrency, and
    say so up front when it cannot be (requests beyond it fail in specload, not the server)."""
    from specload.neterrors import raise_fd_limit

    peak = max((lv.concurrency for lv in cfg.plan.levels), default=1)
    limit = raise_fd_limit(peak + 256)
    if limit is not None and limit < peak + 64:
        notice(f"open-file limit {limit} (ulimit -n) is too low for C={peak}: requests beyond "
               f"about {max(1, limit - 32)} in flight will fail in specload; raise it with ulimit -n")


async def _start_client(client: LoadClient, cfg: RunConfig) -> None:
    if not cfg.ray:
        await client.start()
        return
    from specload.engine.ray_workers import RayStartError

    try:
        await client.start()
    except RayStartError as e:  # no cluster at that address, actors that cannot be placed
        raise SessionError(str(e)) from None


def _client(cfg: RunConfig, url: str, api: str, model: str | None, headers: dict[str, str], clock: Clock,
            stats: LiveStats, scrub: Scrubber, worker_lost: Callable[[int, str, int], None]) -> LoadClient:
    """The load's client: in this process, or a pool of ``--workers`` processes (or Ray actors) behind
    the same interface."""
    if cfg.workers > 1 or cfg.ray:
        from specload.engine.workers import Transport, WorkerPool

        transport: Transport | None = None
        if cfg.ray:
            from specload.engine.ray_workers import RayActors

            transport = RayActors(cfg.ray)
        return WorkerPool(cfg.workers, url, api, transport=transport, model=model, target=cfg.target,
                          request=cfg.request, headers=headers, on_tokens=stats.on_tokens,
                          on_worker_lost=worker_lost, scrubber=scrub)
    from specload.engine.client import StreamingClient

    return StreamingClient(url, api, model=model, target=cfg.target, request=cfg.request, headers=headers,
                           clock=clock, on_tokens=stats.on_tokens, scrubber=scrub)
