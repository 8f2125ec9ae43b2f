"""``specload run`` (headless) and ``specload tui``: one set of options, one ``RunConfig``.

Both commands turn their options into the same ``RunConfig`` and run the same ``Session``; the TUI
is imported only when it is asked for, so headless runs never load Textual. Bad option values end
in a one-line error and exit status 2; a target that cannot be reached in exit status 1.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Callable

import click
import orjson

from specload.config import (
    ConfigError,
    RecordConfig,
    RequestConfig,
    RunConfig,
    TargetConfig,
    WatchConfig,
    check_url,
    parse_header,
    split_credentials,
)
from specload.engine.load import PlanError, build_plan, parse_levels
from specload.engine.prompts import PromptError

TUI_LEVEL_SECONDS = 20.0
DEFAULT_DEMO_SIM = ("--spec-tokens", "3", "--accept-rate", "0.7", "--max-batch", "32")


def _fail(msg: str, code: int = 2) -> None:
    click.echo(f"specload: error: {msg}", err=True)
    sys.exit(code)


def load_options(f: Callable) -> Callable:
    """The options shared by ``run`` and ``tui``, applied bottom-up."""
    opts = [
        click.argument("url", required=False),
        click.option("--api", type=click.Choice(["auto", "chat", "completions", "generate"]), default="auto",
                     show_default=True, help="API flavour; auto probes chat, completions, then /generate."),
        click.option("--model", help="Model name to send (default: the first of /v1/models)."),
        click.option("--concurrency", "-c", default="1,2,4,8,16", show_default=True,
                     help="Concurrency levels of the ramp, comma-separated."),
        click.option("--requests-per-level", "-n", type=int,
                     help="Requests started per level (headless default: 4 x C, at least 10)."),
        click.option("--duration-per-level", "-d", type=float,
                     help="Seconds per level instead of a request count (TUI default: 20)."),
        click.option("--warmup-requests", type=int, default=0, show_default=True,
                     help="Requests sent first and not counted."),
        click.option("--drain/--no-drain", default=None,
                     help="Wait for in-flight requests between levels (default: on headless, off in the TUI)."),
        click.option("--rate", type=float, help="Open loop: requests per second (concurrency is then a cap)."),
        click.option("--burstiness", type=float, default=1.0, show_default=True,
                     help="Gamma shape of open-loop arrivals (1 = Poisson)."),
        click.option("--max-requests", type=int, help="Stop after this many requests in all."),
        click.option("--max-duration", type=float, help="Stop after this many seconds in all."),
        click.option("--prompt-tokens", type=int, default=128, show_default=True,
                     help="Length of synthetic prompts (approximate)."),
        click.option("--prompt", help="Send this prompt text."),
        click.option("--prompt-file", type=click.Path(dir_okay=False), help="Send the text of this file."),
        click.option("--dataset", type=click.Path(dir_okay=False), help="JSONL file of prompts."),
        click.option("--max-tokens", type=int, default=256, show_default=True, help="max_tokens of each request."),
        click.option("--ignore-eos", is_flag=True, help="Ask the server to ignore EOS (fixed output length)."),
        click.option("--continuous-usage/--no-continuous-usage", default=None,
                     help="Ask for usage on every chunk (vLLM/SGLang) for exact per-chunk token counts "
                          "[default: on for the built-in simulator, off otherwise]."),
        click.option("--temperature", type=float, help="Sampling temperature."),
        click.option("--extra-body", help="JSON object merged into every request body."),
        click.option("--header", "headers", multiple=True, help="Extra HTTP header 'Name: value' (repeatable)."),
        click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
                     help="Environment variable holding the API key (sent as a Bearer token)."),
        click.option("--no-keepalive", is_flag=True, help="A new connection per request."),
        click.option("--stall-timeout", type=float, default=60.0, show_default=True,
                     help="Seconds without a byte before a request counts as stalled."),
        click.option("--request-timeout", type=float, default=600.0, show_default=True,
                     help="Seconds a request may take in all (0: no limit)."),
        click.option("--record", "record_path", type=click.Path(dir_okay=False),
                     help="Write a JSONL record of the run to this file."),
        click.option("--record-chunks", is_flag=True, help="Include each chunk's arrival time in the record."),
        click.option("--server-log", type=click.Path(dir_okay=False), help="Follow this server log file."),
        click.option("--server-log-from-start", is_flag=True, help="Read the server log from its start."),
        click.option("--server-log-cmd", help="Read the server log from this command's output."),
        click.option("--launch", help="Start the server with this command and stop it at the end."),
        click.option("--ready-timeout", type=float, default=900.0, show_default=True,
                     help="Seconds to wait for a launched server's health endpoint."),
        click.option("--expect-log", multiple=True, help="Regex of a line the server must print (repeatable)."),
        click.option("--metrics-url", help="Prometheus /metrics URL (default: the server's, if it answers; 'off')."),
        click.option("--metrics-interval", type=float, default=1.0, show_default=True,
                     help="Seconds between /metrics scrapes (at least 0.1)."),
        click.option("--no-health", is_flag=True, help="Do not poll the health endpoint."),
        click.option("--down-timeout", type=float, default=30.0, show_default=True,
                     help="Headless: stop when the server has been down this long (the load pauses meanwhile)."),
        click.option("--on-crash", type=click.Choice(["pause", "stop", "continue"]),
                     help="What a detected server crash does (TUI: pause, headless: stop)."),
        click.option("--sim-args", help="Options for the built-in simulator (used when no URL is given)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for prompts and arrivals."),
        click.option("--workers", type=int, default=1, show_default=True,
                     help="Processes sending the load (each its own event loop)."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout."),
        click.option("--label", help="Name of this run in comparisons ('specload report A B'); kept in the "
                                     "record (default: the record's file name)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def build_config(p: dict, *, ui: bool) -> RunConfig:
    """Options -> RunConfig, or ConfigError/PlanError/PromptError with a one-line message."""
    url, basic_auth = split_credentials(p["url"]) if p.get("url") else (None, None)
    url = check_url(url) if url else None
    if p.get("launch") and url is None:
        raise ConfigError("--launch needs the server's URL as well (e.g. http://127.0.0.1:8000)")
    for name in ("stall_timeout", "request_timeout", "ready_timeout", "down_timeout"):
        if p[name] is not None and p[name] < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must not be negative")
    if p["max_tokens"] < 1:
        raise ConfigError("--max-tokens must be at least 1")
    if not p.get("metrics_interval", 1.0) >= 0.1:
        raise ConfigError("--metrics-interval must be at least 0.1 s")
    if p["prompt_tokens"] < 1:
        raise ConfigError("--prompt-tokens must be at least 1")
    if p["workers"] < 1:
        raise ConfigError("--workers must be at least 1")
    if sum(1 for k in ("prompt", "prompt_file", "dataset") if p.get(k)) > 1:
        raise ConfigError("give only one of --prompt, --prompt-file, --dataset")
    extra: tuple = ()
    if p.get("extra_body"):
        try:
            obj = orjson.loads(p["extra_body"])
        except orjson.JSONDecodeError:
            raise ConfigError("--extra-body is not valid JSON") from None
        if not isinstance(obj, dict):
            raise ConfigError("--extra-body must be a JSON object")
        extra = tuple(obj.items())
    from specload.engine.api import RequestOptions, check_body

    # every request body must be writable as JSON, or each request would fail the same way
    base = RequestOptions(model=p.get("model"), max_tokens=p["max_tokens"], temperature=p.get("temperature"))
    if problem := check_body(base):
        raise ConfigError(f"--max-tokens {p['max_tokens']}: {problem}")
    if extra and (problem := check_body(RequestOptions(model=None, max_tokens=1, extra_body=extra))):
        raise ConfigError(f"--extra-body: {problem}")
    headers = tuple(parse_header(h) for h in p.get("headers") or ())
    if basic_auth is not None and not any(k.lower() == "authorization" for k, _ in headers):
        headers += (basic_auth,)
    drain = p["drain"] if p["drain"] is not None else not ui
    duration = p["duration_per_level"]
    if ui and duration is None and p["requests_per_level"] is None:
        # the dashboard ramps in real time: a level every 20 s reads well; a request count
        # would make low levels of long generations last minutes
        duration = TUI_LEVEL_SECONDS
    plan = build_plan(
        parse_levels(p["concurrency"]),
        requests_per_level=p["requests_per_level"],
        duration_per_level=duration,
        warmup_requests=p["warmup_requests"],
        drain=drain,
        rate=p["rate"],
        burstiness=p["burstiness"],
        max_requests=p["max_requests"],
        max_duration_s=p["max_duration"],
    )
    if p.get("record_path"):
        from specload.record.writer import RecordError, check_writable

        try:
            check_writable(p["record_path"])
        except RecordError as e:
            raise ConfigError(str(e)) from None
    if p.get("sim_args") is not None:
        try:
            sim_args = tuple(shlex.split(p["sim_args"]))
        except ValueError as e:
            raise ConfigError(f"--sim-args: {e}") from None
        if url is None:
            check_sim_args(sim_args)
    else:
        sim_args = DEFAULT_DEMO_SIM
    return RunConfig(
        target=TargetConfig(
            url=url,
            api=p["api"],
            model=p.get("model"),
            headers=headers,
            api_key_env=p.get("api_key_env") or None,
            keepalive=not p["no_keepalive"],
            stall_timeout_s=p["stall_timeout"],
            request_timeout_s=p["request_timeout"] or None,
        ),
        plan=plan,
        request=RequestConfig(
            max_tokens=p["max_tokens"],
            ignore_eos=p["ignore_eos"],
            # the built-in simulator supports it (as vLLM does), so the demo's live token counts are
            # exact from the first chunk; a server that might reject the field is asked only on request
            continuous_usage=p["continuous_usage"] if p.get("continuous_usage") is not None else url is None,
            temperature=p.get("temperature"),
            extra_body=extra,
            prompt=p.get("prompt"),
            prompt_file=p.get("prompt_file"),
            dataset=p.get("dataset"),
            prompt_tokens=p["prompt_tokens"],
        ),
        watch=WatchConfig(
            server_log=p.get("server_log"),
            server_log_from_start=p["server_log_from_start"],
            server_log_cmd=p.get("server_log_cmd"),
            launch=p.get("launch"),
            ready_timeout_s=p["ready_timeout"],
            expect_log=tuple(p.get("expect_log") or ()),
            metrics_url=p.get("metrics_url"),
            metrics_interval_s=p.get("metrics_interval", 1.0),
            health=not p["no_health"],
            on_crash=p.get("on_crash") or ("pause" if ui else "stop"),
            down_timeout_s=p["down_timeout"],
        ),
        record=RecordConfig(path=p.get("record_path"), with_chunks=p["record_chunks"]),
        sim_args=sim_args,
        seed=p["seed"],
        workers=p["workers"],
        label=p.get("label") or None,
    )


def check_sim_args(args: tuple[str, ...]) -> None:
    """Parse the simulator's options here, so a typo is a one-line usage error before anything starts
    (not a server that dies on start-up). The session adds ``--host``/``--port`` the same way."""
    from specload.sim.cli import sim_command
    from specload.sim.config import SimConfig

    if "--help" in args or "-h" in args:
        raise ConfigError("--sim-args: see 'specload sim --help' for the simulator's options")
    try:
        ctx = sim_command.make_context("specload sim", ["--host", "127.0.0.1", "--port", "0", *args])
        SimConfig(**ctx.params)
    except click.ClickException as e:
        raise ConfigError(f"--sim-args: {e.format_message()}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--sim-args: {e}") from None


def _config_or_exit(params: dict, *, ui: bool) -> RunConfig:
    try:
        cfg = build_config(params, ui=ui)
    except (ConfigError, PlanError, PromptError) as e:
        _fail(str(e))
    # the command line as given, for the record (secrets are masked when it is written)
    cfg = dataclasses.replace(cfg, command=shlex.join(["specload", *sys.argv[1:]]))
    if cfg.request.dataset or cfg.request.prompt_file:
        from specload.engine.prompts import PromptSource

        try:
            PromptSource.from_options(prompt_file=cfg.request.prompt_file, dataset=cfg.request.dataset)
        except PromptError as e:
            _fail(str(e))
    return cfg


def run_headless(cfg: RunConfig, *, as_json: bool) -> int:
    from specload.headless import run_headless as _run

    return _run(cfg, as_json=as_json)


@click.command("run")
@load_options
def run_command(**params: object) -> None:
    """Run a load headless (no UI). With no URL, the built-in simulator is started and used."""
    cfg = _config_or_exit(params, ui=False)
    sys.exit(run_headless(cfg, as_json=bool(params["as_json"])))


@click.command("tui")
@load_options
@click.option("--headless", is_flag=True, help="No UI: the same as 'specload run'.")
@click.option("--theme", default=None, help="Colour theme (see themes/; the command palette switches live).")
def tui_command(**params: object) -> None:
    """The live dashboard. With no URL, the built-in simulator is started and ramped."""
    headless = bool(params.pop("headless"))
    theme = params.pop("theme")
    cfg = _config_or_exit(params, ui=not headless)
    if headless:
        sys.exit(run_headless(cfg, as_json=bool(params["as_json"])))
    from specload.ui.app import run_app

    sys.exit(run_app(cfg, theme=theme))
