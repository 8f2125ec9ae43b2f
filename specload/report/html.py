"""The offline HTML report: one self-contained file with the runs, their level tables and charts.

The CSS, Chart.js and its annotation plugin (vendored in ``assets/``, MIT, licence headers kept), the
report's script and the data (one JSON block of ``ReportRun``) are all inside, so it opens from a mail
attachment without a network. Tables are plain HTML (readable without the script); the script draws
the charts. The data grows with the run's duration (``timeline.MAX_BINS`` bins), not its requests.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from pathlib import Path

from specload import __version__
from specload.report.figures import (
    METRICS,
    ONLY_WHERE_PRESENT,
    RUN_COLORS,
    ReportLevel,
    ReportPage,
    ReportRun,
    ReportSeries,
    crash_lines,
    distinct_crashes,
)
from specload.report.lossless import html_section


def _asset(name: str) -> str:
    return resources.files("specload.report").joinpath("assets", name).read_text(encoding="utf-8")


def _inline_script(js: str) -> str:
    # a source map comment would make a browser with its developer tools open fetch a .map file
    if "</script" in js.lower():
        raise ValueError("a script to inline contains '</script'")  # it would end the block early
    return "\n".join(ln for ln in js.splitlines() if not ln.startswith("//# sourceMappingURL="))


def _e(v: object) -> str:
    return html.escape(str(v), quote=True)


def _fmt(v: float | None, digits: int) -> str:
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def _cell(m: dict | None, digits: int, scale: float) -> str:
    if m is None or m.get("value") is None:
        note = (m or {}).get("note") or "not in this run"
        return f'<td class="missing" title="{_e(note)}">–</td>'
    out = _fmt(m["value"] * scale, digits)
    lo, hi = m.get("ci_low"), m.get("ci_high")
    if lo is not None and hi is not None:
        out += f' <span class="ci">[{_fmt(lo * scale, digits)}, {_fmt(hi * scale, digits)}]</span>'
    ratio = m.get("ratio")
    if ratio is not None:  # the ratio's interval in its title: a column per metric must fit the page
        rlo, rhi = m.get("ratio_ci_low"), m.get("ratio_ci_high")
        iv = f" [{rlo:.3f}, {rhi:.3f}]" if rlo is not None and rhi is not None else ""
        out += f'<span class="ci" title="ratio to the baseline ×{ratio:.3f}{iv}">×{ratio:.3f}</span>'
    verdict = m.get("verdict")
    if verdict:
        out += f' <span class="verdict {_e(verdict)}">{_e(verdict.replace("_", " "))}</span>'
    # no interval: the reason in the cell's title, not a "[no interval]" in every cell
    title = f' title="no interval: {_e(m["note"])}"' if m.get("note") and lo is None else ""
    return f"<td{title}>{out}</td>"


MIDDLE = ("90", "95")  # p90 and p95 share a column (one above the other), their intervals in its title


def level_table(series: ReportSeries, keys: list[str]) -> str:
    """The series' levels, one column per metric in ``keys`` (the metrics any series on the page has,
    so that a figure one run lacks shows as missing next to the others); p90 and p95 of a latency
    share one column (``MIDDLE``), so the table fits 1,400 px."""
    columns: list[tuple[str, list[str]]] = []  # (heading, metric keys)
    for k in keys:
        if k.endswith(tuple(f"_p{q}" for q in MIDDLE)):
            family = k.rsplit("_p", 1)[0]
            if any(f"{family}_p{q}" == k for q in MIDDLE[1:]) and columns and columns[-1][1][0].startswith(family):
                columns[-1][1].append(k)
                continue
            label, unit = METRICS[k][0].rsplit(" ", 1)[0], METRICS[k][1]
            columns.append((f"{label} p90 / p95 {unit}", [k]))
        else:
            label, unit = METRICS[k][0], METRICS[k][1]
            columns.append((f"{label} {unit}" if unit and not label.endswith(unit) else label, [k]))
    head = "".join(f"<th>{_e(h)}</th>" for h, _ in columns)
    rows = []
    for lv in series.levels:
        ok = "–" if lv.ok is None or lv.requests is None else f"{lv.ok}/{lv.requests}"
        errs = ", ".join(f"{k} {n}" for k, n in sorted(lv.errors.items(), key=lambda kv: -kv[1])) or "–"
        cells = "".join(_cell(lv.metrics.get(ks[0]), METRICS[ks[0]][2], METRICS[ks[0]][3]) if len(ks) == 1
                        and not ks[0].endswith(tuple(f"_p{q}" for q in MIDDLE)) else _middle(lv, ks)
                        for _, ks in columns)
        rows.append(f"<tr><td>{_e(lv.key or lv.concurrency)}</td><td>{ok}</td>{cells}"
                    f"<td class=\"text\">{_e(errs)}</td></tr>")
    # each level's notes (flags, fill and drain, a cut) under the table, not a column that stretches its rows
    notes = "".join(f"<li><b>{_e(lv.key or lv.concurrency)}</b>: {_e('; '.join(lv.notes))}</li>"
                    for lv in series.levels if lv.notes)
    return (
        f'<table class="levels"><thead><tr><th>C</th><th>ok</th>{head}<th class="text">errors</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + (f'<ul class="level-notes">{notes}</ul>' if notes else "")
    )


def _middle(lv: ReportLevel, keys: list[str]) -> str:
    """p90 · p95 of one latency: the values, their intervals and verdicts in the cell's title."""
    values, titles = [], []
    for k in keys:
        m = lv.metrics.get(k) or {}
        digits, scale = METRICS[k][2], METRICS[k][3]
        v = m.get("value")
        values.append("–" if v is None else _fmt(v * scale, digits))
        lo, hi = m.get("ci_low"), m.get("ci_high")
        iv = f" [{_fmt(lo * scale, digits)}, {_fmt(hi * scale, digits)}]" if lo is not None and hi is not None else ""
        verdict = f" {m['verdict'].replace('_', ' ')}" if m.get("verdict") else ""
        titles.append(f"{METRICS[k][0]}: {values[-1]}{iv}{verdict}")
    return f'<td title="{_e("; ".join(titles))}">{"<br>".join(values)}</td>'


