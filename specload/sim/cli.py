"""``specload sim``: run the simulated LLM server from the command line.

Owns the flag names, turning flags into a ``SimConfig``, the process lifecycle (uvloop when present,
SIGTERM/SIGINT -> clean shutdown, or with ``--hang-on-sigterm`` the hang real servers show under load:
listener closed, open streams silent until their clients leave, then exit 0; ``--crash-exit`` -> exit
code 1; ``--fail-start`` -> the model load's traceback, exit 1) and the first stdout line, which scripts and tests read to learn the port:

    specload sim listening on http://127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Callable

import click

from specload.sim.config import SimConfig

F0, I1, P = click.FloatRange(min=0), click.IntRange(min=1), click.FloatRange(0.0, 1.0)
# Each option: its flag (and the SimConfig field where the flag's name is not the field's), its type
# (None: a boolean flag) and its help. The default is the field's (but for --port: 8000).
OPTIONS: tuple[tuple[str, click.ParamType | None, str | None], ...] = (
    ("--flavor", click.Choice(["vllm", "llamacpp"]),
     "Which real server to play: vLLM's wire format and /metrics, or llama.cpp's llama-server "
     "(one chunk per token, timings, llamacpp:* metrics, slot log lines, --max-batch slots = -np, "
     "context split over the slots, connection closed after each stream)."),
    ("--host", click.STRING, "Address to listen on."),
    ("--port", click.IntRange(0, 65535), "Port; 0 picks a free one (printed on the first stdout line)."),
    ("--model-name", click.STRING, "Model id served by /v1/models."),
    ("--max-batch", I1, "Sequences decoded together; more wait in a FIFO queue."),
    ("--step-ms", F0, "Decode step time at batch 1."),
    ("--step-slope", F0, "Extra fraction of --step-ms per additional sequence in the batch."),
    ("--prefill-base-ms", F0, None),
    ("--prefill-per-token-ms", F0, None),
    ("--draft-cost", F0, "A speculative step costs (1 + draft-cost * spec-tokens) plain steps."),
    ("--draft-batch-slope", F0,
     "Draft verification cost grows by this fraction per further sequence in the batch "
     "(compute-bound at large batches: speculation can lose at high concurrency)."),
    ("--step-jitter", F0,
     "Noise of each decode step's time (lognormal sigma, about its coefficient of variation; "
     "not with pinned timing)."),
    ("--prefill-jitter", F0, "Noise of each prefill pass's time (lognormal sigma; not with pinned timing)."),
    ("--kv-capacity-tokens", I1, None),
    ("--ttft-ms", F0, "Pin time to first token (turns the batch model off)."),
    ("--itl-ms", F0, "Pin the time of every decode step (turns the batch model off)."),
    ("--spec-tokens", click.IntRange(0, 64), "Draft tokens per step (speculative decoding); 0 turns it off."),
    ("--accept-rate", P, "Per-position draft acceptance probability."),
    ("--accept-spread", click.FloatRange(0.0, 0.5, max_open=True),
     "Standard deviation of each request's own acceptance probability around --accept-rate "
     "(prompts differ in how well the draft guesses them); 0: every request the same."),
    ("--spec-bug-rate", P,
     "Share of speculative steps (that accepted drafts) emitting a wrong token: a speculation bug "
     "that --check-outputs must catch (temperature-0 text is otherwise the same with and without it)."),
    ("--near-tie-rate", P,
     "Share of temperature-0 positions whose two best tokens are a near-tie (margin < 0.032 nats) "
     "whose order flips with the batch's shape: numerics, not a bug."),
    ("--logprobs/--no-logprobs", None,
     "Return the logprobs a request asks for; --no-logprobs ignores them, as a server without them does."),
    ("--eos-prob", P, "Per-token EOS probability (ignored with ignore_eos)."),
    ("--default-max-tokens", I1, None),
    ("--context-size", click.IntRange(min=2), None),
    ("--max-speed", None, "No sleeps; emit tokens as fast as possible."),
    ("--burst", I1, "SSE events per transport write in --max-speed mode."),
    ("--fail-rate", P, None),
    ("--disconnect-rate", P, None),
    ("--stall-rate", P, None),
    ("--crash-after", click.IntRange(min=0), "Crash (traceback in the log, then hang) after N finished requests."),
    ("--crash-exit", None, "Exit with code 1 after the crash instead of hanging."),
    ("--start-delay start_delay_s", click.FloatRange(0, 3600),
     "Seconds of 'loading the model' after it listens: /health and generation answer 503 until then."),
    ("--health-while-loading", None,
     "/health answers 200 while loading (a router in front of the engine): only a real request "
     "tells that it is ready."),
    ("--fail-start", None,
     "Loading fails: a CUDA out-of-memory traceback on ranks TP0 and TP1 after --start-delay, exit 1."),
    ("--close-after-stream", None, "Close TCP after each stream while sending Keep-Alive (llama-server quirk)."),
    ("--usage-in-last-chunk", None, "Last content chunk carries finish_reason + usage + timings (vllm flavour only)."),
    ("--hang-on-sigterm", None,
     "On SIGTERM close the listener and keep open streams silent until their clients leave, "
     "then exit 0 (how llama-server and vLLM hang under load)."),
    ("--tokenize/--no-tokenize tokenize_endpoint", None,
     "Serve POST /tokenize (vLLM/SGLang shape; llama.cpp's with --flavor llamacpp)."),
    ("--prefix-cache", None, "Model a prefix cache: a prompt's leading 16-token blocks seen before cost no prefill."),
    ("--prefix-block-tokens", I1, None),
    ("--log-file", click.Path(dir_okay=False), "Append log lines here instead of stdout."),
    ("--log-interval", click.FloatRange(min=0, min_open=True), "Seconds between 'Decode batch' lines."),
    ("--gpus", click.IntRange(0, 64),
     "Simulated GPUs whose utilisation and power follow the load, on /metrics in a DCGM "
     "exporter's names (for --gpu-metrics)."),
    ("--quiet", None, "No log lines (the listening line is still printed)."),
    ("--seed", click.INT, "Make a run reproducible."),
)


def _sim_options(f: Callable[..., None]) -> Callable[..., None]:
    defaults = {x.name: x.default for x in dataclasses.fields(SimConfig)} | {"port": 8000}
    for flags, kind, help_ in reversed(OPTIONS):
        decls = flags.split()
        name = decls[-1] if len(decls) > 1 else decls[0].split("/")[0][2:].replace("-", "_")
        default = defaults[name]
        if kind is None:
            two = "/" in flags
            f = click.option(*decls, is_flag=None if two else True, default=default, show_default=two, help=help_)(f)
        else:
            f = click.option(*decls, type=kind, default=default, show_default=default is not None, help=help_)(f)
    return f


@click.command("sim", context_settings={"help_option_names": ["-h", "--help"]})
@_sim_options
def sim_command(**options: object) -> None:
    """Run the built-in simulated LLM server (OpenAI + SGLang APIs, speculative decoding, faults)."""
    try:
        config = SimConfig(**options)  # type: ignore[arg-type]
    except ValueError as e:
        raise click.UsageError(str(e)) from None  # no ctx: a one-line "Error: ..." and exit 2
    sys.exit(run(config))


# Set by specload for the built-in simulator it starts: that process's pid. specload stops the
# simulator itself on every way out it can catch; this covers SIGKILL (and the OOM killer), which it
# cannot. The simulator runs under a shell in a session of its own, so neither the terminal's
# signals nor a parent-death signal of its direct parent (the shell) would reach it.
PARENT_ENV = "SPECLOAD_PARENT_PID"
PARENT_POLL_S = 0.25


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc), which tells it from a later one that reuses
    the pid; None when it is gone (or there is no /proc: then only liveness is checked)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def _parent_watch(stop: asyncio.Event) -> asyncio.Task | None:
    import os

    raw = os.environ.get(PARENT_ENV)
    if not raw or not raw.isdigit():
        return None
    pid = int(raw)
    born = _start_time(pid)

    async def watch() -> None:
        while True:
            if born is not None:
                alive = _start_time(pid) == born
            else:
                try:
                    os.kill(pid, 0)
                    alive = True
                except ProcessLookupError:
                    alive = False
                except PermissionError:
                    alive = True
            if not alive:
                stop.set()
                with contextlib.suppress(OSError, ValueError):  # the pipe it read is likely gone with it
                    print(f"specload sim: specload (pid {pid}) is gone: stopping", file=sys.stderr, flush=True)
                return
            await asyncio.sleep(PARENT_POLL_S)

    return asyncio.ensure_future(watch())


def run(config: SimConfig) -> int:
    """Serve until SIGTERM/SIGINT (exit 0) or, with ``crash_exit``, until the simulated crash (exit 1)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_serve(config))
    return uvloop.run(_serve(config))


