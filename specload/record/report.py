"""The level table: printed by a headless run as it goes, and by ``specload report`` from a record.

Both paths format ``LevelSummary`` objects with the same functions, so a report of a record shows
exactly the table the run printed. Levels missing from a record cut short are recomputed from its
request lines (ITL percentiles then come from per-request medians, flagged in the output).
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from specload.record.reader import RecordData, RecordReadError, read_record
from specload.stats.levels import LevelColumns, LevelSummary


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def level_line(s: LevelSummary) -> str:
    """One line per finished level, in the format of the per-level script users already know."""
    return (
        f"C={s.concurrency:>3} | {s.requests} requests | throughput: {s.throughput_tok_s:>7.1f} tok/s | "
        f"per-req: {s.per_request_tok_s:>7.1f} tok/s | latency avg/p50/p99: "
        f"{_f(s.e2e_s_avg, '{:>6.1f}')}/{_f(s.e2e_s_p50, '{:>6.1f}')}/{_f(s.e2e_s_p99, '{:>6.1f}')}s | "
        f"ok: {s.ok}/{s.requests}"
    )


def level_cells(s: LevelSummary, dash: str = "-") -> dict[str, str]:
    """The cells of one level row by column name: the headless table, the report and the TUI's
    table all format a level with this, so they show the same figures."""

    def f(v: float | None, fmt: str = "{:.1f}") -> str:
        return dash if v is None else fmt.format(v)

    return {
        "C": str(s.concurrency),
        "tok/s": f"{s.throughput_tok_s:.1f}",
        "req tok/s": f"{s.per_request_tok_s:.1f}",
        "TTFT p50/p99 ms": f"{f(s.ttft_ms_p50)}/{f(s.ttft_ms_p99)}",
        "TPOT ms": f(s.tpot_ms_p50, "{:.2f}"),
        "latency avg/p50/p99 s": f"{f(s.e2e_s_avg, '{:.2f}')}/{f(s.e2e_s_p50, '{:.2f}')}/{f(s.e2e_s_p99, '{:.2f}')}",
        "tokens": f"{s.output_tokens}{'~' if s.tokens_estimated else ''}",
        "wall s": f"{s.wall_s:.1f}",
        "ok": f"{s.ok}/{s.requests}",
        "errors": ", ".join(f"{k} {n}" for k, n in s.errors) if s.errors else dash,
    }


TABLE_COLUMNS = (
    "C", "tok/s", "req tok/s", "TTFT p50/p99 ms", "TPOT ms", "latency avg/p50/p99 s", "tokens", "wall s", "ok",
    "errors",
)


def level_table(levels: list[LevelSummary], title: str | None = None) -> Table:
    t = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
    for name in TABLE_COLUMNS:
        t.add_column(name, justify="left" if name == "errors" else "right", no_wrap=name != "errors")
    for s in levels:
        cells = level_cells(s)
        t.add_row(*(cells[name] for name in TABLE_COLUMNS))
    return t


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 160 columns when piped (no squeezed cells)."""
    import sys as _sys

    return Console() if _sys.stdout.isatty() else Console(width=160)


def summaries_from_record(data: RecordData) -> tuple[list[LevelSummary], bool]:
    """The record's level summaries; levels without a ``level`` line are recomputed from requests.

    Returns (summaries in level order, whether any had to be recomputed).
    """
    have = {d.get("level_index"): LevelSummary.from_record(d) for d in data.levels}
    cols: dict[int, LevelColumns] = {}
    for r in data.requests:
        idx = r.get("level_index", 0)
        if r.get("warmup") or idx in have:
            continue
        c = cols.get(idx)
        if c is None:
            c = cols[idx] = LevelColumns(idx, r.get("level", 0))
        ttft, e2e, tpot, itl = r.get("ttft_ms"), r.get("e2e_ms"), r.get("tpot_ms"), r.get("itl_ms_p50")
        err = r.get("error") or {}
        c.add_values(
            start_ns=int(r["start_s"] * 1e9),
            end_ns=int(r.get("end_s", r["start_s"] + (e2e or 0) / 1e3) * 1e9),
            ok=bool(r.get("ok")),
            error_kind=err.get("kind") if isinstance(err, dict) else None,
            output_tokens=r.get("output_tokens", 0),
            estimated=bool(r.get("tokens_estimated")),
            ttft_ns=None if ttft is None else ttft * 1e6,
            e2e_ns=None if e2e is None else e2e * 1e6,
            tpot_ns=None if tpot is None else tpot * 1e6,
            itl_ns=None if itl is None else [itl * 1e6],
        )
    merged = dict(have)
    for idx, c in cols.items():
        merged[idx] = c.summary()
    return [merged[k] for k in sorted(merged)], bool(cols)


def summary_json(levels: list[LevelSummary], extra: dict | None = None) -> dict:
    d = {"levels": [s.as_record() for s in levels]}
    if extra:
        d.update(extra)
    return d


@click.command("report")
@click.argument("record", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the level summaries as JSON.")
def report_command(record: str, as_json: bool) -> None:
    """Print the level table of a recorded run (RECORD is a .jsonl file written with --record)."""
    try:
        data = read_record(record)
    except RecordReadError as e:
        click.echo(f"specload report: {e}", err=True)
        sys.exit(2)
    levels, recomputed = summaries_from_record(data)
    if as_json:
        import orjson

        extra = {
            "target": (data.run or {}).get("target"),
            "end": data.end,
            "truncated": data.truncated,
            "crashes": [
                {k: c.get(k) for k in ("exception_type", "message", "innermost_frame", "processes", "count")}
                for c in data.crashes
            ],
        }
        sys.stdout.write(orjson.dumps(summary_json(levels, extra), option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    console = wide_console()
    run = data.run or {}
    console.print(f"[bold]specload record[/] {record}")
    console.print(
        f"target {run.get('target', '?')}  model {run.get('model', '?')}  api {run.get('api', '?')}  "
        f"started {run.get('started_at', '?')}"
    )
    console.print(level_table(levels))
    if recomputed:
        console.print("[yellow]some levels were recomputed from request lines (record cut short)[/]")
    seen = set()
    for c in data.crashes:
        if c.get("signature") in seen:
            continue
        seen.add(c.get("signature"))
        console.print(
            f"[red]crash[/] {c.get('exception_type')}: {c.get('message')} "
            f"({c.get('innermost_frame') or 'no frame'}) at {_seconds(c.get('first_seen_s', c.get('t_s')))} s"
        )
    end = data.end
    if end is None:
        console.print("[yellow]record has no end line: the run was cut short[/]")
    else:
        console.print(
            f"end: {end.get('reason')} after {_seconds(end.get('elapsed_s'))} s, "
            f"{end.get('ok')}/{end.get('requests')} ok"
        )


def _seconds(v: object) -> str:
    """A record's seconds for reading: one decimal (the record keeps µs)."""
    return f"{v:.1f}" if isinstance(v, (int, float)) else str(v)
