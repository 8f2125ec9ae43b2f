"""The level table: printed by a headless run as it goes, and by ``specload report`` from a record.

Both paths format ``LevelSummary`` objects with the same functions, so a report of a record shows
exactly the table the run printed. Levels missing from a record cut short are recomputed from its
request lines (ITL percentiles then come from per-request medians, flagged in the output).
"""

from __future__ import annotations

import contextlib
import os
import sys

import click
from rich.console import Console, Group
from rich.markup import escape

from specload.datatypes import ServerSample
from specload.exitcode import ExitCode
from specload.formatting import (
    ASCII_DASH,
    accept_cell,
    fitted_table,
    level_cells,
    pct_interval,
    seconds,
    table_columns,
)
from specload.record.reader import RecordData, RecordReadError, read_record
from specload.record.schema import SERVER_FIELDS
from specload.stats.level_metrics import DEFAULT_PRIMARY, METRICS
from specload.stats.levels import LevelColumns, LevelSummary
from specload.stats.lossless import NEAR_TIE_NATS
from specload.stats.server_levels import ServerLevels
from specload.stats.slo import SloSpec


def level_table(levels: list[LevelSummary], title: str | None = None, *, wide: bool = False,
                width: int = 160) -> Group:
    """The level table at ``width`` characters: one table, or its parts (``formatting.fit_columns``)."""
    columns = table_columns(levels, wide=wide)
    rows = []
    for s in levels:
        cells = level_cells(s)
        rows.append([cells[name] for name in columns])
    return fitted_table(list(columns), rows, width, title=title, left=("errors", "SLO"))


