"""The load's parts, built from the ``RunConfig`` once the server answers: the prompts (and their
lengths in the server's own tokens), the client, the live judge, and the process limits they need.

``Session._build`` calls these in order; each is one decision about the configuration, kept out of
the composition root so that it says only what is built when.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from specload.clock import Clock
from specload.config import RunConfig
from specload.datatypes import Noted, RunEvent
from specload.engine.answers import OutputCheck
from specload.engine.load import Arrivals
from specload.engine.prompts import PromptSource
from specload.engine.runner import LoadClient
from specload.plan import Lengths, LoadPlan
from specload.secrets import Scrubber
from specload.session.fanout import Fanout
from specload.stats.live import LiveStats
from specload.stats.live_judge import LiveJudge
from specload.stats.lossless import LiveOutputs
from specload.watch.serverwatch import ServerWatch

if TYPE_CHECKING:
    from specload.watch.launch import LaunchedServer

# one calibration call waits at most this long (less under a shorter --request-timeout); the whole
# calibration at most CALIBRATION_CALLS of them: a server that does not answer in time is not
# asked again, and whatever is not learned by then leaves the 1.3 tokens-a-word guess
CALIBRATION_CALL_S = 15.0
CALIBRATION_CALLS = 2


class SessionError(Exception):
    """A run that cannot start; the message is one line for the user."""


async def target(cfg: RunConfig, url: str, headers: dict[str, str], *, fan: Fanout, now_ns: Callable[[], int],
                 launched: LaunchedServer | None) -> tuple[str, str | None]:
    """The server's API flavour and model (``--api auto``: probed); the probe's requests reach the
    server's counters, so they are recorded; what it saw of a server that does not stream is said
    before the load, not after it. A launched server is ready once it answers a real request, not at
    its first health 200; what it says about itself (its args, version, properties) is recorded."""
    from specload.engine.probe import discover, server_info, wait_answered

    probes: list[dict] = []
    notes: list[str] = []
    wait = functools.partial(wait_answered, url, timeout_s=cfg.watch.ready_timeout_s, headers=headers,
                             alive=lambda: launched is not None and launched.running)
    try:
        if launched is not None:
            await wait()
        api, model = await discover(url, api=cfg.target.api, model=cfg.target.model, headers=headers, sent=probes,
                                    notes=notes)
        if launched is not None:
            await wait(api=api, model=model, sent=probes)
    finally:
        if probes:
            fan.event(Noted(now_ns(), "probe", {"requests": probes}))
    for note in notes:
        fan.notice(note)
        fan.warned_unstreamed = True
    if cfg.watch.launch:
        fan.event(Noted(now_ns(), "server_info", await server_info(url, headers)))
    return api, model


def prompts_for(cfg: RunConfig) -> PromptSource:
    r = cfg.request
    return PromptSource.from_options(
        prompt=r.prompt, prompt_file=r.prompt_file, dataset=r.dataset, dataset_format=r.dataset_format,
        trace=r.trace, trace_block_tokens=r.trace_block_tokens, nonce=r.prompt_nonce,
        prompt_tokens=Lengths.parse(r.prompt_tokens),
        output_lengths=Lengths.parse(r.max_tokens_dist) if r.max_tokens_dist else None, output_len=r.output_len,
        ignore_eos=r.ignore_eos, max_tokens=r.max_tokens, shared_prefix_tokens=r.shared_prefix_tokens, seed=cfg.seed,
        multi_turn=r.multi_turn, think_time=r.think_time, identify=r.check_outputs)


def plan_for(cfg: RunConfig, prompts: PromptSource) -> tuple[LoadPlan, Arrivals | None]:
    """The levels the runner runs, and their arrivals when they are not the plan's own: ``--find-max``
    (the search decides every level; the ramp's levels only give it its start), ``--trace`` (one
    level, the trace's requests at its own times, engine/trace.py)."""
    plan = dataclasses.replace(cfg.plan, levels=()) if cfg.capacity.find_max else cfg.plan
    if prompts.trace is None:
        return plan, None
    from specload.engine.trace import TraceArrivals
    from specload.engine.trace import trace_plan as plan_of

    speed = cfg.request.trace_speed
    return plan_of(plan, prompts.trace, speed), TraceArrivals(prompts.trace, speed)


def calibration_bounds(cfg: RunConfig) -> tuple[float, float]:
    """(one call's timeout, the whole calibration's) under the run's own timeouts."""
    call = min(CALIBRATION_CALL_S, cfg.target.request_timeout_s or CALIBRATION_CALL_S)
    return call, call * CALIBRATION_CALLS


async def calibrate_prompts(cfg: RunConfig, prompts: PromptSource, url: str, api: str, model: str | None,
                            headers: dict[str, str], *, now_ns: Callable[[], int], event: Callable[[RunEvent], None],
                            notice: Callable[[str], None]) -> None:
    """Size synthetic prompts in the server's own tokens (engine/calibrate.py), within the run's
    timeouts, and say so first (it may take a while); the requests this sends reach the server's
    counters, so they are recorded, as the API probe's are. With ``--tokens-per-word`` the user's
    figure is taken and nothing is sent."""
    from specload.engine.calibrate import calibrate
    from specload.engine.words import TokenModel

    sent: list[dict] = []
    given = cfg.request.tokens_per_word
    if given:
        tokens = TokenModel("given", given, 0.0, given, detail="--tokens-per-word: not calibrated")
    else:
        call_s, budget_s = calibration_bounds(cfg)
        notice(f"prompt lengths: asking the server how it counts tokens (at most {budget_s:g} s)")
        tokens = await calibrate(url, api, model, headers=headers, sent=sent, seed=cfg.seed, timeout_s=call_s,
                                 connect_timeout_s=cfg.target.connect_timeout_s, budget_s=budget_s)
    prompts.set_model(tokens)
    event(Noted(now_ns(), "calibration", {"prompts": tokens.describe(), "requests": sent}))
    if tokens.method in ("guess", "given"):
        notice(f"prompt lengths: {tokens.detail}")
    else:
        notice(f"prompt lengths in the server's tokens: {tokens.per_word:.2f} tokens a word, "
               f"{tokens.overhead:.0f} added by the server ({tokens.detail})")


def judge_for(cfg: RunConfig, t0_ns: int, fan: Fanout, header: dict, *,
              checking: bool = False) -> tuple[LiveJudge | None, LiveOutputs | None]:
    """The live judge when levels are compared or judged as they run, and the answers compared to the
    baseline's (``--check-outputs``); the baseline is read once here (the config checked it is a
    readable run). The run's workload (from its header) is the fan-out's from now on, for the
    levels' soundness; a baseline of another workload gets no verdicts."""
    from specload.record.runs import RunReadError, description_from_header, load_run

    fan.workload_shape = workload = description_from_header(header).request_shape()
    c = cfg.compare
    try:
        baseline = load_run(c.baseline) if c.baseline is not None else None
    except RunReadError as e:
        raise SessionError(str(e)) from None
    if checking and baseline is not None:
        if baseline.answers is not None:
            fan.outputs = LiveOutputs(baseline.answers)
        else:
            fan.notice(f"the baseline {baseline.label} has no recorded outputs (record it with --check-outputs): "
                       "outputs are not compared as the run goes")
    if baseline is None and not c.judging:
        return None, fan.outputs
    fan.judge = judge = LiveJudge(t0_ns=t0_ns, primary=c.primary, baseline=baseline, min_effect=c.min_effect_pct / 100,
                                  target_ci_pct=c.target_ci_pct, until_decided=c.until_decided,
                                  max_requests_per_level=c.max_requests_per_level, workload=workload)
    if judge.differences:
        fan.notice("--baseline: unsound, no verdicts: the workloads differ: " + ", ".join(judge.differences))
    return judge, fan.outputs


def say_expected(seen: list[tuple[str, str | None]], fan: Fanout, now_ns: Callable[[], int]) -> None:
    """--expect-log: each pattern, seen among the launched server's lines or not, recorded and said."""
    for pattern, line in seen:
        fan.event(Noted(now_ns(), "expect", {"pattern": pattern, "seen": line is not None}))
        fan.notice(f"expected log line {pattern!r}: " + ("seen" if line is not None else "NOT seen"))


async def check_outputs(cfg: RunConfig, url: str, api: str, model: str | None, headers: dict[str, str],
                        prompts: PromptSource, *, fan: Fanout,
                        now_ns: Callable[[], int]) -> tuple[RunConfig, OutputCheck | None]:
    """--check-outputs: ask the server once whether it returns logprobs and how its cache is reset
    (engine/answers.py), settle --logprobs (the config returned), and say what the run will do;
    without it, the config as it is and no check."""
    from specload.engine import answers

    if not cfg.request.check_outputs:
        return cfg, None
    from specload.engine.api import build_body

    r, sent = cfg.request, list[dict]()
    support = await answers.probe(url, api, build_body(api, "Say hello.", r, model), headers,
                                  timeout_s=min(30.0, cfg.target.request_timeout_s or 30.0), sent=sent)
    logprobs = support.logprobs if r.logprobs is None else r.logprobs
    cfg = dataclasses.replace(cfg, request=dataclasses.replace(r, logprobs=logprobs))
    fan.event(Noted(now_ns(), "check_outputs", {
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
    fan.notice("; ".join(said))
    return cfg, answers.OutputCheck(url, headers, support, prompts, on_event=fan.event, on_notice=fan.notice,
                                    now_ns=now_ns)


def workload_warnings(fan: Fanout, prompts: PromptSource | None) -> list[str]:
    """What about the run's workload weakens what it measured, one line each: speculative decoding
    on synthetic prompts, with ignore_eos or without the chat template; dataset prompts sent again."""
    out = list(fan.workload_warnings)
    p = prompts
    if p is not None and p.dataset is not None and p.sent > p.rows:
        what = "conversations" if p.multi_turn else "requests"
        out.append(f"the run sent {p.sent:,} {what} from {p.rows:,} dataset rows: prompts were sent again, "
                   "and a prefix cache served the repeats from their first time")
    return out


def say_before_start(cfg: RunConfig, notice: Callable[[str], None]) -> None:
    """Before anything starts: each stream holds a socket, so the open-file limit is raised for the
    highest planned concurrency (said up front when it cannot be: requests beyond it would fail in
    specload, not the server); a URL's path that is not used is said too."""
    from specload.neterrors import raise_fd_limit

    if cfg.target.url_dropped:
        notice(f"the URL's {cfg.target.url_dropped!r} is not used: specload sends to "
               f"{cfg.target.url} + /v1/chat/completions, /v1/completions or /generate itself")
    peak = max((lv.concurrency for lv in cfg.plan.levels), default=1)
    limit = raise_fd_limit(peak + 256)
    if limit is not None and limit < peak + 64:
        notice(f"open-file limit {limit} (ulimit -n) is too low for C={peak}: requests beyond "
               f"about {max(1, limit - 32)} in flight will fail in specload; raise it with ulimit -n")


def server_watch(cfg: RunConfig, url: str, client: LoadClient, *, clock: Clock, fan: Fanout,
                 launched: bool) -> ServerWatch:
    """Health, /metrics, the GPUs (when the server runs here) and specload's own load, reported
    through the fan-out."""
    from specload.watch.gpu import is_local

    return ServerWatch(cfg.watch, url, clock=clock, on_health=fan.health, on_server=fan.server,
                       on_client_load=fan.client_load, on_notice=fan.notice,
                       worker_loads=lambda: client.worker_loads, on_gpu=fan.gpu,
                       on_gpu_fault=fan.gpu_fault, server_local=launched or is_local(url),
                       streamed=lambda: fan.stats.tokens_total)


def header(cfg: RunConfig, *, target: str | None, model: str | None, api: str | None, builtin_sim: bool,
           prompts: PromptSource | None, client: LoadClient | None) -> dict:
    """The record's first line: the configuration and what the server turned out to be."""
    head = cfg.describe()
    head.update({"target": target, "model": model, "api": api, "builtin_sim": builtin_sim})
    if prompts is not None:
        head["prompts"] = prompts.describe()
    # how the times of requests measured by other processes or machines sit on this timeline
    if client is not None:
        head["timeline"] = client.timeline
    else:
        from specload.engine.client import local_timeline

        head["timeline"] = local_timeline(workers=cfg.workers > 1)
    return head


async def start_client(client: LoadClient, cfg: RunConfig) -> None:
    if not cfg.ray:
        await client.start()
        return
    from specload.engine.ray_workers import RayStartError

    try:
        await client.start()
    except RayStartError as e:  # no cluster at that address, actors that cannot be placed
        raise SessionError(str(e)) from None


def client_for(cfg: RunConfig, url: str, api: str, model: str | None, headers: dict[str, str], clock: Clock,
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
