"""Command-line entry point: a click group whose subcommands are imported only when used.

Lazy loading keeps ``specload run`` (headless) free of Textual and fast to start: the start-up path
imports only the command that runs. Each subcommand lives next to what it drives.
"""

from __future__ import annotations

import importlib
import sys

import click

from specload import __version__
from specload.exitcode import ExitCode

# name -> "module:attribute" of a click.Command
_COMMANDS: dict[str, str] = {
    "run": "specload.cli_run:run_command",
    "tui": "specload.cli_run:tui_command",
    "report": "specload.report.report:report_command",
    "sim": "specload.sim.cli:sim_command",
    "scan-log": "specload.watch.scan_cli:scan_log_command",
    "sweep": "specload.sweep.cli:sweep_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specload")
def cli() -> None:
    """Load-test LLM inference servers and watch them for crashes."""


def _standard_fds() -> None:
    """Started with stdin, stdout or stderr closed (``2>&-``): put /dev/null there. Otherwise the
    next file, pipe or socket opened takes that number and output meant for the terminal lands in
    it (a run exited 1 silently at start), and uvloop aborts closing a descriptor below 3."""
    import os

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            name = ("stdin", "stdout", "stderr")[fd]
            if getattr(sys, name) is None:  # Python found the descriptor closed at start-up
                setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115


def _signals_back() -> None:
    """A shell starts a background job (``specload run ... &``) with SIGINT ignored, and a parent may
    ignore SIGTERM: a Ctrl-C or kill sent before the run caught them itself was lost, and the run went
    on to exit 0. From here on they end specload as they would in the foreground; a run, from its
    start, turns them into a quit as 'q' does (``session/policy.catch_signals``). A SIGHUP ignored
    by ``nohup`` stays ignored: that is what it is for."""
    import signal

    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, default)


def error_text(e: click.ClickException) -> str:
    """A click error's message on one line: click quotes what the user typed (an extra argument, a bad
    choice) as it came, and an argument holding a line break would split the error line."""
    message = e.format_message()
    if any(ch < " " or ch == "\x7f" for ch in message):
        message = "".join(repr(ch)[1:-1] if ch < " " or ch == "\x7f" else ch for ch in message)
    return message


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Usage errors are one line (``specload: error: ...``, exit 2), never a usage dump."""
    _standard_fds()
    _signals_back()
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["tui"] and "--sweep" in args:  # the dashboard over a sweep: 'specload sweep --tui ...'
        args = ["sweep", "--tui", *(a for a in args[1:] if a != "--sweep")]
    try:
        rc = cli.main(args=args, prog_name="specload", standalone_mode=False)
    except click.exceptions.UsageError as e:
        hint = f" (see 'specload {e.ctx.info_name} --help')" if e.ctx is not None and e.ctx.parent else ""
        click.echo(f"specload: error: {error_text(e)}{hint}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"specload: error: {error_text(e)}", err=True)
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("specload: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