def output_width(stream=None) -> int:
    """The width tables are fitted to: a terminal's own width; in a file or a pipe, ``COLUMNS`` when it
    is set, else 160."""

    out = stream if stream is not None else sys.stdout
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if out.isatty():
            return os.get_terminal_size(out.fileno()).columns
    try:
        return max(20, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 160


def wide_console(stream=None) -> Console:
    """A console for tables at ``output_width``."""
    return Console(file=stream, width=output_width(stream))


def _at(axis: str | None, v: object) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"C={v:g}" if axis != "rate" else f"{v:g} req/s"


def _iv(v: object, fmt: str = "{:.1f}") -> str:
    """``[value, lo, hi]`` from a record as ``value (lo-hi)``."""
    if not isinstance(v, list) or len(v) != 3 or v[0] is None:
        return "-"
    if v[1] is None or v[2] is None:
        return fmt.format(v[0]) + " (unbounded)"
    return f"{fmt.format(v[0])} ({fmt.format(v[1])}-{fmt.format(v[2])})"


_AXIS: dict[int, str] = {}  # probe progress lines need the search's axis; one search at a time


GROUP_COLUMNS = ("C", "requests", "ok", "tok/s", "req tok/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "E2E p50 s",
                 "prompt tok", "cached", "accept")
# the columns a narrow group table keeps in its first part, most important first
GROUP_IMPORTANCE = ("tok/s", "ok", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "accept", "requests", "req tok/s",
                    "E2E p50 s", "prompt tok", "cached")


def group_table(levels: list[LevelSummary], by: str, width: int = 160) -> Group:
    """``report --by category|turn``: each level's requests of one category (or turn) per row, fitted
    to ``width`` as the level table is. accept: the requests' own speculative counts (length / rate),
    beside the level's server figure."""
    d = ASCII_DASH
    f = lambda v, fmt="{:.1f}": d if v is None else fmt.format(v)  # noqa: E731
    rows = []
    for s in levels:
        groups = (s.categories if by == "category" else s.turns) or ()
        for name, g in groups:
            rate = d if g.accept_rate is None else f"{100 * g.accept_rate:.0f}%"
            rows.append([name, str(s.concurrency), str(g.requests), str(g.ok), f(g.throughput_tok_s),
                         f(g.per_request_tok_s), f"{f(g.ttft_ms_p50)}/{f(g.ttft_ms_p99)}",
                         f"{f(g.tpot_ms_p50, '{:.2f}')}/{f(g.tpot_ms_p99, '{:.2f}')}", f(g.e2e_s_p50, "{:.2f}"),
                         f(g.prompt_tokens_avg, "{:.0f}"), f(g.prompt_tokens_cached_avg, "{:.0f}"),
                         f"{f(g.accept_len, '{:.2f}')}/{rate}"])
        if groups:
            rows.append([f"all (server: {accept_cell(s)})", *([""] * len(GROUP_COLUMNS))])
    return fitted_table([by, *GROUP_COLUMNS], rows, width, title=f"by {by}", left=(by,), keys=(by, "C"),
                        importance=GROUP_IMPORTANCE)


def search_progress_line(v: dict) -> str | None:
    """A line of headless progress for one ``search`` event of the record (None: nothing to say)."""
    phase = v.get("phase")
    axis = v.get("axis") or _AXIS.get(0, "concurrency")
    if phase == "start":
        _AXIS[0] = axis
        what = f"SLO {v['slo']}" if v.get("slo") else "no --slo: saturation only"
        top = v.get("max")
        top_s = f" up to {_at(axis, top)}" if isinstance(top, (int, float)) and top < 1e6 else ""
        budget = f", {v['budget_s']:g} s" if v.get("budget_s") else ""
        return (f"capacity search over {axis} from {_at(axis, v.get('start'))}{top_s} ({what}); "
                f"at most {v.get('max_probes')} probes{budget}")
    if phase == "probe":
        return (f"probe {v.get('number')} ({v.get('step')}): {_at(axis, v.get('value'))}, "
                f"{v.get('requests')} requests")
    if phase == "extend":
        return f"probe {_at(axis, v.get('value'))} {v.get('why')}: {v.get('requests')} requests in all"
    if phase == "observed":
        if not v.get("complete"):
            return f"probe {_at(axis, v.get('value'))} cut short: not used"
        lo, hi = (v.get("bracket") or [None, None])[:2]
        obj = v.get("objectives")
        obj_s = "" if obj == "none" else f"objectives {obj}, "
        sat = " (at the plateau)" if v.get("saturated") else ""
        if v.get("client"):
            sat += f" (client {v['client']}: never the knee; measured again if it moves the limit)"
        return (f"probe {_at(axis, v.get('value'))}: {obj_s}{_iv(v.get('throughput_tok_s'))} tok/s{sat}; "
                f"bracket {_at(axis, lo)} .. {_at(axis, hi)}")
    if phase == "result":
        return f"capacity search: {v.get('message')}"
    return None


def search_lines(r: dict) -> list[str]:
    """The search's result for the end of a run and for ``report``: best point, figures, knee, probes."""
    axis = r.get("axis", "concurrency")
    out = [f"[bold]capacity search[/] ({axis}): {r.get('message')}"]
    b = r.get("best")
    if isinstance(b, dict):
        at = _at(axis, b.get("value"))
        alt = (f", {_iv(b.get('req_s'), '{:.2f}')} req/s" if axis != "rate"
               else f", {b.get('in_flight'):.1f} in flight" if isinstance(b.get("in_flight"), (int, float)) else "")
        out.append(f"  at {at}: throughput {_iv(b.get('throughput_tok_s'))} tok/s{alt}")
        if b.get("goodput_tok_s"):
            out.append(f"  goodput there: {_iv(b.get('goodput_tok_s'))} tok/s, "
                       f"{_iv(b.get('goodput_req_s'), '{:.2f}')} req/s; good requests {pct_interval(b.get('good_share'))} %")
        lo, hi = (r.get("bracket") or [None, None])[:2]
        if hi is not None and lo is not None and hi != b.get("value"):
            out.append(f"  the limit lies between {_at(axis, lo)} and {_at(axis, hi)}")
    knee = r.get("knee") or {}
    if knee.get("reached"):
        below = f" (after {_at(axis, knee.get('below'))}, which still scaled)" if knee.get("below") is not None else ""
        out.append(f"  knee of the throughput curve: {_at(axis, knee.get('value'))}{below}")
    elif r.get("probes"):
        out.append(f"  knee not reached: throughput still grew up to {_at(axis, knee.get('below'))}")
    probes = r.get("probes") or []
    if probes:
        marks = {"met": "✔", "none": "", "missed": "✖", "undecided": "?"}
        parts = [f"{_at(axis, p.get('value'))}{marks.get(p.get('objectives'), '')}" for p in probes]
        out.append(f"  probes in order: {', '.join(parts)}")
    if r.get("undecided"):
        out.append("  undecided at the request cap (counted as not met): "
                   + ", ".join(_at(axis, v) for v in r["undecided"]))
    return out


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
            prompt_tokens=r.get("prompt_tokens"),
            prompt_tokens_requested=r.get("prompt_tokens_requested"),
            prompt_tokens_cached=r.get("prompt_tokens_cached"),
            spec=(_int(r.get("spec_verify_ct")), _int(r.get("spec_accepted")), _int(r.get("spec_drafted"))),
            category=r["category"] if isinstance(r.get("category"), str) else None,
            turn=_int(r.get("turn")),
        )
    older = [idx for idx, s in have.items() if s.ttft_ms_p90 is None and s.ttft_ms_p50 is not None]
    lines: dict[object, list[dict]] = {idx: [] for idx in older}
    for r in data.requests if older else ():
        if r.get("level_index") in lines and r.get("ok") and not r.get("warmup"):
            lines[r.get("level_index")].append(r)
    merged = {idx: _mid_percentiles(s, lines[idx]) if idx in lines else s for idx, s in have.items()}
    server = _server_levels(data) if cols else None
    for idx, c in cols.items():
        s = c.summary()
        if server is not None and s.span_ns is not None:
            s = s.with_server(server.figures(*s.span_ns))
        merged[idx] = s
    return [merged[k] for k in sorted(merged, key=lambda k: -1 if k is None else k)], bool(cols)