def headline_table(page: ReportPage) -> str:
    """The answer first: per level, throughput, TTFT and TPOT p50/p99 and ok (one table per run); for
    a comparison, each side's headline metric with the ratio to the baseline and the verdict."""
    if page.baseline is None:
        out = []
        for sr in page.series:
            body = "".join(
                f"<tr><td>{_e(lv.key or lv.concurrency)}</td>{_value(lv, 'throughput')}"
                f"<td>{_pair(lv, 'ttft')}</td><td>{_pair(lv, 'tpot')}</td>"
                f"<td>{'–' if lv.ok is None or lv.requests is None else f'{lv.ok}/{lv.requests}'}</td></tr>"
                for lv in sr.levels)
            title = f"<h3>{_e(sr.label)}</h3>" if len(page.series) > 1 else ""
            out.append(f'{title}<div class="table-wrap"><table class="levels headline"><thead><tr><th>C</th>'
                       "<th>output tok/s</th><th>TTFT p50 / p99 ms</th><th>TPOT p50 / p99 ms</th><th>ok</th>"
                       f"</tr></thead><tbody>{body}</tbody></table></div>")
        return "".join(out)
    spec = METRICS.get(page.primary, (page.primary, "", 1, 1.0))
    base = next((sr for sr in page.series if sr.baseline), page.series[0])
    others = [sr for sr in page.series if sr is not base]
    head = f"<th>C</th><th>{_e(base.label)}</th>" + "".join(
        f"<th>{_e(sr.label)}</th><th>ratio</th><th>verdict</th>" for sr in others)
    rows = []
    for lv in base.levels:
        cells = [f"<td>{_e(lv.key)}</td>", _value(lv, page.primary)]
        for sr in others:
            o = next((x for x in sr.levels if x.key == lv.key), None)
            m = (o.metrics.get(page.primary) if o is not None else None) or {}
            ratio = m.get("ratio")
            rlo, rhi = m.get("ratio_ci_low"), m.get("ratio_ci_high")
            iv = f' <span class="ci">[{rlo:.3f}, {rhi:.3f}]</span>' if rlo is not None and rhi is not None else ""
            verdict = m.get("verdict")
            cells += [_value(o, page.primary) if o is not None else '<td class="missing">–</td>',
                      f"<td>×{ratio:.3f}{iv}</td>" if ratio is not None else '<td class="missing">–</td>',
                      f'<td class="text" title="{_e("; ".join(o.notes) if o is not None else "")}"><span class="verdict '
                      f'{_e(verdict)}">{_e(verdict.replace("_", " "))}</span></td>' if verdict
                      else '<td class="missing">–</td>']
        rows.append(f"<tr>{''.join(cells)}</tr>")
    caption = f"<caption>{_e(spec[0])}{' (' + _e(spec[1]) + ')' if spec[1] and spec[1] not in spec[0] else ''}</caption>"
    return (f'<div class="table-wrap"><table class="levels headline">{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _value(lv: ReportLevel, key: str) -> str:
    m = lv.metrics.get(key) or {}
    v = m.get("value")
    if v is None:
        return '<td class="missing">–</td>'
    return f"<td>{_fmt(v * METRICS[key][3], METRICS[key][2])}</td>"


def _pair(lv: ReportLevel, family: str) -> str:
    vals = []
    for q in ("50", "99"):
        m = lv.metrics.get(f"{family}_p{q}") or {}
        v = m.get("value")
        vals.append("–" if v is None else _fmt(v * METRICS[f"{family}_p{q}"][3], METRICS[f"{family}_p{q}"][2]))
    return " / ".join(vals)


def throughput_note(page: ReportPage) -> str:
    """Why this page's tok/s and the terminal's can differ, with the levels where they do (by more
    than 2 %): the page (and the verdicts) count steady-state requests, the terminal table every token
    of the level over its active time."""
    differ = []
    for sr in page.series:
        for lv in sr.levels:
            steady = (lv.metrics.get("throughput") or {}).get("value")
            if steady and lv.level_tok_s and abs(lv.level_tok_s / steady - 1) > 0.02:
                who = f"{sr.label} " if len(page.series) > 1 else ""
                differ.append(f"{who}{lv.key}: {_fmt(steady, 1)} here, {_fmt(lv.level_tok_s, 1)} there")
    if not differ:
        return ""
    return ('<p class="sub">Output tok/s on this page is the steady-state figure (requests at full load, '
            "by Little's law; the level's fill and drain left out), which the verdicts and intervals use. "
            "The terminal's level table (<code>specload report</code>) divides every token of the level by its "
            "whole active time, fill and drain included, so it reads lower where they are long: "
            f"{_e('; '.join(differ))}.</p>")


def category_table(run: ReportRun) -> str:
    """Acceptance by category: per level (a column each) and category (a row each) the acceptance
    rate and length the requests' own counts give, with their per-request tok/s; the server's figure
    over the whole level below."""
    levels = run.categories
    names = sorted({name for _, _, groups in levels for name, _ in groups})
    head = "".join(f"<th>{_e(key)}</th>" for key, _, _ in levels)
    rows = []
    for name in names:
        cells = []
        for _, _, groups in levels:
            g = dict(groups).get(name)
            if g is None or g.accept_rate is None:
                cells.append('<td class="missing">–</td>')
                continue
            cells.append(f"<td>{100 * g.accept_rate:.0f}%<br><span class=\"ci\">len {_fmt(g.accept_len, 2)} · "
                         f"{_fmt(g.per_request_tok_s, 1)} tok/s · {g.requests} req</span></td>")
        rows.append(f'<tr><td class="text">{_e(name)}</td>{"".join(cells)}</tr>')
    server = "".join(f"<td>{'–' if r is None else f'{100 * r:.0f}%'}<br><span class=\"ci\">len {_fmt(a, 2)}</span></td>"
                     for _, (a, r), _ in levels)
    rows.append(f'<tr><td class="text">server (/metrics, whole level)</td>{server}</tr>')
    return (f'<table class="levels"><thead><tr><th class="text">category</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _run_card(run: ReportRun, color: str) -> str:
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_value_html(k, v)}</dd>" for k, v in run.description)
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in run.notes)
    return f'<div class="run" style="--run-color:{color}"><h3>{_e(run.label)}</h3><dl>{rows}</dl>{notes}</div>'