async def _serve(config: SimConfig) -> int:
    # imported here so `specload sim --help` stays fast
    from specload.sim.server import SimServer

    try:
        server = SimServer(config)
    except OSError as e:  # the log file went away between the check and the start
        click.echo(f"specload sim: cannot write --log-file {config.log_file}: {e.strerror or e}", err=True)
        return 2
    try:
        url = await server.start()
    except OSError as e:
        click.echo(f"specload sim: cannot listen on {config.host}:{config.port}: {e.strerror or e}", err=True)
        return 1
    print(f"specload sim listening on {url}", flush=True)
    if config.fail_start:
        await asyncio.sleep(config.start_delay_s)
        server.fail_start()
        await server.stop()
        sys.stdout.flush()
        return 1
    stop = asyncio.Event()
    interrupted = asyncio.Event()  # SIGINT: a person at a terminal, who never wants the hang
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def on_sigint() -> None:
        interrupted.set()
        stop.set()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    parent = _parent_watch(stop)
    crashed = asyncio.ensure_future(server.crashed.wait())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        waits = {stopped, crashed} if config.crash_exit else {stopped}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        crashed.cancel()
        stopped.cancel()
        if parent is not None:
            parent.cancel()
    if config.crash_exit and server.crashed.is_set():
        # SGLang's parent kills the process tree after the child's sigquit: no graceful shutdown
        sys.stdout.flush()
        return 1
    if config.hang_on_sigterm and stop.is_set() and not interrupted.is_set():
        # further SIGTERMs change nothing, as with the real hung servers: only the clients leaving,
        # SIGINT or SIGKILL end it
        drain = asyncio.ensure_future(server.drain_silently())
        intr = asyncio.ensure_future(interrupted.wait())
        try:
            await asyncio.wait({drain, intr}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            drain.cancel()
            intr.cancel()
    await server.stop()
    return 0