def _mid_percentiles(s: LevelSummary, lines: list[dict]) -> LevelSummary:
    """The level line of a record made before p90 and p95 were kept: those of TTFT, TPOT and E2E from
    its (ok, counted) request lines; ITL and gap need the per-token gaps, which request lines do not keep."""
    from dataclasses import replace

    import numpy as np

    from specload.stats.quantiles import percentiles

    filled: dict[str, float] = {}
    for key, name, scale in (("ttft_ms", "ttft_ms", 1.0), ("tpot_ms", "tpot_ms", 1.0), ("e2e_ms", "e2e_s", 1e3)):
        values = np.array([float(r[key]) / scale for r in lines if isinstance(r.get(key), int | float)])
        if values.size:
            filled[f"{name}_p90"], filled[f"{name}_p95"] = percentiles(values, (90, 95))
    return replace(s, **filled)  # type: ignore[arg-type]  # p90/p95 fields: floats


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _server_levels(data: RecordData) -> ServerLevels:
    """The record's server lines, for the server's figures of recomputed levels (times in ns of the
    record's own clock: seconds since the run started, as the request lines' are read)."""
    book = ServerLevels()
    for d in data.servers:
        fields = {k: d.get(k) for k in SERVER_FIELDS}
        book.add(ServerSample(t_ns=int(d.get("t_s", 0) * 1e9), source=d.get("source", "?"),
                              extra=d.get("extra") or {}, **fields))
    return book


def summary_json(levels: list[LevelSummary], extra: dict | None = None) -> dict:
    d = {"levels": [s.as_record() for s in levels]}
    if extra:
        d.update(extra)
    return d


class GreedyCommand(click.Command):
    """Options that take every value after them up to the next option (``report A --vs B1 B2``, ``sweep
    --grid 'a=1,2' 'b=3,4'``): click has no such option, so the arguments are rewritten to ``--vs B1 --vs
    B2`` before click parses them. ``greedy``: those options' flags."""

    greedy: tuple[str, ...] = ()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(args):
            if args[i] in self.greedy:
                flag = args[i]
                i += 1
                taken = False
                while i < len(args) and not args[i].startswith("-"):
                    out += [flag, args[i]]
                    i += 1
                    taken = True
                if not taken:
                    out.append(flag)  # click then says it needs a value
                continue
            out.append(args[i])
            i += 1
        return super().parse_args(ctx, out)


class _ReportCommand(GreedyCommand):
    greedy = ("--vs",)