def _value_html(key: str, value: str) -> str:
    return f"<code>{_e(value)}</code>" if key in ("command", "launch", "server log command") else _e(value)


def _crash_list(run: ReportRun) -> str:
    if not run.crashes:
        return ""
    items = []
    for c, t in distinct_crashes(run.crashes):
        where = f" at {c['innermost_frame']}" if c.get("innermost_frame") else ""
        ranks = c.get("processes") or []
        who = f" (ranks {', '.join(map(str, ranks[:8]))})" if ranks else ""
        t_text = f"{t:.1f} s" if isinstance(t, int | float) else "?"
        items.append(
            f"<li><b>{_e(t_text)}</b> <code>{_e(c.get('exception_type') or 'crash')}: "
            f"{_e(c.get('message') or '')}</code>{_e(where)}{_e(who)}</li>"
        )
    return f'<h3>Crashes</h3><ul class="crashes">{"".join(items)}</ul>'


def _payload(page: ReportPage) -> dict:
    series = [
        {
            "label": sr.label,
            "color": RUN_COLORS[i % len(RUN_COLORS)],
            "levels": [
                {
                    "concurrency": lv.concurrency,
                    "key": lv.key,
                    "requests": lv.requests,
                    "metrics": {k: {x: m.get(x) for x in ("value", "ci_low", "ci_high")} for k, m in lv.metrics.items()},
                }
                for lv in sr.levels
            ],
        }
        for i, sr in enumerate(page.series)
    ]
    runs = [
        {"id": f"run{i}", "label": r.label, "timeline": r.timeline.as_json() if r.timeline is not None else None}
        for i, r in enumerate(page.runs)
    ]
    return {"series": series, "runs": runs, "baseline": page.baseline}


