"""Headless mode: the session with progress on stderr and the level table (or JSON) on stdout.

Progress (notices, one line per finished level in the per-level script's format, crash signatures,
client saturation warnings) goes to stderr as it happens; the final table or ``--json`` summary goes
to stdout, so ``specload run --json > out.json`` is clean.
"""

from __future__ import annotations

import asyncio
import sys

from specload.config import RunConfig
from specload.records import CrashEvent, RunEvent
from specload.session import EXIT_ALL_FAILED, EXIT_ERROR, Session, SessionResult
from specload.stats.levels import LevelSummary


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class HeadlessPrinter:
    def __init__(self) -> None:
        self.saturated_levels: set[int] = set()

    def __call__(self, kind: str, payload: object) -> None:
        if kind == "notice":
            _err(f"specload: {payload}")
        elif kind == "target":
            d = payload  # type: ignore[assignment]
            _err(f"specload: target {d['url']}  model {d['model']}  api {d['api']}")  # type: ignore[index]
        elif kind == "level":
            from specload.record.report import level_line

            assert isinstance(payload, LevelSummary)
            _err(level_line(payload))
        elif kind == "crash":
            assert isinstance(payload, CrashEvent)
            if payload.new:
                where = f" at {payload.innermost_frame}" if payload.innermost_frame else ""
                procs = f" on {', '.join(payload.processes)}" if payload.processes else ""
                _err(f"specload: SERVER CRASH {payload.exception_type}: {payload.message}{where}{procs}")
        elif kind == "event":
            assert isinstance(payload, RunEvent)
            if payload.kind == "server_exit":
                _err(f"specload: server {payload.value}")
        elif kind == "saturated":
            load, level = payload  # type: ignore[misc]
            if level not in self.saturated_levels:
                self.saturated_levels.add(level)
                _err(
                    f"specload: WARNING client saturated at C={level} (cpu {load.cpu_pct:.0f}%, loop lag "
                    f"{load.loop_lag_ms:.0f} ms): latencies at this level are client-bound"
                )
        elif kind == "waiting":
            elapsed, line = payload  # type: ignore[misc]
            _err(f"specload: waiting for the server ({elapsed:.0f} s){': ' + line if line else ''}")


def _install_loop() -> None:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_headless(cfg: RunConfig, *, as_json: bool) -> int:
    _install_loop()
    printer = HeadlessPrinter()
    session = Session(cfg, listener=printer, handle_signals=True)
    try:
        result: SessionResult = asyncio.run(session.run())
    except KeyboardInterrupt:
        _err("specload: interrupted")
        return 130
    if result.message:
        _err(f"specload: error: {result.message}")
    if result.reason == "error":
        return result.exit_code or EXIT_ERROR
    print_summary(session, result, as_json=as_json, saturated=printer.saturated_levels)
    snap = session.stats.snapshot()
    if result.exit_code == 0 and snap.requests_total > 0 and snap.requests_ok == 0:
        _err("specload: every request failed")
        return EXIT_ALL_FAILED
    return result.exit_code


def print_summary(session: Session, result: SessionResult, *, as_json: bool, saturated: set[int]) -> None:
    from specload.record.report import level_table, summary_json

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
            "record": session.cfg.record.path,
        }
        sys.stdout.write(orjson.dumps(summary_json(levels, extra), option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from specload.record.report import wide_console

    console = wide_console()
    if levels:
        console.print(level_table(levels))
    errs = ", ".join(f"{k} {n}" for k, n in snap.errors_by_kind) or "none"
    console.print(f"{snap.requests_ok}/{snap.requests_total} ok; errors: {errs}; end: {result.reason}")
    for c in snap.crashes:
        console.print(f"[red]crash[/] {c.exception_type}: {c.message} (x{c.count})", highlight=False)
    if session.cfg.record.path:
        console.print(f"record: {session.cfg.record.path}", highlight=False)