@click.command("report", cls=_ReportCommand)
@click.argument("records", nargs=-1, required=True, type=click.Path())
@click.option("--vs", "vs", multiple=True, type=click.Path(dir_okay=False), metavar="FILE...",
              help="Compare RECORDS (one side, repeats of it) against these files (the other side).")
@click.option("--baseline", type=click.Path(dir_okay=False),
              help="The baseline run (default: the first file; its label's runs are the baseline side).")
@click.option("--primary", type=click.Choice(list(METRICS)), default=DEFAULT_PRIMARY, show_default=True,
              help="The metric of each level's headline verdict; the others are secondary.")
@click.option("--min-effect", type=float, default=2.0, show_default=True, metavar="PCT",
              help="Differences smaller than this (percent; error rate: points) are 'no difference'.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print as CSV (one row per level, run and metric).")
@click.option("--slo", metavar="SPEC", help="Judge the levels against these objectives (goodput), as a run "
                                             "with --slo would have (see README, Capacity); several records: "
                                             "the highest concurrency under them, per side.")
@click.option("--html", "html", type=click.Path(dir_okay=False), metavar="FILE.html",
              help="Also write an offline HTML report: descriptions, tables, interactive charts, timelines.")
@click.option("--wide", is_flag=True, help="One record: every level figure (means with standard deviations, "
              "peaks, per-chunk gaps, per-position acceptance, prompt lengths).")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), metavar="FILE.png|.svg",
              help='Also write the charts as a PNG or SVG (needs: pip install "specload[report]").')
@click.option("--by", "by", type=click.Choice(["category", "turn"]),
              help="One record: each level's figures per dataset category (or conversation turn) too.")
@click.option("--near-tie", type=click.FloatRange(0, 100), default=NEAR_TIE_NATS, show_default=True,
              metavar="NATS", help="Runs recorded with --check-outputs: a divergence is a near-tie (numerics, "
              "not a bug) when either run's margin between its token and the runner-up is below this.")
