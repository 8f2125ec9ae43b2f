"""``specload scan-log FILE``: find crash signatures in a saved server log.

The command is a thin shell over :class:`specload.watch.detector.LogScanner`: it owns reading the file
(streamed a bounded line at a time by :mod:`specload.lines`, so a log of any size is scanned in bounded
memory, and a file with a line over the cap, /dev/zero, is an error; bytes decoded leniently, since
server logs carry raw control bytes and broken UTF-8), the two output formats and the exit codes, so
scripts can use it as a check:

* 0: no crash found; 1: at least one crash found; 2: usage error or the file could not be read.

The human output is one block per failure's root cause, with its count (failures, the same rule as the
live run) and the consequences that followed it; ``--json`` is one object per entry (one per signature
and process), with ``consequence_of`` naming the root cause's signature when the entry followed one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click
import orjson

from specload import lines
from specload.datatypes import CrashEvent
from specload.exitcode import ExitCode
from specload.watch.crashbook import CrashEntry
from specload.watch.detector import LogScanner

EXIT_CLEAN, EXIT_CRASH, EXIT_USAGE = ExitCode.SCAN_CLEAN, ExitCode.SCAN_CRASH, ExitCode.SCAN_ERROR

_EXCERPT_HEAD = 1  # lines shown from the start of an excerpt (the header or the marker line)
_EXCERPT_TAIL = 5  # lines shown from its end (innermost frame and exception line)
_LINE_WIDTH = 160


def read_lines(path: str) -> Iterator[str]:
    """The lines of ``path`` ('-': stdin), streamed one at a time; ``lines.TooLong`` at a line over
    ``lines.MAX_LINE_BYTES``."""
    source: str | int = sys.stdin.fileno() if path == "-" else path
    for _, raw, _ in lines.iter_lines(source, name="stdin" if path == "-" else path):
        yield raw.decode("utf-8", errors="replace").removesuffix("\r")


def scan_file(path: str) -> LogScanner:
    scanner = LogScanner()
    scanner.feed_lines(read_lines(path))
    scanner.finish()
    return scanner


def entry_json(entry: CrashEntry, root: str | None = None) -> dict[str, object]:
    """The ``--json`` object of one entry."""
    return {
        "exception_type": entry.exception_type,
        "message": entry.message,
        "innermost_frame": entry.innermost_frame,
        "process": entry.process,
        "signature": entry.signature,
        "line": entry.line_no,
        "causes": list(entry.causes),
        "consequence_of": root if root is not None and root != entry.signature else None,
    }


def _clip(text: str, width: int = _LINE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _short_excerpt(excerpt: str) -> list[str]:
    lines = [ln for ln in excerpt.split("\n") if ln.strip()]
    if len(lines) <= _EXCERPT_HEAD + _EXCERPT_TAIL:
        return [_clip(ln) for ln in lines]
    skipped = len(lines) - _EXCERPT_HEAD - _EXCERPT_TAIL
    return [
        *(_clip(ln) for ln in lines[:_EXCERPT_HEAD]),
        f"... ({skipped} more lines)",
        *(_clip(ln) for ln in lines[-_EXCERPT_TAIL:]),
    ]


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def format_human(scanner: LogScanner, source: str) -> str:
    """One block per root-cause signature, in order of first appearance, with its consequences."""
    events: list[CrashEvent] = scanner.book.events()
    if not events:
        return f"{source}: no crash found"
    entries = scanner.entries()
    first_line: dict[str, int] = {}
    for e in entries:
        first_line.setdefault(e.signature, e.line_no)
    failures = scanner.book.failures
    out = [
        f"{source}: {_plural(failures, 'failure')}, {_plural(len(events), 'root cause')} "
        f"({_plural(len(entries), 'entry', 'entries')})"
    ]
    for i, ev in enumerate(events, 1):
        headline = ev.exception_type + (f": {ev.message}" if ev.message else "")
        first = next(e for e in entries if e.signature == ev.signature)
        out.append("")
        out.append(click.style(f"[{i}] ", bold=True) + click.style(_clip(headline), fg="red", bold=True))
        out.append(f"    signature:  {ev.signature}")
        if ev.innermost_frame:
            out.append(f"    innermost:  {ev.innermost_frame}")
        where = ", ".join(ev.processes) if ev.processes else "(no process tag)"
        out.append(f"    seen:       {ev.count}x on {where}; first at line {first_line[ev.signature]}")
        for cause in first.causes:
            out.append(f"    caused by:  {_clip(cause)}")
        for c in ev.consequences:
            procs = f" on {', '.join(c.processes)}" if c.processes else ""
            text = c.exception_type + (f": {c.message}" if c.message else "")
            times = f" ({c.count}x)" if c.count > 1 else ""
            out.append(f"    then:       {_clip(text, _LINE_WIDTH - 16)}{procs}{times}")
        out.append("    excerpt:")
        out.extend(click.style(f"      | {ln}", dim=True) for ln in _short_excerpt(ev.excerpt))
    if scanner.cut_lines:
        out.append("")
        out.append(f"({_plural(scanner.cut_lines, 'line')} longer than the line cap examined cut)")
    return "\n".join(out)


@click.command("scan-log")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per crash entry and line.")
def scan_log_command(file: str, as_json: bool) -> None:
    """Find crash signatures in a server log FILE ('-' for stdin).

    Exit status: 0 no crash, 1 crash found, 2 usage or read error.
    """
    try:
        scanner = scan_file(file)
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        click.echo(f"specload scan-log: cannot read {file}: {reason}", err=True)
        sys.exit(EXIT_USAGE)
    except lines.TooLong as exc:
        click.echo(f"specload scan-log: {exc}: not a text log", err=True)
        sys.exit(EXIT_USAGE)
    entries = scanner.entries()
    if as_json:
        stdout = sys.stdout.buffer
        for e in entries:
            stdout.write(orjson.dumps(entry_json(e, scanner.root_of(e))) + b"\n")
        stdout.flush()
    else:
        click.echo(format_human(scanner, "stdin" if file == "-" else file))
    sys.exit(EXIT_CRASH if entries else EXIT_CLEAN)
