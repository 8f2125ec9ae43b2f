"""``specload run`` (headless) and ``specload tui``: one set of options, one ``RunConfig``.

Both commands turn their options into the same ``RunConfig`` and run the same ``Session``; the TUI
is imported only when it is asked for, so headless runs never load Textual. Bad option values end
in a one-line error and exit status 2; a target that cannot be reached in exit status 1.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass

import click

from specload.cli_options import GroupedCommand, click_options
from specload.config import ConfigError, RunConfig
from specload.exitcode import ExitCode
from specload.options import build, check_fields, option, positive
from specload.preflight import preflight


def _fail(msg: str, code: int = ExitCode.USAGE) -> None:
    click.echo(f"specload: error: {msg}", err=True)
    sys.exit(code)


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """How ``specload run`` prints its result (not part of the run's configuration)."""

    as_json: bool = option(False, "--json", help="Print the summary as JSON on stdout.")
    no_record: bool = option(False, "--no-record", help="No record: without --record a run records to "
                             "specload-DATE-TIME.jsonl in the current directory.")


@dataclass(frozen=True, slots=True)
class TuiOptions:
    """Options of the dashboard itself."""

    headless: bool = option(False, "--headless", help="No UI: the same as 'specload run'.")
    theme: str | None = option(None, "--theme", help="Colour theme (see themes/; the command palette switches live).")
    replay: str | None = option(None, "--replay", path=True, metavar="RUN.jsonl",
                                help="Play a record back in the dashboard (space: pause, n: next level); "
                                     "no load is sent.")
    speed: float = option(1.0, "--speed", check=positive, help="--replay: this many times real time.")
    web: bool = option(False, "--web", help="Serve the dashboard to a browser (textual-serve; one run, one viewer; "
                       'closing the page ends the run; the printed URL carries its token). Needs: pip install "specload[web]".')
    web_host: str = option("127.0.0.1", "--host", help="With --web: the address to listen on (this machine only "
                           "by default).")
    web_port: int = option(8765, "--port", help="With --web: the port to listen on.",
                           check=lambda v: None if 1 <= v <= 65535 else "must be a port number, 1 to 65535")

    def __post_init__(self) -> None:
        check_fields(self)


def _serve_web(tui: TuiOptions, out: OutputOptions, cfg: RunConfig) -> None:
    """``tui --web``: serve the dashboard until interrupted; its one run has these same options and
    records to a file named now, never one that holds a run already."""
    from specload.ui.web import WebError, serve

    given = cfg.record.path
    if given and os.path.isfile(given) and os.path.getsize(given) > 0:
        _fail(f"--record {given} holds a run already: name another file (a record is never overwritten)")
    cfg, note = default_record(cfg, out.no_record)
    if note and note.startswith("no record"):
        _fail(note[len("no record: "):])
    argv = sys.argv[sys.argv.index("tui") + 1:] if "tui" in sys.argv else []
    path = cfg.record.path
    try:
        serve(argv, host=tui.web_host, port=tui.web_port, record=path)
    except WebError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"cannot listen on {tui.web_host}:{tui.web_port}: {e.strerror or e}", ExitCode.ERROR)
    finally:
        _drop_unused(path, given)  # made for the run, which never came
    sys.exit(0)


def build_config(params: dict, *, ui: bool) -> RunConfig:
    """Command-line values (``ctx.params``) -> the RunConfig to run (preflight done), or ConfigError
    with a one-line message."""
    return preflight(build(RunConfig, params, ui=ui))


def _config_or_exit(params: dict, *, ui: bool) -> RunConfig:
    """The checked config, its files read, or a one-line usage error (exit 2) before anything starts."""
    try:
        cfg = build_config(params, ui=ui)
    except ConfigError as e:
        _fail(str(e))
    # the command line as given, for the record (secrets are masked when it is written)
    return dataclasses.replace(cfg, command=shlex.join(["specload", *sys.argv[1:]]))


def run_headless(cfg: RunConfig, *, as_json: bool, no_record: bool = False) -> int:
    """A headless run; it records, as the dashboard does, to a file named by the time unless told
    otherwise (a long sweep is never lost to a closed terminal); the note goes to stderr."""
    from specload.headless import run_headless as _run

    if no_record and cfg.record.path:
        _fail("--no-record and --record do not go together")
    given = cfg.record.path
    cfg, note = default_record(cfg, no_record)
    if note:
        click.echo(f"specload: {note}", err=True)
    try:
        return _run(cfg, as_json=as_json)
    finally:
        _drop_unused(cfg.record.path, given)


def _drop_unused(path: str | None, given: str | None) -> None:
    """The file made for the default record, left empty (the run never started): removed."""
    if path and not given and os.path.isfile(path) and os.path.getsize(path) == 0:
        os.remove(path)