def report_command(records: tuple[str, ...], vs: tuple[str, ...], baseline: str | None, primary: str,
                   min_effect: float, as_json: bool, as_csv: bool, slo: str | None, html: str | None,
                   plot: str | None, wide: bool, by: str | None, near_tie: float) -> None:
    """The level table of a recorded run, or a comparison of several.

    \b
    specload report RUN.jsonl [--wide]           the level table (--wide: every figure)
    specload report RUN.jsonl --by category      and each level per category (or --by turn)
    specload report A.jsonl B.jsonl [C.jsonl]    B (and C) against A, level by level
    specload report A1.jsonl A2.jsonl --vs B1.jsonl B2.jsonl
                                                 repeats per side: run-to-run variation included
    specload report RUN.jsonl --html r.html --plot r.png
                                                 an offline HTML report, the charts as an image
    specload report SWEEP_DIR [--html s.html]    a sweep's result (specload sweep --out SWEEP_DIR)
    Records with the same --label are repeats of one side. RUN can also be a 'vllm bench serve
    --save-result' JSON or an SGLang 'bench_serving' JSONL file.
    """
    from specload.report.outputs import OutputError, check_outputs, write_outputs

    if as_json and as_csv:
        _usage("give only one of --json and --csv")
    if not (0 <= min_effect < 100):
        _usage("--min-effect must be a percentage in [0, 100)")
    spec = None
    if slo is not None:
        from specload.stats.slo import SloError, parse_slo

        try:
            spec = parse_slo(slo)
        except SloError as e:
            _usage(str(e))
    try:
        check_outputs(html, plot)  # before any work: a missing extra or folder fails at once
    except OutputError as e:
        _usage(str(e))
    import os

    folders = [r for r in records if os.path.isdir(r)]
    if folders:
        if len(records) > 1 or vs or baseline is not None or spec is not None or as_csv or plot or wide:
            _usage(f"{folders[0]} is a folder: 'report DIR' shows a sweep (with --json or --html, --primary, "
                   "--min-effect); give it alone")
        from specload.report.sweep import SweepReadError, report_folder

        try:
            report_folder(folders[0], as_json=as_json, html=html, primary=primary, min_effect=min_effect / 100,
                          console=wide_console())
        except SweepReadError as e:
            _usage(str(e))
        return
    if len(records) == 1 and not vs and baseline is None:
        run = _single_report(records[0], as_json, as_csv, spec, wide, by)
        if html or plot:
            from types import SimpleNamespace

            run = run if run is not None else _load(records[0])
            try:
                write_outputs([SimpleNamespace(label=run.label, runs=(run,))], None, html=html, plot=plot)
            except OutputError as e:
                _usage(str(e))
        return
    from specload.report.compare import compare, render, to_csv_rows, to_json
    from specload.report.lossless import add_to_json
    from specload.report.lossless import compare_sides as compare_outputs_of
    from specload.report.lossless import render as render_outputs

    sides = _sides(records, vs, baseline)
    if len(sides) < 2:
        _usage(f"all records are runs of '{sides[0].label}': nothing to compare them with "
               "(give the other side with --vs, or label runs with 'specload run --label')")
    c = compare(sides, primary=primary, min_effect=min_effect / 100.0)
    checked = compare_outputs_of(sides, near_tie=near_tie)
    doc = to_json(c)
    for oc in checked:
        add_to_json(doc, oc)
    capacity = side_capacity(sides, spec) if spec is not None else None
    try:
        write_outputs(sides, doc if (html or plot) else None, html=html, plot=plot)
    except OutputError as e:
        _usage(str(e))
    if as_json:
        import orjson

        if capacity is not None:
            doc = {**doc, "capacity": capacity}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif as_csv:
        import csv

        from specload.report.compare import CSV_COLUMNS

        w = csv.DictWriter(sys.stdout, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
        w.writeheader()
        for row in to_csv_rows(c):
            w.writerow({k: "" if v is None else v for k, v in row.items()})
    else:
        console = wide_console()
        render(c, console)
        for oc in checked:
            render_outputs(oc, console)
        if capacity is not None:
            console.print(capacity_line(capacity), highlight=False)


def side_capacity(sides: list, spec: SloSpec) -> dict:
    """``report A B --slo``: per side, the highest concurrency whose levels met the objectives (every
    run of the side, judged from its requests as ``report RUN --slo`` would), with each level's verdict."""
    from specload.stats.goodput import capacity_under, goodput_of_levels

    out: dict = {"slo": spec.text(), "sides": {}}
    for side in sides:
        levels = [lv for run in side.runs for lv in run.levels if lv.n]
        try:
            judged = goodput_of_levels(spec, levels)
        except ValueError as e:
            _usage(str(e))
        best, verdicts = capacity_under(levels, judged)
        out["sides"][side.label] = {"max_concurrency": best, "levels": [[c, v] for c, v in verdicts]}
    return out


def capacity_line(capacity: dict) -> str:
    """``max C under SLO ttft_p99<=1s: base=12, new=16 (base: C=16 missed; ...)``."""
    sides = capacity["sides"]
    head = ", ".join(f"{label}={'none' if d['max_concurrency'] is None else d['max_concurrency']}"
                     for label, d in sides.items())
    why = []
    for label, d in sides.items():
        missed = [c for c, v in d["levels"] if v == "missed"]
        undecided = [c for c, v in d["levels"] if v == "undecided"]
        parts = ([f"missed from C={missed[0]}"] if missed else []) + (
            [f"undecided at C={','.join(map(str, undecided))}"] if undecided else [])
        if not missed and d["max_concurrency"] is not None:
            parts.append("none missed: the limit lies above the highest level run")
        why.append(f"{label}: {'; '.join(parts)}")
    return f"max C under SLO {capacity['slo']}: {head} ({' · '.join(why)})"


def _usage(msg: str) -> None:
    click.echo(f"specload report: {msg}", err=True)
    sys.exit(ExitCode.USAGE)


def _load(path: str):  # Run, imported lazily
    import specload.report.peers  # noqa: F401 - other tools' result files read as runs
    from specload.record.runs import RunReadError, load_run

    try:
        return load_run(path)
    except (RunReadError, RecordReadError) as e:
        _usage(str(e))


def _sides(records: tuple[str, ...], vs: tuple[str, ...], baseline: str | None) -> list:
    """Files -> sides: with --vs, RECORDS against the --vs files; else the files grouped by label, in
    order, the baseline's group first."""
    from specload.report.compare import Side

    if vs:
        if baseline is not None:
            _usage("--baseline and --vs do not go together: with --vs the files before it are the baseline")
        groups = [[_load(p) for p in records], [_load(p) for p in vs]]
        return [Side(label, tuple(g)) for label, g in zip(side_labels(groups), groups, strict=True)]
    paths = list(records)
    if baseline is not None:
        real = os.path.realpath(baseline)
        paths = [p for p in paths if os.path.realpath(p) != real]
        paths.insert(0, baseline)
    by_label: dict[str, list] = {}
    for p in paths:
        run = _load(p)
        by_label.setdefault(run.label, []).append(run)
    return [Side(label, tuple(runs)) for label, runs in by_label.items()]


def side_labels(groups: list[list]) -> list[str]:
    """Short, distinct names for sides of runs: the label its runs share (``--label``); else the tool
    they were made with, where the sides' tools differ (specload vs vllm bench serve); else what their
    labels start with; else the labels joined, when that is short; else the first and how many more.
    The first of these that tells every side apart (never a row of long file names joined)."""
    tools = [list(dict.fromkeys(r.description.tool for r in g)) for g in groups]
    by_tool = all(len(t) == 1 for t in tools) and len({t[0] for t in tools}) == len(tools)

    def options(runs: list, tool: str | None) -> list[str | None]:
        labels = list(dict.fromkeys(r.label for r in runs))
        prefix = os.path.commonprefix(labels).rstrip("-_. ")
        joined = "+".join(labels)
        return [labels[0] if len(labels) == 1 else None, tool, prefix if len(prefix) >= 3 else None,
                joined if len(joined) <= 24 else None, f"{labels[0]} +{len(labels) - 1}"]

    opts = [options(g, t[0] if by_tool else None) for g, t in zip(groups, tools, strict=True)]
    names: list[str] = []
    for k in range(5):
        names = [next(o for o in op[k:] if o) for op in opts]
        if len(set(names)) == len(names):
            return names
    return [f"{n} ({i})" for i, n in enumerate(names, 1)]


def _single_report(record: str, as_json: bool, as_csv: bool, spec: SloSpec | None = None,
                   wide: bool = False, by: str | None = None):
    """Print one file's table; returns the run when the file was another tool's (read through the run
    model), else None."""
    try:
        data = read_record(record)
    except RecordReadError as e:
        run = _peer_run(record)
        if run is None:
            click.echo(f"specload report: {e}", err=True)
            sys.exit(ExitCode.USAGE)
        _peer_report(run, as_json, as_csv, wide)
        return run
    levels, recomputed = summaries_from_record(data)
    if spec is not None:
        from dataclasses import replace

        from specload.stats.goodput import goodput_from_lines

        try:
            judged = goodput_from_lines(spec, data.requests, open_loop=(data.run or {}).get("rate") is not None)
        except ValueError as e:
            _usage(str(e))
        levels = [replace(s, goodput=judged.get(s.level_index, s.goodput)) for s in levels]
    if as_csv:
        _levels_csv(levels)
        return
    if as_json:
        import orjson

        extra = {
            "target": (data.run or {}).get("target"),
            "end": data.end,
            "truncated": data.truncated,
            "bad_lines": data.bad_lines,
            "crashes": [
                {k: c.get(k) for k in ("exception_type", "message", "innermost_frame", "processes", "count")}
                for c in data.crashes
            ],
        }
        searches, unfinished = search_results(data)
        if searches or unfinished:
            extra["searches"] = searches
            extra["search_unfinished"] = unfinished
        sys.stdout.write(orjson.dumps(summary_json(levels, extra), option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    console = wide_console()
    run = data.run or {}
    console.print(f"[bold]specload record[/] {escape(record)}")
    console.print(
        f"target {run.get('target', '?')}  model {run.get('model', '?')}  api {run.get('api', '?')}  "
        f"started {run.get('started_at', '?')}",
        markup=False,
    )
    console.print(level_table(levels, wide=wide, width=console.width))
    if by is not None:
        if any(s.categories if by == "category" else s.turns for s in levels):
            console.print(group_table(levels, by, width=console.width))
        else:
            console.print(f"[yellow]no request of this record has a {by}[/]")
    if spec is not None:
        console.print(f"goodput judged against --slo {spec.text()} (from the request lines)", highlight=False)
    if recomputed:
        console.print("[yellow]some levels were recomputed from request lines (record cut short)[/]")
    if data.bad_lines:
        console.print(
            f"[yellow]{data.bad_lines} line{'s' if data.bad_lines != 1 else ''} skipped, not valid record "
            f"lines ({escape('; '.join(data.problems[:2]))})[/]",
            highlight=False,
        )
    seen = set()
    for c in data.crashes:
        if c.get("signature") in seen:
            continue
        seen.add(c.get("signature"))
        console.print(  # the server's text is never markup
            f"[red]crash[/] {escape(str(c.get('exception_type')))}: {escape(str(c.get('message')))} "
            f"({escape(str(c.get('innermost_frame') or 'no frame'))}) at "
            f"{seconds(c.get('first_seen_s', c.get('t_s')))} s"
        )
    searches, unfinished = search_results(data)
    for r in searches:
        for line in search_lines(r):
            console.print(line, highlight=False)
    if unfinished:
        console.print("[yellow]a capacity search was running when the record ended: it has no result[/]")
    end = data.end
    if end is None:
        console.print("[yellow]record has no end line: the run was cut short[/]")
    else:
        console.print(
            f"end: {escape(str(end.get('reason')))} after {seconds(end.get('elapsed_s'))} s, "
            f"{end.get('ok')}/{end.get('requests')} ok"
        )


def search_results(data: RecordData) -> tuple[list[dict], bool]:
    """The capacity searches' results in the record (``event`` lines of kind ``search``, phase
    ``result``), and whether a search had started without a result (a record cut short)."""
    results: list[dict] = []
    open_search = False
    for ev in data.events:
        v = ev.get("value")
        if ev.get("kind") != "search" or not isinstance(v, dict):
            continue
        if v.get("phase") == "start":
            open_search = True
        elif v.get("phase") == "result":
            open_search = False
            results.append({k: x for k, x in v.items() if k != "phase"})
    return results, open_search


def _peer_run(path: str):  # a Run, or None
    """Another tool's result file as a run, or None when no reader knows the file."""
    import specload.report.peers  # noqa: F401 - registers the readers
    from specload.record.runs import RunReadError, load_run

    try:
        run = load_run(path)
    except (RunReadError, RecordReadError) as e:
        if "not a specload record or a result file" in str(e):
            return None
        _usage(str(e))
    return None if run.kind == "specload" else run


def _levels_csv(levels: list[LevelSummary]) -> None:
    """One CSV row per level on stdout, a level line's keys as columns (errors as 'kind n;...')."""
    import csv

    rows = [s.as_record() for s in levels]
    # every key of every level, in order of first appearance: a level line carries optional keys
    # (cut, active_s, lost; goodput) that the first level may lack
    cols = list(dict.fromkeys(k for row in rows for k in row)) or ["level_index", "concurrency"]
    w = csv.DictWriter(sys.stdout, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for row in rows:
        row["errors"] = ";".join(f"{k} {n}" for k, n in row["errors"].items())
        w.writerow({k: "" if v is None else v for k, v in row.items()})


def _peer_report(run, as_json: bool, as_csv: bool, wide: bool = False) -> None:  # a Run
    from specload.report.figures import describe

    levels = [lv.summary for lv in run.levels if lv.summary is not None]  # as the peer reader made them
    if as_csv:
        _levels_csv(levels)
        return
    if as_json:
        import orjson

        extra = {"source": run.source, "tool": run.description.tool, "notes": list(run.notes),
                 "tool_summary": run.description.config.get("tool_summary")}
        sys.stdout.write(orjson.dumps(summary_json(levels, extra), option=orjson.OPT_INDENT_2
                                      | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return
    # the plain table, with the tool's own summary and the notes on definitions
    console = wide_console()
    console.print(f"[bold]{run.description.tool}[/] {run.source}")
    for k, v in describe(run):
        if k != "source":
            console.print(f"[dim]{k}:[/] {v}", highlight=False)
    console.print(level_table(levels, wide=wide, width=console.width))
    for n in run.notes:
        console.print(f"[yellow]note:[/] {n}", highlight=False)
