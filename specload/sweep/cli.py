"""``specload sweep``: the command, its options, and what it prints.

The sweep's own options (the launch template, configurations, grid, baseline, repeats, retries, the
folder, resume) come with every option of ``specload run`` that describes the load, generated from
the same config fields, so a level, a prompt or an objective is set as it is for one run. Left out:
what the sweep decides per run (the URL, ``--launch``, ``--record``, ``--label``) and what names
another run (``--baseline FILE``, ``--until-decided``, ``--sim-args``). The command's values are kept
in ``sweep.json`` (``params``), so ``--resume DIR`` runs exactly the plan it interrupted.

Progress goes to stderr (a status line on a terminal); the result table, or ``--json`` (sweep.json),
to stdout. Exit status: 0 every configuration ran; 3 one crashed or did not start (the sweep went on);
2 bad options or plan; 1 the folder cannot be written; 128 + the signal when interrupted (resumable).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import orjson

from specload.cli_options import click_param
from specload.config import ConfigError, RunConfig
from specload.exitcode import ExitCode
from specload.options import build, option_fields
from specload.preflight import preflight
from specload.report.report import GreedyCommand
from specload.sweep.plan import DEFAULT_URL, PlanError, SweepPlan, grid_configs, parse_config, plan_words
from specload.sweep.state import SweepState, check_out_dir

# RunConfig fields the sweep sets itself, or that name another run
NOT_SWEPT = frozenset({"url", "launch", "path", "label", "baseline", "until_decided", "sim_args"})
# sweep options a --resume may come with (the plan is the interrupted one's)
WITH_RESUME = frozenset({"resume", "as_json", "progress_fd", "tui"})


def _fail(msg: str, code: int = ExitCode.USAGE) -> None:
    click.echo(f"specload sweep: error: {msg}", err=True)
    sys.exit(code)


class SweepCommand(GreedyCommand):
    greedy = ("--grid",)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["sweep_words"] = list(args)
        return super().parse_args(ctx, args)


def _run_options(fn: Any) -> Any:
    for f, opt, hint in reversed(option_fields(RunConfig)):
        if f.name not in NOT_SWEPT:
            fn = click_param(f.name, opt, hint, f.default)(fn)
    return fn


@click.command("sweep", cls=SweepCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("plan_file", required=False, metavar="[PLAN.toml]")
@click.option("--launch", "launch_template", metavar="CMD",
              help="The server's command: {port} is a free port specload picks, {args} the configuration's "
                   "arguments.")
@click.option("--config", "configs", multiple=True, metavar="NAME='ARGS'",
              help="A configuration: its name and its arguments for {args} (repeatable, in order).")
@click.option("--grid", "grid", multiple=True, metavar="KEY=V1,V2 ...",
              help="Every combination of these values as configurations, each KEY given as --KEY V.")
@click.option("--baseline", "baseline_name", metavar="NAME", help="The configuration compared against "
              "[default: the first].")
@click.option("--repeats", type=click.IntRange(1, 100), help="Runs of each configuration, interleaved A B B A "
              "[default: 1].")
@click.option("--retries", type=click.IntRange(0, 10), help="Attempts again after a crash or a failed start "
              "[default: 1].")
@click.option("--url", "url_template", metavar="URL", help=f"The server's URL [default: {DEFAULT_URL}].")
@click.option("--out", "out", metavar="DIR", help="The sweep's folder: sweep.json and the runs' records "
              "[default: sweep-DATE-TIME].")
@click.option("--resume", "resume", metavar="DIR", help="Continue the interrupted sweep in DIR (its plan; runs "
              "with complete records kept, the others run again).")
@click.option("--port-wait", "port_wait_s", type=click.FloatRange(0, 3600), help="Seconds to wait for a port "
              "still in use [default: 60].")
@click.option("--gpu-wait", "gpu_wait_s", type=click.FloatRange(0, 3600), help="Seconds to wait for a stopped "
              "server's GPU memory to be given back, where it can be read here [default: 120].")
@click.option("--json", "as_json", is_flag=True, help="Print sweep.json on stdout at the end.")
@click.option("--tui", "tui", is_flag=True, help="Watch it in the dashboard (the same as 'specload tui --sweep').")
@click.option("--progress-fd", "progress_fd", type=int, hidden=True)
@_run_options
@click.pass_context
def sweep_command(ctx: click.Context, **params: Any) -> None:
    """Launch each server configuration in turn, run the same load against it, stop it, and compare.

    \b
    specload sweep --launch 'llama-server -m M.gguf --port {port} {args}' \\
        --config base='-np 4' --config spec='-np 4 --spec-type ngram-mod' -c 1,4,16 --out sw
    specload sweep PLAN.toml                 the same from a plan file
    specload sweep --resume sw               continue an interrupted sweep
    specload report sw [--html sw.html]      its table (and a page) again
    """
    if params["resume"]:
        extra = [k for k, v in params.items() if k not in WITH_RESUME and v not in (None, (), False)]
        if extra:
            _fail(f"--resume takes the plan from {params['resume']}/sweep.json: give no other options "
                  f"(--{extra[0].replace('_', '-')})")
        try:
            state = SweepState.load(check_out_dir(params["resume"], resume=True))
        except PlanError as e:
            _fail(str(e))
        stored = {k: tuple(v) if isinstance(v, list) else v for k, v in state.doc["params"].items()}
        params = {**stored, **{k: params[k] for k in WITH_RESUME if k != "resume"}, "resume": params["resume"]}
    elif params["plan_file"]:
        words = ctx.meta.get("sweep_words", [])
        rest = [w for w in words if w != params["plan_file"]]
        try:
            plan_args = plan_words(params["plan_file"], flags=_flag_kinds(sweep_command))
        except PlanError as e:
            _fail(str(e))
        sub = sweep_command.make_context("sweep", [*plan_args, *rest])
        params = {**sub.params, "plan_file": None}
    plan, base = _plan_and_config(params, ctx.meta.get("sweep_words", []))
    if params["tui"]:  # the same command in a process of its own, its progress on the screen
        from specload.ui.sweep import run_sweep_tui

        sys.exit(run_sweep_tui([w for w in ctx.meta.get("sweep_words", []) if w != "--tui"]))
    if params["resume"]:
        state = SweepState.load(Path(params["resume"]))
    else:
        out = params["out"] or time.strftime("sweep-%Y%m%d-%H%M%S")
        try:
            folder = check_out_dir(out, resume=False)
        except PlanError as e:
            _fail(str(e), ExitCode.ERROR)
        kept = {k: v for k, v in params.items() if k not in ("resume", "tui", "progress_fd", "plan_file")}
        state = SweepState.new(folder, plan, kept, os.urandom(4).hex())
        try:
            state.save()
        except OSError as e:
            _fail(f"cannot write {folder}/sweep.json: {e.strerror or e}", ExitCode.ERROR)
    sys.exit(run_sweep(plan, base, state, params))


def _flag_kinds(cmd: click.Command) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for p in cmd.params:
        if not isinstance(p, click.Option):
            continue
        kind = "flag" if p.is_flag else "multiple" if p.multiple else "value"
        for flag in p.opts:
            if flag.startswith("--"):
                kinds[flag] = kind
        for flag in p.secondary_opts:
            kinds[flag] = "negative"
    return kinds


def _plan_and_config(params: dict[str, Any], words: list[str]) -> tuple[SweepPlan, RunConfig]:
    if not params["launch_template"]:
        _fail("--launch 'CMD ... {args}' is needed: the command that starts the server")
    try:
        configs = [parse_config(t) for t in params["configs"]] + grid_configs(params["grid"])
        if not configs:
            raise PlanError("no configurations: give --config NAME='ARGS' (and more), --grid, or a plan file")
        plan = SweepPlan(params["launch_template"], tuple(configs), params["baseline_name"] or configs[0].name,
                         params["repeats"] or 1, 1 if params["retries"] is None else params["retries"],
                         params["url_template"] or DEFAULT_URL)
    except PlanError as e:
        _fail(str(e))
    run_fields = {f.name for f, _, _ in option_fields(RunConfig)}
    run_params = {k: v for k, v in params.items() if k in run_fields}
    run_params["url"] = plan.server_url(1)  # the form checked here; each attempt gets its own port
    try:
        base = build(RunConfig, run_params, ui=False)
        if params.get("warmup_requests") is None:  # a sweep warms each fresh server up before it measures
            warm = max(4, 2 * base.load.concurrency[0])
            base = replace(base, load=replace(base.load, warmup_requests=warm))
        base = preflight(base)
    except ConfigError as e:
        _fail(str(e))
    return plan, replace(base, command=shlex.join(["specload", "sweep", *words]))


def run_sweep(plan: SweepPlan, base: RunConfig, state: SweepState, params: dict[str, Any]) -> int:
    """Run (or resume) the sweep, then write its result into sweep.json and print it."""
    from specload.headless import HeadlessPrinter, status_text
    from specload.sweep.loop import Sweep, Waits
    from specload.warmup import install_loop

    install_loop()
    printer = HeadlessPrinter()
    progress = None
    if params.get("progress_fd") is not None:
        stream = os.fdopen(params["progress_fd"], "wb", buffering=0)

        def progress(event: dict[str, Any]) -> None:
            with contextlib.suppress(OSError, ValueError, TypeError):
                stream.write(orjson.dumps(event, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")

    async def status(session: Any, where: str) -> None:
        while True:
            await asyncio.sleep(1.0)
            text = status_text(session)
            if text is not None:
                printer.show_status(f"{where} · {text.removeprefix('specload: ')}")

    waits = Waits(port_s=60.0 if params.get("port_wait_s") is None else params["port_wait_s"],
                  gpu_s=120.0 if params.get("gpu_wait_s") is None else params["gpu_wait_s"],
                  gpu_source=base.watch.gpu_metrics)
    sweep = Sweep(plan, base, state, waits=waits, say=printer.err, progress=progress,
                  status=status if sys.stderr.isatty() else None)
    try:
        code = asyncio.run(sweep.run())
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
    finally:
        printer.clear_status()
    result = finish(state, base)
    if progress is not None:
        progress({"kind": "end", "exit_code": code, "result": {k: result[k] for k in ("best_by_level", "schedule_text")}})
    with contextlib.suppress(OSError):
        if params.get("as_json"):
            from specload.report.sweep import shown

            sys.stdout.write(orjson.dumps(shown(state.doc), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            from specload.report.report import wide_console
            from specload.report.sweep import render

            render(result, wide_console(), title=str(state.dir))
    return code


def finish(state: SweepState, base: RunConfig) -> dict[str, Any]:
    """The result of the runs so far, into sweep.json."""
    from specload.report.sweep import sweep_result

    result = sweep_result(state.doc, state.dir, primary=base.compare.primary,
                          min_effect=base.compare.min_effect_pct / 100)
    state.doc.update(result)
    try:
        state.save()
    except OSError as e:
        click.echo(f"specload sweep: cannot write {state.path}: {e.strerror or e}", err=True)
    return result
