"""``specload sim``: run the simulated LLM server from the command line.

Owns the flag names, turning flags into a ``SimConfig``, the process lifecycle (uvloop when present,
SIGTERM/SIGINT -> clean shutdown, or with ``--hang-on-sigterm`` the hang real servers show under load:
listener closed, open streams silent until their clients leave, then exit 0; ``--crash-exit`` -> exit
code 1; ``--fail-start`` -> the model load's traceback, exit 1) and the first stdout line, which scripts and tests read to learn the port:

    specload sim listening on http://127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import signal
import sys

import click

from specload.sim.config import SimConfig


def _prob(name: str):
    return click.option(name, type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True)


@click.command("sim", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--flavor",
    type=click.Choice(["vllm", "llamacpp"]),
    default="vllm",
    show_default=True,
    help="Which real server to play: vLLM's wire format and /metrics, or llama.cpp's llama-server "
    "(one chunk per token, timings, llamacpp:* metrics, slot log lines, --max-batch slots = -np, "
    "context split over the slots, connection closed after each stream).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port; 0 picks a free one (printed on the first stdout line).",
)
@click.option("--model-name", default="sim-llm", show_default=True, help="Model id served by /v1/models.")
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Sequences decoded together; more wait in a FIFO queue.",
)
@click.option(
    "--step-ms",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Decode step time at batch 1.",
)
@click.option(
    "--step-slope",
    type=click.FloatRange(min=0),
    default=0.03,
    show_default=True,
    help="Extra fraction of --step-ms per additional sequence in the batch.",
)
@click.option("--prefill-base-ms", type=click.FloatRange(min=0), default=12.0, show_default=True)
@click.option("--prefill-per-token-ms", type=click.FloatRange(min=0), default=0.05, show_default=True)
@click.option(
    "--draft-cost",
    type=click.FloatRange(min=0),
    default=0.08,
    show_default=True,
    help="A speculative step costs (1 + draft-cost * spec-tokens) plain steps.",
)
@click.option(
    "--draft-batch-slope",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Draft verification cost grows by this fraction per further sequence in the batch "
    "(compute-bound at large batches: speculation can lose at high concurrency).",
)
@click.option(
    "--step-jitter",
    type=click.FloatRange(min=0),
    default=0.05,
    show_default=True,
    help="Noise of each decode step's time (lognormal sigma, about its coefficient of variation; "
    "not with pinned timing).",
)
@click.option(
    "--prefill-jitter",
    type=click.FloatRange(min=0),
    default=0.10,
    show_default=True,
    help="Noise of each prefill pass's time (lognormal sigma; not with pinned timing).",
)
@click.option("--kv-capacity-tokens", type=click.IntRange(min=1), default=262_144, show_default=True)
@click.option(
    "--ttft-ms",
    type=click.FloatRange(min=0),
    default=None,
    help="Pin time to first token (turns the batch model off).",
)
@click.option(
    "--itl-ms",
    type=click.FloatRange(min=0),
    default=None,
    help="Pin the time of every decode step (turns the batch model off).",
)
@click.option(
    "--spec-tokens",
    type=click.IntRange(0, 64),
    default=3,
    show_default=True,
    help="Draft tokens per step (speculative decoding); 0 turns it off.",
)
@click.option(
    "--accept-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.7,
    show_default=True,
    help="Per-position draft acceptance probability.",
)
@click.option(
    "--accept-spread",
    type=click.FloatRange(0.0, 0.5, max_open=True),
    default=0.1,
    show_default=True,
    help="Standard deviation of each request's own acceptance probability around --accept-rate "
    "(prompts differ in how well the draft guesses them); 0: every request the same.",
)
@click.option(
    "--spec-bug-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Share of speculative steps (that accepted drafts) emitting a wrong token: a speculation bug "
    "that --check-outputs must catch (temperature-0 text is otherwise the same with and without it).",
)
@click.option(
    "--near-tie-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Share of temperature-0 positions whose two best tokens are a near-tie (margin < 0.032 nats) "
    "whose order flips with the batch's shape: numerics, not a bug.",
)
@click.option(
    "--logprobs/--no-logprobs",
    default=True,
    show_default=True,
    help="Return the logprobs a request asks for; --no-logprobs ignores them, as a server without them does.",
)
@click.option(
    "--eos-prob",
    type=click.FloatRange(0.0, 1.0),
    default=0.002,
    show_default=True,
    help="Per-token EOS probability (ignored with ignore_eos).",
)
@click.option("--default-max-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--context-size", type=click.IntRange(min=2), default=32_768, show_default=True)
@click.option("--max-speed", is_flag=True, help="No sleeps; emit tokens as fast as possible.")
@click.option(
    "--burst",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="SSE events per transport write in --max-speed mode.",
)
@_prob("--fail-rate")
@_prob("--disconnect-rate")
@_prob("--stall-rate")
@click.option(
    "--crash-after",
    type=click.IntRange(min=0),
    default=None,
    help="Crash (traceback in the log, then hang) after N finished requests.",
)
@click.option("--crash-exit", is_flag=True, help="Exit with code 1 after the crash instead of hanging.")
@click.option("--start-delay", "start_delay_s", type=click.FloatRange(0, 3600), default=0.0, show_default=True,
              help="Seconds of 'loading the model' after it listens: /health and generation answer 503 until then.")
@click.option("--health-while-loading", is_flag=True,
              help="/health answers 200 while loading (a router in front of the engine): only a real request "
              "tells that it is ready.")
@click.option("--fail-start", is_flag=True,
              help="Loading fails: a CUDA out-of-memory traceback on ranks TP0 and TP1 after --start-delay, exit 1.")
@click.option(
    "--close-after-stream",
    is_flag=True,
    help="Close TCP after each stream while sending Keep-Alive (llama-server quirk).",
)
@click.option(
    "--usage-in-last-chunk",
    is_flag=True,
    help="Last content chunk carries finish_reason + usage + timings (vllm flavour only).",
)
@click.option(
    "--hang-on-sigterm",
    is_flag=True,
    help="On SIGTERM close the listener and keep open streams silent until their clients leave, "
    "then exit 0 (how llama-server and vLLM hang under load).",
)
@click.option(
    "--tokenize/--no-tokenize",
    "tokenize_endpoint",
    default=True,
    show_default=True,
    help="Serve POST /tokenize (vLLM/SGLang shape; llama.cpp's with --flavor llamacpp).",
)
@click.option(
    "--prefix-cache",
    is_flag=True,
    help="Model a prefix cache: a prompt's leading 16-token blocks seen before cost no prefill.",
)
@click.option("--prefix-block-tokens", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append log lines here instead of stdout.",
)
@click.option(
    "--log-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between 'Decode batch' lines.",
)
@click.option("--gpus", type=click.IntRange(0, 64), default=0, show_default=True,
              help="Simulated GPUs whose utilisation and power follow the load, on /metrics in a DCGM "
              "exporter's names (for --gpu-metrics).")
@click.option("--quiet", is_flag=True, help="No log lines (the listening line is still printed).")
@click.option("--seed", type=int, default=None, help="Make a run reproducible.")
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
                try:  # the pipe it read is likely gone with it
                    print(f"specload sim: specload (pid {pid}) is gone: stopping", file=sys.stderr, flush=True)
                except (OSError, ValueError):
                    pass
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
