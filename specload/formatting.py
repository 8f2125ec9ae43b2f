"""How numbers and levels read, wherever a person reads them: headless output, ``report``, the TUI.

One place for units, widths and missing values, so the level a headless run prints, the row
``specload report`` shows for it and the TUI's table row carry the same figures in the same form.
Pure functions of plain values; no Rich, no Textual.
"""

from __future__ import annotations

import math
from typing import Any

from specload.stats.gpu_levels import GpuFigures
from specload.stats.judgement import LevelJudgement
from specload.stats.levels import LevelSummary
from specload.stats.slo import LevelGoodput

DASH = "–"  # a missing value on screen (the TUI)
ASCII_DASH = "-"  # the same in text output (headless, report), which may end up in a file


def ms(v: float | None) -> str:
    """Milliseconds with a sensible number of digits; seconds beyond 10 s."""
    if v is None or math.isnan(v):
        return DASH
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 100:
        return f"{v:.0f} ms"
    if v >= 10:
        return f"{v:.1f} ms"
    return f"{v:.2f} ms"


def num(v: float | None, fmt: str = "{:.1f}", dash: str = DASH) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return dash
    return fmt.format(v)


def count(n: int) -> str:
    """An integer with grouping (1,234,567); M beyond ten million to stay narrow."""
    if n >= 10_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n:,}"