EXAMPLES = (
    ("the built-in simulator, ramped (no URL: it is started and used)", "specload run -c 1,4,16,64"),
    ("a server, 64 requests per level, with latency objectives",
     "specload run http://127.0.0.1:8000 -c 1,4,16,64 -n 64 --slo 'ttft_p99<=500ms,tpot_p50<=30ms'"),
    ("a new configuration against a recorded baseline, repeated until decided",
     "specload run http://127.0.0.1:8000 -c 1,4,16,64 --baseline base.jsonl --until-decided"),
    ("the highest concurrency that meets the objectives",
     "specload run http://127.0.0.1:8000 --find-max --slo 'ttft_p99<=1s'"),
    ("watch the server's log for crashes while loading it",
     "specload run http://127.0.0.1:8000 -c 16 --server-log server.log --on-crash stop"),
    ("the table and the report of a record afterwards",
     "specload report specload-20260101-120000.jsonl --html report.html"),
)


@click.command("run", cls=GroupedCommand, examples=EXAMPLES)
@click_options(RunConfig, OutputOptions)
def run_command(**params: object) -> None:
    """Run a load headless (no UI). With no URL, the built-in simulator is started and used.
    Without --record, the run records to specload-DATE-TIME.jsonl here (--no-record: none)."""
    out = build(OutputOptions, params, ui=False)
    cfg = _config_or_exit(params, ui=False)
    sys.exit(run_headless(cfg, as_json=out.as_json, no_record=out.no_record))


TUI_EXAMPLES = (
    ("the dashboard on the built-in simulator", "specload tui"),
    ("a server, its log watched for crashes", "specload tui http://127.0.0.1:8000 --server-log server.log"),
    ("against a baseline, verdicts live", "specload tui http://127.0.0.1:8000 -c 1,4,16,64 --baseline base.jsonl"),
    ("a record played back", "specload tui --replay specload-20260101-120000.jsonl --speed 4"),
    ("in a browser (the printed URL carries its token)", "specload tui --web"),
)


@click.command("tui", cls=GroupedCommand, examples=TUI_EXAMPLES)
@click_options(RunConfig, OutputOptions, TuiOptions)
def tui_command(**params: object) -> None:
    """The live dashboard. With no URL, the built-in simulator is started and ramped. Without
    --record, the run records to specload-DATE-TIME.jsonl here (--no-record: none)."""
    out = build(OutputOptions, params, ui=False)
    try:
        tui = build(TuiOptions, params, ui=True)
    except ConfigError as e:
        _fail(str(e))
    if tui.theme is not None:
        from specload.ui.themes import unknown_theme

        if problem := unknown_theme(tui.theme):
            _fail(problem)
    if tui.replay is not None:
        sys.exit(_replay(tui))
    cfg = _config_or_exit(params, ui=not tui.headless)
    if cfg.compare.schedule_from and not tui.headless:
        _fail("--schedule-from replays a schedule headless: use 'specload run --schedule-from ...'")
    if out.no_record and cfg.record.path:
        _fail("--no-record and --record do not go together")
    if tui.web:
        if tui.headless:
            _fail("--web and --headless do not go together")
        _serve_web(tui, out, cfg)
    if tui.headless:
        sys.exit(run_headless(cfg, as_json=out.as_json, no_record=out.no_record))
    given = cfg.record.path
    cfg, note = default_record(cfg, out.no_record)
    # the engine process first: it builds the session while this one imports the dashboard
    from specload.sources.engine_process import EngineStartError, ProcessSessionSource
    from specload.ui.process import TUI_PROCESS

    try:
        engine = ProcessSessionSource(cfg, on_started=TUI_PROCESS.engine_started, wait=False)
    except EngineStartError as e:
        _fail(str(e), ExitCode.ERROR)
    from specload.ui.app import run_app

    code = run_app(cfg, theme=tui.theme, notice=note, engine=engine)
    _drop_unused(cfg.record.path, given)  # a quit before the load
    sys.exit(code)


def default_record(cfg: RunConfig, no_record: bool, now: float | None = None) -> tuple[RunConfig, str | None]:
    """The dashboard keeps its result: without --record (or --no-record) it records to a file in the
    current directory named by the time; the note says so on screen."""
    if cfg.record.path or no_record:
        return cfg, None
    import time

    from specload.record.writer import RecordError, check_writable

    stem = time.strftime("specload-%Y%m%d-%H%M%S", time.localtime(now))
    # created here, exclusively: two dashboards started in the same second (tmux panes) wrote one file
    for n in range(1, 100):
        path = f"{stem}.jsonl" if n == 1 else f"{stem}-{n}.jsonl"
        try:
            with open(path, "x"):
                pass
            break
        except FileExistsError:
            continue
        except OSError as e:
            return cfg, f"no record: cannot create {path} here ({e.strerror or e})"
    try:
        check_writable(path)
    except RecordError as e:
        return cfg, f"no record: {e}"
    record = dataclasses.replace(cfg.record, path=path)
    return dataclasses.replace(cfg, record=record), f"recording to {path} (--record FILE to name it, --no-record for none)"


def _replay(tui: TuiOptions) -> int:
    """``specload tui --replay RUN.jsonl``: the dashboard fed from a record, no session, no load."""
    from specload.record.reader import RecordReadError, read_record
    from specload.sources.replay import ReplaySource

    if tui.headless:
        _fail("--replay plays a record in the dashboard; for its figures use 'specload report'")
    try:
        data = read_record(tui.replay)  # type: ignore[arg-type]
    except RecordReadError as e:
        _fail(str(e))
    from specload.ui.app import run_replay

    return run_replay(ReplaySource(data, speed=tui.speed), theme=tui.theme)