CONCURRENCY_CHARTS = (
    ("throughput", "Output throughput vs concurrency"),
    ("per_request", "Per-request tok/s vs concurrency"),
    ("ttft", "TTFT vs concurrency"),
    ("tpot", "TPOT vs concurrency"),
    ("e2e", "E2E latency vs concurrency"),
    ("tradeoff", "Throughput vs p99 latency"),
)


def _color_of(page: ReportPage, run: ReportRun) -> str:
    for i, sr in enumerate(page.series):
        if sr.label == (run.side or run.label):
            return RUN_COLORS[i % len(RUN_COLORS)]
    return "#888888"


def render(page: ReportPage) -> str:
    """The whole page as one string."""
    cards = "".join(_run_card(r, _color_of(page, r)) for r in page.runs)
    comparison = "".join(f'<p class="note">{_e(n)}</p>' for n in page.comparison_notes)
    crossover = f'<p class="crossover">{_e(page.crossover)}</p>' if page.crossover else ""
    crashed = "".join(f'<p class="crash">✖ {_e(line)}</p>' for line in crash_lines(page))
    bands = (
        "Shaded bands are 95% intervals where a run has them."
        if any(m.get("ci_low") is not None for s in page.series for lv in s.levels for m in lv.metrics.values())
        else "No intervals in these runs."
    )
    charts = "".join(
        f'<div class="chart-box"><h3>{_e(title)}</h3><div class="chart" data-chart="{name}"></div></div>'
        for name, title in CONCURRENCY_CHARTS
    )
    keys = [k for k in METRICS if any(k in lv.metrics and (k not in ONLY_WHERE_PRESENT or lv.metrics[k].get("value")
                                                           is not None) for s in page.series for lv in s.levels)]
    tables = []
    for sr in page.series:
        tag = " (baseline)" if sr.baseline else ""
        tables.append(f'<h3>{_e(sr.label)}{tag}</h3><div class="table-wrap">{level_table(sr, keys)}</div>')
    by_category = "".join(f'<h3>{_e(r.label)}</h3><div class="table-wrap">{category_table(r)}</div>'
                          for r in page.runs if r.categories)
    if by_category:
        by_category = ('<h2>Acceptance by category</h2><p class="sub">Accepted of drafted tokens from the '
                       "server's own per-request counts (and tokens per verify step, per-request tok/s, "
                       f"requests), by dataset category.</p>{by_category}")
    timelines = []
    legend = (
        "Dashed grey lines: level boundaries (dotted: set by key). Blue lines: markers. Red: crashes "
        "(hover for the signature). Shaded: paused (grey), server down (orange). The server's tok/s is "
        "its token counter over windows of at least 1 s (a poll that came sooner is merged with the next)."
    )
    for i, run in enumerate(page.runs):
        if run.timeline is not None:
            tl = run.timeline
            src = (f"Server samples from {tl.server_source}." if tl.server_source else
                   "No server samples in this run." if tl.has_server else "The source records no server samples.")
            timelines.append(
                f"<h3>{_e(run.label)}</h3><p class=\"sub\">{_e(legend)} {_e(src)}</p>"
                f"<div data-timeline=\"run{i}\"></div>{_crash_list(run)}"
            )
        else:
            timelines.append(
                f'<h3>{_e(run.label)}</h3><p class="missing">No timeline: the file has no per-request times.</p>'
            )
    # every "<" in the data as \u003c: no "</script>" or "<!--" in it can end or bend the block
    data = json.dumps(_payload(page), separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    baseline = f"Ratios and verdicts against <b>{_e(page.baseline)}</b>. " if page.baseline else ""
    n = len(page.runs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(page.title)}</title>
<style>{_asset("report.css")}</style>
</head><body>
<h1>{_e(page.title)}</h1>
<p class="sub">{n} run{"s" if n != 1 else ""} · made {_e(page.generated_at)} by specload {_e(__version__)}</p>
<h2>The answer</h2>{crashed}{headline_table(page)}{crossover}{throughput_note(page)}
{page.summary_html}<h2>Runs</h2><div class="runs">{cards}</div>
<h2>Levels</h2><p class="sub">{baseline}Values with their 95% interval below them where there is one (hover a value without one for why); – marks a figure the run does not have.</p>
{comparison}{"".join(tables)}
{html_section(page.comparison)}
<h2>Against concurrency</h2><p class="sub">{bands} Hover a point for its values.</p>
<div class="charts">{charts}</div>
{by_category}
<h2>Timelines</h2>{"".join(timelines)}
<footer>Charts: Chart.js 4.6.1 and chartjs-plugin-annotation 3.1.0 (MIT licence, © Chart.js Contributors), inlined.</footer>
<script id="specload-data" type="application/json">{data}</script>
<script>{_inline_script(_asset("chart.umd.min.js"))}</script>
<script>{_inline_script(_asset("chartjs-plugin-annotation.min.js"))}</script>
<script>{_inline_script(_asset("report.js"))}</script>
</body></html>
"""


def write_html(path: str | Path, page: ReportPage) -> int:
    """Write the report; returns its size in bytes."""
    text = render(page)
    data = text.encode("utf-8")
    Path(path).write_bytes(data)
    return len(data)