def clock(seconds: float) -> str:
    """Elapsed time as mm:ss, or h:mm:ss past an hour."""
    s = int(max(0.0, seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def seconds(v: object) -> str:
    """A record's seconds for reading: one decimal (the record keeps microseconds)."""
    return f"{v:.1f}" if isinstance(v, int | float) else str(v)


def latency(v: float | None, dash: str = ASCII_DASH) -> str:
    """A latency in ms for a percentile cell: three significant figures or so (9.87, 14.4, 121)."""
    if v is None or math.isnan(v):
        return dash
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return num(v, fmt, ASCII_DASH)


def level_line(s: LevelSummary) -> str:
    """One line per finished level, in the format of the per-level script users already know; the
    figures that script did not have follow its last field, so its readers keep working."""
    line = (
        f"C={s.concurrency:>3} | {s.requests} requests | throughput: {s.throughput_tok_s:>7.1f} tok/s | "
        f"per-req: {s.per_request_tok_s:>7.1f} tok/s | latency avg/p50/p99: "
        f"{_f(s.e2e_s_avg, '{:>6.2f}')}/{_f(s.e2e_s_p50, '{:>6.2f}')}/{_f(s.e2e_s_p99, '{:>6.2f}')}s | "
        f"ok: {s.ok}/{s.requests} | req/s: {s.req_s:.2f}"
    )
    if s.rate is not None:
        line = f"rate={s.rate:g}/s " + line
    if s.cut is not None:
        line += f" | {cut_text(s)}"
    g = s.goodput
    if g is not None:
        line += f" | SLO {g.verdict}: good {goodput_share(g)} %, goodput {_f(g.tok_s.value if g.tok_s else None)} tok/s"
    if s.itl_ms_p50 is not None or s.gap_ms_p50 is not None:
        line += f" | ITL/gap p50: {_f(s.itl_ms_p50, '{:.2f}')}/{_f(s.gap_ms_p50, '{:.2f}')} ms"
    if s.accept_len is not None or s.accept_rate is not None:
        line += f" | accept len/rate: {accept_cell(s)}"
    if s.request_accept_len is not None or s.request_accept_rate is not None:
        line += f" | per request: {accept_cell(s, requests=True)}"
    if s.server_gen_tok_s is not None:
        line += f" | server: {s.server_gen_tok_s:.1f} tok/s"
    if s.prompt_tokens_avg is not None:
        line += f" | prompt: {prompt_cell(s)} tok"
    if s.gpu is not None:
        line += f" | {gpu_text(s.gpu)}"
    j = s.judged
    if j is not None:
        if j.half_width_pct is not None:  # no interval yet: nothing to say ("+--%")
            line += f" | {j.metric} +-{_f(j.half_width_pct)}%" + (f" ({j.done})" if j.done else "")
        if j.baseline is not None:
            line += f" | vs baseline {ratio_interval(j)} {verdict_text(j.verdict)}"
    return line


def gpu_text(g: GpuFigures) -> str:
    """A level's GPUs in the level line: mean utilisation, peak memory of one GPU, mean power of all of
    them, and the energy per output token (``stats/gpu_levels.py``)."""
    mem = "-" if g.mem_used_mib_peak is None else f"{g.mem_used_mib_peak / 1024:.1f}" + (
        "" if g.mem_total_mib is None else f"/{g.mem_total_mib / 1024:.0f}")
    text = (f"GPUs x{g.gpus}: util {_f(g.util_pct_mean, '{:.0f}')}%, peak mem {mem} GiB, "
            f"power {_f(g.power_w_mean, '{:.0f}')} W")
    if g.energy_j is None:
        return text + f", energy - ({100 * g.coverage:.0f}% of the level sampled)"
    return text + f", energy {g.energy_j / 1000:.2f} kJ = {_f(g.j_per_1k_tok, '{:.0f}')} J/1k tok ({_f(g.tok_per_j, '{:.3f}')} tok/J)"


CUT_WORDS = {"crash": "crash", "server_down": "server down", "pause": "pause"}


def cut_cell(s: LevelSummary, dash: str = ASCII_DASH) -> str:
    """A level cut by a crash, the server down or a pause: ``crash, 3 lost``; a dash when it was not."""
    if s.cut is None:
        return dash
    what = CUT_WORDS.get(s.cut, s.cut)
    return f"{what}, {s.lost} lost" if s.lost else what


def cut_text(s: LevelSummary) -> str:
    """The level line's account of a cut: what cut it, the time its throughput is over, what it lost."""
    active = "-" if s.active_s is None else f"{s.active_s:.1f}"
    lost = f", {s.lost} request{'s' if s.lost != 1 else ''} lost" if s.lost else ""
    return f"cut by {CUT_WORDS.get(s.cut or '', s.cut)}: active {active} of {s.wall_s:.1f} s{lost}"


def accept_cell(s: LevelSummary, dash: str = ASCII_DASH, *, requests: bool = False) -> str:
    """Speculative acceptance: length (tokens per verify step) / rate (accepted of drafted), the
    server's over the level (``requests``: pooled from the requests' own counts). Without a server
    figure the requests' is shown, marked ``*``."""
    length, rate_v = (s.request_accept_len, s.request_accept_rate) if requests else (s.accept_len, s.accept_rate)
    mark = ""
    if length is None and rate_v is None and not requests:
        length, rate_v, mark = s.request_accept_len, s.request_accept_rate, "*"
    if length is None and rate_v is None:
        return dash
    rate = dash if rate_v is None else f"{100 * rate_v:.0f}%"
    return f"{num(length, '{:.2f}', dash)}/{rate}{mark}"


def prompt_cell(s: LevelSummary, dash: str = ASCII_DASH) -> str:
    """Prompt tokens as the server counted them (mean), and what was asked when prompts are synthetic."""
    if s.prompt_tokens_avg is None:
        return dash
    got = f"{s.prompt_tokens_avg:.0f}"
    if s.prompt_tokens_requested_avg is None:
        return got
    return f"{got}/{s.prompt_tokens_requested_avg:.0f}"


def _avg_std(avg: float | None, std: float | None, fmt: str, dash: str) -> str:
    if avg is None:
        return dash
    return fmt.format(avg) + ("" if std is None else "±" + fmt.format(std))


VERDICT_WORDS = {"better": "▲ better", "worse": "▼ worse", "no_difference": "= no difference",
                 "insufficient": "? undecided", "unsound": "⚠ unsound"}


def verdict_text(verdict: str | None, dash: str = ASCII_DASH) -> str:
    """A live verdict for reading; 'insufficient' while a level runs means not decided yet."""
    return dash if verdict is None else VERDICT_WORDS.get(verdict, verdict)


def ratio_interval(j: LevelJudgement, dash: str = ASCII_DASH) -> str:
    """``×1.12 [1.03,1.22]``: live / baseline with its sequential interval."""
    if j.ratio is None:
        return dash
    if j.ratio_ci_low is None or j.ratio_ci_high is None:
        return f"×{j.ratio:.2f}"
    return f"×{j.ratio:.2f} [{j.ratio_ci_low:.2f},{j.ratio_ci_high:.2f}]"


def goodput_share(g: LevelGoodput, dash: str = "-") -> str:
    """``97 (94-99)``: the percentage of good steady-state requests with its interval."""
    return pct_interval(g.good_share, dash)


def pct_interval(sh: object, dash: str = "-") -> str:
    """A share (an ``Interval`` or a record's ``[value, lo, hi]``) as ``97 (94-99)`` percent."""
    if isinstance(sh, list):
        v, lo, hi = (sh + [None, None, None])[:3]
    elif sh is not None:
        v, lo, hi = sh.value, sh.lo, sh.hi  # type: ignore[attr-defined]
    else:
        return dash
    if v is None:
        return dash
    if lo is None or hi is None:
        return f"{v * 100:.0f}"
    return f"{v * 100:.0f} ({lo * 100:.0f}-{hi * 100:.0f})"


VERDICT_MARKS = {"met": "✔ met", "missed": "✖ missed", "undecided": "? open"}


def level_cells(s: LevelSummary, dash: str = "-") -> dict[str, str]:
    """The cells of one level row by column name: the headless table, the report and the TUI's
    table all format a level with this, so they show the same figures."""

    def f(v: float | None, fmt: str = "{:.1f}") -> str:
        return dash if v is None else fmt.format(v)

    def dist(avg: float | None, std: float | None, *qs: float | None, fmt: str) -> str:
        return f"{_avg_std(avg, std, fmt, dash)} {'/'.join(f(q, fmt) for q in qs)}"

    def pcts(*qs: float | None) -> str:
        return "/".join(latency(q, dash) for q in qs)

    empty = s.requests == 0  # a level that started no request: no rate to show, not a zero one
    cells = {
        "C": str(s.concurrency),
        "tok/s": dash if empty else f"{s.throughput_tok_s:.1f}",
        "peak tok/s": f(s.peak_tok_s),
        "srv tok/s": f(s.server_gen_tok_s),
        "req/s": dash if empty else f"{s.req_s:.2f}",
        "req tok/s": dash if empty else f"{s.per_request_tok_s:.1f}",
        "peak C": dash if s.peak_concurrency is None else str(s.peak_concurrency),
        TTFT: pcts(s.ttft_ms_p50, s.ttft_ms_p90, s.ttft_ms_p95, s.ttft_ms_p99),
        TPOT: pcts(s.tpot_ms_p50, s.tpot_ms_p90, s.tpot_ms_p95, s.tpot_ms_p99),
        "ITL/gap ms": f"{f(s.itl_ms_p50, '{:.2f}')}/{f(s.gap_ms_p50, '{:.2f}')}",
        "accept": accept_cell(s, dash),
        "latency avg/p50/p99 s": f"{f(s.e2e_s_avg, '{:.2f}')}/{f(s.e2e_s_p50, '{:.2f}')}/{f(s.e2e_s_p99, '{:.2f}')}",
        "prompt tok": prompt_cell(s, dash),
        "tokens": f"{s.output_tokens}{'~' if s.tokens_estimated else ''}",
        "wall s": f"{s.wall_s:.1f}",
        "active s": f"{s.wall_s if s.active_s is None else s.active_s:.1f}",
        "cut": cut_cell(s, dash),
        "ok": f"{s.ok}/{s.requests}",
        "errors": ", ".join(f"{k} {n}" for k, n in s.errors) if s.errors else dash,
        "rate": dash if s.rate is None else f"{s.rate:g}",
        # --wide: every figure, means with their standard deviations
        "TTFT avg±sd p50/p90/p95/p99 ms": dist(s.ttft_ms_avg, s.ttft_ms_std, s.ttft_ms_p50, s.ttft_ms_p90,
                                               s.ttft_ms_p95, s.ttft_ms_p99, fmt="{:.1f}"),
        "TPOT avg±sd p50/p90/p95/p99 ms": dist(s.tpot_ms_avg, s.tpot_ms_std, s.tpot_ms_p50, s.tpot_ms_p90,
                                               s.tpot_ms_p95, s.tpot_ms_p99, fmt="{:.2f}"),
        "ITL/token avg±sd p50/p90/p95/p99 ms": dist(s.itl_ms_avg, s.itl_ms_std, s.itl_ms_p50, s.itl_ms_p90,
                                                    s.itl_ms_p95, s.itl_ms_p99, fmt="{:.2f}"),
        "gap/chunk avg±sd p50/p90/p95/p99 ms": dist(s.gap_ms_avg, s.gap_ms_std, s.gap_ms_p50, s.gap_ms_p90,
                                                    s.gap_ms_p95, s.gap_ms_p99, fmt="{:.2f}"),
        "E2E avg±sd p50/p90/p95/p99 s": dist(s.e2e_s_avg, s.e2e_s_std, s.e2e_s_p50, s.e2e_s_p90, s.e2e_s_p95,
                                             s.e2e_s_p99, fmt="{:.2f}"),
        "accept per pos": dash if not s.accept_per_pos else " ".join(f"{v:.2f}" for v in s.accept_per_pos),
        "req accept": accept_cell(s, dash, requests=True),
        "input tok": dash if s.input_tokens is None else str(s.input_tokens),
        "prompt avg/p50/p99": f"{f(s.prompt_tokens_avg, '{:.0f}')}/{f(s.prompt_tokens_p50, '{:.0f}')}/"
                              f"{f(s.prompt_tokens_p99, '{:.0f}')}",
        "asked": f(s.prompt_tokens_requested_avg, "{:.0f}"),
        "cached": f(s.prompt_tokens_cached_avg, "{:.0f}"),
        # the server's GPUs (--gpu-metrics): all of them together, per output token
        "GPU W": dash if s.gpu is None else f(s.gpu.power_w_mean, "{:.0f}"),
        "J/1k tok": dash if s.gpu is None else f(s.gpu.j_per_1k_tok, "{:.0f}"),
        "GPU util %": dash if s.gpu is None else f(s.gpu.util_pct_mean, "{:.0f}"),
        "GPU mem GiB": dash if s.gpu is None or s.gpu.mem_used_mib_peak is None
        else f"{s.gpu.mem_used_mib_peak / 1024:.1f}",
        "energy kJ": dash if s.gpu is None or s.gpu.energy_j is None else f"{s.gpu.energy_j / 1000:.2f}",
        "tok/J": dash if s.gpu is None else f(s.gpu.tok_per_j, "{:.3f}"),
    }
    g = s.goodput
    j = s.judged
    cells.update({
        "±CI %": dash if j is None or j.half_width_pct is None else f"{j.half_width_pct:.1f}",
        "baseline": dash if j is None or j.baseline is None else f"{j.baseline:.1f}",
        "vs baseline": dash if j is None or j.baseline is None else ratio_interval(j, dash),
        "verdict": dash if j is None or j.baseline is None else verdict_text(j.verdict, dash),
    })
    cells.update({
        "SLO": dash if g is None else VERDICT_MARKS.get(g.verdict, g.verdict),
        "good %": dash if g is None else goodput_share(g, dash),
        "good tok/s": dash if g is None or g.tok_s is None else f"{g.tok_s.value:.1f}",
        "good req/s": dash if g is None or g.req_s is None else f"{g.req_s.value:.2f}",
    })
    return cells


# The table everyone sees (headless, report, TUI): TTFT and TPOT p50/p90/p95/p99; ITL/gap: per-token
# ITL (a chunk of k tokens counts gap / k) and the per-chunk gap (what vLLM's and SGLang's clients
# call ITL), p50 of each; accept: speculative acceptance length / rate (the server's; marked * the
# requests' own counts, when the server gives no figure); prompt tok: the server's count / the
# length asked for. Everything else is in --json, the record and `report --wide`.
TTFT = "TTFT p50/90/95/99 ms"
TPOT = "TPOT p50/90/95/99 ms"
TABLE_COLUMNS = (
    "C", "tok/s", "srv tok/s", "req/s", TTFT, TPOT, "ITL/gap ms", "accept",
    "latency avg/p50/p99 s", "prompt tok", "ok", "errors",
)
WIDE_COLUMNS = (
    "C", "tok/s", "peak tok/s", "srv tok/s", "req/s", "req tok/s", "peak C", "TTFT avg±sd p50/p90/p95/p99 ms",
    "TPOT avg±sd p50/p90/p95/p99 ms", "ITL/token avg±sd p50/p90/p95/p99 ms", "gap/chunk avg±sd p50/p90/p95/p99 ms",
    "E2E avg±sd p50/p90/p95/p99 s", "accept", "req accept", "accept per pos", "input tok", "prompt avg/p50/p99", "asked", "cached",
    "tokens", "wall s", "ok", "errors",
)


GOODPUT_COLUMNS = ("SLO", "good %", "good tok/s", "good req/s")
GPU_COLUMNS = ("GPU W", "J/1k tok")
GPU_WIDE_COLUMNS = ("GPU util %", "GPU mem GiB", "GPU W", "energy kJ", "tok/J", "J/1k tok")
JUDGED_COLUMNS = ("±CI %",)
BASELINE_COLUMNS = ("baseline", "vs baseline", "verdict")


def table_columns(levels: list[LevelSummary], *, wide: bool = False) -> tuple[str, ...]:
    """The table's columns: a rate column when a level ran open loop, goodput columns with --slo;
    ``wide``: every figure (``report --wide``). Which of them fit a width: ``fit_columns``."""
    cols: tuple[str, ...] = WIDE_COLUMNS if wide else TABLE_COLUMNS
    if any(s.rate is not None for s in levels):
        cols = ("rate", *cols)
    if any(s.gpu is not None for s in levels):
        cols = (*cols[:-2], *(GPU_WIDE_COLUMNS if wide else GPU_COLUMNS), *cols[-2:])  # before ok, errors
    if any(s.cut is not None for s in levels):
        # a level cut by a crash or a pause says so before its errors (its throughput is over its active time)
        cols = (*cols[:-1], "cut", cols[-1])
        if "wall s" in cols:
            i = cols.index("wall s") + 1
            cols = (*cols[:i], "active s", *cols[i:])
    if any(s.goodput is not None for s in levels):
        cols = (*cols[:-1], *GOODPUT_COLUMNS, cols[-1])  # errors stay last (they wrap)
    if any(s.judged is not None for s in levels):
        extra = JUDGED_COLUMNS + (BASELINE_COLUMNS if any(s.judged and s.judged.baseline is not None
                                                           for s in levels) else ())
        cols = (*cols[:-1], *extra, cols[-1])
    return cols


# ------------------------------------------------------------------------------------- fitting
#
# One rule for every table a person reads in a terminal, a file or a pipe (the level table of a run,
# of ``report``, of the TUI's quit summary; the comparison's tables; the sweep's): a table is never
# cut. When its columns do not fit the width, long headers fold onto two lines; when they still do
# not fit, the table is wrapped: the first part keeps the key columns (C, the load) and the most
# important figures, the rest continue in further parts that repeat the key columns. A column is
# never dropped and a cell never ellipsised: what is printed is every figure, whole.

SEPARATOR = 3  # " │ " between two columns (no outer edge, no edge padding)
# the order in which columns claim the first part's room (after the key columns); the rest follow
IMPORTANCE = (
    "tok/s", "ok", "verdict", "vs baseline", "SLO", "good %", TTFT, TPOT, "TTFT avg±sd p50/p90/p95/p99 ms",
    "TPOT avg±sd p50/p90/p95/p99 ms", "errors", "cut", "req/s",
    "latency avg/p50/p99 s", "srv tok/s", "good tok/s", "±CI %", "baseline", "GPU W", "J/1k tok", "accept",
    "ITL/gap ms", "prompt tok", "good req/s",
)
KEY_COLUMNS = ("C", "rate", "level", "metric")  # repeated in every part of a wrapped table
FLEXIBLE = ("errors",)  # wraps within its cell (``fitted_table`` gives it 20 characters or its longest word)


def fitted_table(headers: list[str], rows: list[list[str]], width: int, *, title: str | None = None,
                 left: tuple[str, ...] = (), markup: bool = False, importance: tuple[str, ...] = IMPORTANCE,
                 keys: tuple[str, ...] = KEY_COLUMNS) -> Any:  # a rich Group
    """Rows of cells under ``headers`` as one rich table, or as the parts ``fit_columns`` wraps it into
    at ``width`` (``keys``: the columns every part repeats): never a cut cell (a column too wide even
    alone folds its cells rather than ellipsis).
    ``markup``: the cells are rich markup (the comparison's verdict colours); else plain text (error
    kinds and labels from a file are never markup)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    texts = [[Text.from_markup(c) if markup else Text(c) for c in row] for row in rows]
    widths = []
    for i, name in enumerate(headers):
        column = [row[i] for row in texts]
        if name in FLEXIBLE:  # it wraps, at spaces, onto lines of at least 20 characters
            words = max((len(w) for t in column for w in t.plain.split()), default=1)
            widths.append(min(max(words, 20), max((t.cell_len for t in column), default=0)))
        else:
            widths.append(max((t.cell_len for t in column), default=0))
    parts = fit_columns(headers, widths, width, importance=importance, keys=keys)
    tables = []
    for n, part in enumerate(parts):
        t = Table(title=title if n == 0 else None, header_style="bold", show_edge=False, pad_edge=False)
        for i, header in part:
            name = headers[i]
            t.add_column(header, justify="left" if name in left else "right", no_wrap=name not in FLEXIBLE,
                         overflow="fold")
        for row in texts:
            t.add_row(*(row[i] for i, _ in part))
        tables.append(t)
    return Group(*[x for n, t in enumerate(tables) for x in ((t,) if n == 0 else (Text(""), t))])


def fold_header(name: str) -> str:
    """A header on two lines (split at the space that makes the longer line shortest), or as it is."""
    words = name.split(" ")
    if len(words) < 2:
        return name
    splits = [(" ".join(words[:i]), " ".join(words[i:])) for i in range(1, len(words))]
    a, b = min(splits, key=lambda ab: max(len(ab[0]), len(ab[1])))
    return f"{a}\n{b}"


def _width(text: str) -> int:
    return max((len(line) for line in text.split("\n")), default=0)


def fit_columns(headers: list[str], cell_widths: list[int], width: int, *,
                importance: tuple[str, ...] = IMPORTANCE,
                keys: tuple[str, ...] = KEY_COLUMNS) -> list[list[tuple[int, str]]]:
    """The parts a table of these headers (and widest cells per column) is printed in at ``width``
    characters: per part, (column index, header text) in the table's order; see the rule above.
    ``cell_widths[i]`` is the widest cell of column i (for a wrapping column: the width it wraps at)."""
    n = len(headers)
    key_cols = [i for i in range(n) if headers[i] in keys] or [0]

    def header(i: int, fold: bool) -> str:
        # a header folds only where that narrows its column (not "good %" over wider cells)
        folded = fold_header(headers[i])
        narrower = max(cell_widths[i], _width(folded)) < max(cell_widths[i], len(headers[i]))
        return folded if fold and narrower else headers[i]

    def need(cols: list[int], fold: bool) -> int:
        return sum(max(cell_widths[i], _width(header(i, fold))) for i in cols) + SEPARATOR * (len(cols) - 1)

    def part(cols: list[int]) -> list[tuple[int, str]]:
        fold = need(cols, False) > width
        return [(i, header(i, fold)) for i in cols]

    every = list(range(n))
    if need(every, True) <= width:
        return [part(every)]
    rank = {name: r for r, name in enumerate(importance)}
    order = sorted((i for i in every if i not in key_cols), key=lambda i: (rank.get(headers[i], len(rank)), i))
    parts: list[list[int]] = []
    while order:
        cols = list(key_cols)
        for i in list(order):
            if need(sorted(cols + [i]), True) <= width:
                cols.append(i)
                order.remove(i)
        if len(cols) == len(key_cols):  # not even one more column fits beside the keys: it goes alone with them
            cols.append(order.pop(0))
        parts.append(sorted(cols))
    return [part(p) for p in parts]
