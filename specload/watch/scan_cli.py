"""``specload scan-log FILE``: find crash signatures in a saved server log.

The command is a thin shell over :func:`specload.watch.signatures.scan_text`: it owns reading the file
(bytes, decoded leniently: server logs carry raw control bytes and broken UTF-8), the two output formats
and the exit codes, so scripts can use it as a check:

* 0: no crash found; 1: at least one crash found; 2: usage error or the file could not be read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from specload.watch.signatures import CrashEntry, scan_text

EXIT_CLEAN = 0
EXIT_CRASH = 1
EXIT_USAGE = 2

_EXCERPT_HEAD = 1  # lines shown from the start of an excerpt (the header or the marker line)
_EXCERPT_TAIL = 5  # lines shown from its end (innermost frame and exception line)
_LINE_WIDTH = 160


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    return Path(path).read_bytes()


def entry_json(entry: CrashEntry) -> dict[str, object]:
    """The ``--json`` object of one entry."""
    return {
        "exception_type": entry.exception_type,
        "message": entry.message,
        "innermost_frame": entry.innermost_frame,
        "process": entry.process,
        "signature": entry.signature,
        "line": entry.line_no,
        "causes": list(entry.causes),
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


def format_human(entries: list[CrashEntry], source: str) -> str:
    """One block per distinct signature, in order of first appearance."""
    if not entries:
        return f"{source}: no crash found"
    groups: dict[str, list[CrashEntry]] = {}
    for e in entries:
        groups.setdefault(e.signature, []).append(e)
    out = [
        f"{source}: {len(groups)} crash signature{'s' if len(groups) != 1 else ''} "
        f"({len(entries)} entr{'ies' if len(entries) != 1 else 'y'})"
    ]
    for i, (sig, group) in enumerate(groups.items(), 1):
        first = group[0]
        frame = next((e.innermost_frame for e in group if e.innermost_frame), None)
        processes = [e.process for e in group if e.process is not None]
        headline = first.exception_type + (f": {first.message}" if first.message else "")
        out.append("")
        out.append(click.style(f"[{i}] ", bold=True) + click.style(_clip(headline), fg="red", bold=True))
        out.append(f"    signature:  {sig}")
        if frame:
            out.append(f"    innermost:  {frame}")
        where = ", ".join(processes) if processes else "(no process tag)"
        if processes and len(processes) < len(group):
            where += " and untagged"
        out.append(f"    seen:       {len(group)}x on {where}; first at line {first.line_no}")
        for cause in first.causes:
            out.append(f"    caused by:  {_clip(cause)}")
        out.append("    excerpt:")
        out.extend(click.style(f"      | {ln}", dim=True) for ln in _short_excerpt(first.excerpt))
    return "\n".join(out)


@click.command("scan-log")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per crash entry and line.")
def scan_log_command(file: str, as_json: bool) -> None:
    """Find crash signatures in a server log FILE ('-' for stdin).

    Exit status: 0 no crash, 1 crash found, 2 usage or read error.
    """
    try:
        data = _read(file)
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        click.echo(f"specload scan-log: cannot read {file}: {reason}", err=True)
        sys.exit(EXIT_USAGE)
    entries = scan_text(data.decode("utf-8", errors="replace"))
    if as_json:
        stdout = sys.stdout.buffer
        for e in entries:
            stdout.write(orjson.dumps(entry_json(e)) + b"\n")
        stdout.flush()
    else:
        click.echo(format_human(entries, "stdin" if file == "-" else file))
    sys.exit(EXIT_CRASH if entries else EXIT_CLEAN)
