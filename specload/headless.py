"""Headless mode: the session with progress on stderr and the level table (or JSON) on stdout.

Progress (notices, one line per finished level in the per-level script's format, crash signatures,
client saturation warnings) goes to stderr as it happens; the final table or ``--json`` summary goes
to stdout, so ``specload run --json > out.json`` is clean. When stderr is a terminal, a status line
below them is rewritten once a second (state, concurrency, the level's progress, tok/s, ok/failed),
so a long level is not a silent one; it is erased before every other line and at the end, and never
written to a pipe or a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from specload.config import RunConfig
from specload.datatypes import CrashEvent, OutputDiverged, RunEvent, SearchProgress, ServerExited
from specload.exitcode import ExitCode
from specload.formatting import level_line, verdict_text
from specload.session import Session, SessionResult
from specload.sources.local import live_view
from specload.stats.client_load import ClientLoad
from specload.stats.levels import LevelSummary
from specload.stats.lossless import divergence_text
from specload.warmup import install_loop

if TYPE_CHECKING:
    from rich.console import Console

    from specload.report.compare import Comparison

STATUS_INTERVAL_S = 1.0
_CLEAR = "\r\x1b[K"


class HeadlessPrinter:
    def __init__(self, stream=None) -> None:  # a text stream, stderr by default
        self.saturated_levels: set[int] = set()
        self.starved_levels: set[int] = set()
        self.stream = stream if stream is not None else sys.stderr
        self.status_shown = False

    def _write(self, text: str) -> None:
        # a terminal that went away (SIGHUP) or a closed pipe must not stop the run's clean end:
        # the launched server still gets stopped and the record closed
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None

    def err(self, text: str) -> None:
        self.clear_status()
        self._write(text + "\n")

    def show_status(self, text: str) -> None:
        width = shutil.get_terminal_size().columns
        self._write(_CLEAR + text[: max(1, width - 1)])
        self.status_shown = True

    def clear_status(self) -> None:
        if self.status_shown:
            self.status_shown = False
            self._write(_CLEAR)

    # ------------------------------------------------------------------ SessionListener

    def phase(self, phase: str) -> None:
        pass

    def notice(self, text: str) -> None:
        self.err(f"specload: {text}")

    def target_found(self, url: str, model: str | None, api: str) -> None:
        self.err(f"specload: target {url}  model {model}  api {api}")

    def run_event(self, event: RunEvent) -> None:
        match event:
            case ServerExited(description=how):
                self.err(f"specload: server {how}")
            case OutputDiverged(finding=finding):
                where, *answers = divergence_text(finding).split("\n")
                self.err(f"specload: OUTPUT DIVERGES from the baseline at {where}")
                for text in answers:
                    self.err(f"specload:   {text}")
            case SearchProgress(progress=progress):
                from specload.report.report import search_progress_line

                if line := search_progress_line(progress):
                    self.err(f"specload: {line}")

    def level_done(self, summary: LevelSummary) -> None:
        self.err(level_line(summary))

    def crash(self, crash: CrashEvent) -> None:
        if crash.new:
            where = f" at {crash.innermost_frame}" if crash.innermost_frame else ""
            procs = f" on {', '.join(crash.processes)}" if crash.processes else ""
            self.err(f"specload: SERVER CRASH {crash.exception_type}: {crash.message}{where}{procs}")

    def client_load(self, load: ClientLoad, level: int) -> None:
        # one warning per level and kind: a saturated level stays saturated for its whole length
        seen = self.starved_levels if load.starved else self.saturated_levels if load.saturated else None
        if seen is not None and level not in seen:
            seen.add(level)
            self.err(f"specload: WARNING {load.warning(level)}")

    def ended(self, result: SessionResult) -> None:
        pass


def status_text(session: Session) -> str | None:
    """One line on the run so far, or None before the load starts."""
    if session.runner is None:
        return None
    rs = session.runner.snapshot()
    snap = session.stats.snapshot()
    parts = [f"{session.state_label()} C={rs.target} in flight {rs.in_flight}"]
    if session.outputs is not None:
        parts.append(session.outputs.view().text(short=True))  # whether the answers are right: early, not cut off
    if rs.level_index >= 0:
        level = f"level {rs.level_number}/{rs.level_count}" if rs.level_number else "manual level"
        if rs.level_total:
            fmt = "{:.0f}" if rs.level_unit == "requests" else "{:.1f}"
            level += f" {fmt.format(rs.level_done)}/{rs.level_total:g} {rs.level_unit}"
        parts.append(level)
    else:
        parts.append("warm-up")
    parts.append(f"{snap.tok_s:.0f} tok/s")
    failed = f", {snap.requests_failed} failed" if snap.requests_failed else ""
    parts.append(f"{snap.requests_ok}/{snap.requests_total} ok{failed}")
    view = live_view(session)
    if view is not None:
        hw = view.estimate.half_width_pct
        if hw is not None and view.estimate.estimable:
            parts.append(f"{view.metric} +-{hw:.1f}%")
        if view.baseline is not None and view.ratio is not None:
            r = view.ratio
            ci = f" [{r.ci_low:.2f}, {r.ci_high:.2f}]" if r.ci_low == r.ci_low else ""
            verdict = view.decision.verdict if view.decision is not None else None
            parts.append(f"vs baseline x{r.ratio:.2f}{ci} {verdict_text(verdict)}")
    return "specload: " + " · ".join(parts)


async def _status_loop(session: Session, printer: HeadlessPrinter, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        text = status_text(session)
        if text is not None:
            printer.show_status(text)


async def _run_with_status(session: Session, printer: HeadlessPrinter, status: bool) -> SessionResult:
    async with asyncio.TaskGroup() as tg:
        ticker = tg.create_task(_status_loop(session, printer, STATUS_INTERVAL_S)) if status else None
        try:
            return await session.run()
        finally:
            if ticker is not None:
                ticker.cancel()
            printer.clear_status()


def run_headless(cfg: RunConfig, *, as_json: bool) -> int:
    install_loop()
    printer = HeadlessPrinter()
    session = Session(cfg, listener=printer, handle_signals=True)
    status = sys.stderr.isatty()
    try:
        result: SessionResult = asyncio.run(_run_with_status(session, printer, status))
    except KeyboardInterrupt:
        printer.err("specload: interrupted")
        return ExitCode.INTERRUPTED
    if result.message:
        printer.err(f"specload: error: {result.message}")
    if result.reason == "error":
        return result.exit_code or ExitCode.ERROR
    with contextlib.suppress(OSError):  # stdout gone (terminal hung up, pipe closed): the record has it all
        print_summary(session, result, as_json=as_json, saturated=printer.saturated_levels,
                      starved=printer.starved_levels)
    snap = session.stats.snapshot()
    if result.exit_code == 0 and snap.requests_total > 0 and snap.requests_ok == 0:
        printer.err("specload: every request failed")
        return ExitCode.ALL_FAILED
    return result.exit_code


def print_tui_end(result: SessionResult | None, record_path: str | None, stream=None,
                  cfg: RunConfig | None = None) -> None:
    """After the TUI quits: the level table a headless run prints, the per-category verdicts against
    a --baseline (``cfg``), how the run ended and where its record is (the dashboard's screen is gone
    with the alternate screen; a two-minute ramp once left nothing behind)."""
    from rich.console import Console

    from specload.report.report import level_table, output_width

    # the terminal's own width (a terminal is asked, never COLUMNS: pytest leaves 80 there), else
    # COLUMNS or 160 (report.output_width); the table is fitted to it, never cut
    out = stream if stream is not None else sys.stdout
    console = Console(file=out, width=output_width(out))
    levels = list(result.levels) if result is not None else []
    with contextlib.suppress(OSError):  # stdout gone: the record has it all
        if levels:
            console.print(level_table(levels, width=console.width))
        by_category = baseline_by_category(cfg, levels) if cfg is not None else None
        if by_category is not None:
            from specload.report.compare import render_categories

            render_categories(by_category, console)
        if result is not None:
            print_findings(console, result)
            console.print(f"end: {result.reason}", highlight=False)
        if record_path and os.path.isfile(record_path) and os.path.getsize(record_path) == 0:
            console.print("record: none (the run ended before anything was recorded)", highlight=False)
        else:
            console.print(f"record: {record_path}" if record_path else "record: none (--no-record)", highlight=False)


def print_findings(console: Console, result: SessionResult) -> None:
    """What a run's end says beside its table, headless and after the TUI: the workload's warnings
    (the dashboard's were toasts, gone in seconds) and the server's crash signatures."""
    from rich.markup import escape

    for line in result.workload_warnings:
        console.print(f"[yellow]⚠ workload: {escape(line)}[/]")
    for c in result.crashes:
        # the server's text is never markup: a log line holding "[/]" must not end the run in a traceback
        console.print(f"[red]crash[/] {escape(c.exception_type)}: {escape(c.message)} (x{c.count})", highlight=False)


def print_summary(
    session: Session, result: SessionResult, *, as_json: bool, saturated: set[int], starved: AbstractSet[int] = frozenset()
) -> None:
    from specload.report.report import level_table, summary_json

    levels = list(result.levels)
    snap = session.stats.snapshot()
    if as_json:
        import orjson

        extra = {
            "target": session.url,
            "model": session.model,
            "api": session.api,
            "reason": result.reason,
            "exit_code": result.exit_code,
            "requests": snap.requests_total,
            "ok": snap.requests_ok,
            "errors": dict(snap.errors_by_kind),
            "crashes": [
                {
                    "exception_type": c.exception_type,
                    "message": c.message,
                    "innermost_frame": c.innermost_frame,
                    "processes": list(c.processes),
                    "count": c.count,
                }
                for c in snap.crashes
            ],
            "client_saturated_levels": sorted(saturated),
            "client_starved_levels": sorted(starved),
            "record": session.cfg.record.path,
            "workload_warnings": list(result.workload_warnings),
        }
        if result.search is not None:
            extra["search"] = result.search.as_record()
        by_category = baseline_by_category(session.cfg, levels)
        if by_category is not None:
            from specload.report.compare import to_json

            extra["baseline_categories"] = {lv["key"]: lv["categories"] for lv in to_json(by_category)["levels"]
                                            if lv.get("categories")}
        sys.stdout.write(orjson.dumps(summary_json(levels, extra), option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from specload.report.report import wide_console

    console = wide_console()
    if levels:
        console.print(level_table(levels, width=console.width))
    errs = ", ".join(f"{k} {n}" for k, n in snap.errors_by_kind) or "none"
    console.print(f"{snap.requests_ok}/{snap.requests_total} ok; errors: {errs}; end: {result.reason}")
    print_findings(console, result)
    by_category = baseline_by_category(session.cfg, levels)
    if by_category is not None:
        from specload.report.compare import render_categories

        render_categories(by_category, console)
    if result.search is not None:
        from specload.report.report import search_lines

        for line in search_lines(result.search.as_record()):
            console.print(line, highlight=False)
    if session.cfg.record.path:
        console.print(f"record: {session.cfg.record.path}", highlight=False)


def baseline_by_category(cfg: RunConfig, levels: Sequence[LevelSummary]) -> Comparison | None:
    """With --baseline, --record and a dataset's categories: the record against the baseline as
    ``report BASE RUN`` judges them, for its per-category verdicts (the live judge gives the
    level's; headless and the TUI show them at the end); None when there is nothing to judge or a
    file cannot be read."""
    from specload.record.runs import RunReadError, load_run
    from specload.report.compare import Side, compare

    base, path = cfg.compare.baseline, cfg.record.path
    if not base or not path or not any(s.categories for s in levels):
        return None
    try:
        sides = [Side("baseline", (load_run(base),)), Side(cfg.label or "this run", (load_run(path),))]
        return compare(sides, primary=cfg.compare.primary)
    except (RunReadError, ValueError):
        return None
