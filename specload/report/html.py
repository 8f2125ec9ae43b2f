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
    ReportPage,
    ReportRun,
    ReportSeries,
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
    elif m.get("note"):
        out += f' <span class="ci" title="{_e(m["note"])}">[no interval]</span>'
    ratio = m.get("ratio")
    if ratio is not None:
        rlo, rhi = m.get("ratio_ci_low"), m.get("ratio_ci_high")
        out += f'<span class="ci">×{ratio:.3f}'
        if rlo is not None and rhi is not None:
            out += f" [{rlo:.3f}, {rhi:.3f}]"
        out += "</span>"
    verdict = m.get("verdict")
    if verdict:
        out += f' <span class="verdict {_e(verdict)}">{_e(verdict.replace("_", " "))}</span>'
    return f"<td>{out}</td>"


def level_table(series: ReportSeries, keys: list[str]) -> str:
    """The series' levels, one column per metric in ``keys`` (the metrics any series on the page has,
    so that a figure one run lacks shows as missing next to the others)."""
    head = "".join(f"<th>{_e(METRICS[k][0])}{' ' + _e(METRICS[k][1]) if METRICS[k][1] else ''}</th>" for k in keys)
    rows = []
    with_notes = any(x.notes for x in series.levels)
    for lv in series.levels:
        ok = "–" if lv.ok is None or lv.requests is None else f"{lv.ok}/{lv.requests}"
        errs = ", ".join(f"{k} {n}" for k, n in sorted(lv.errors.items(), key=lambda kv: -kv[1])) or "–"
        cells = "".join(_cell(lv.metrics.get(k), METRICS[k][2], METRICS[k][3]) for k in keys)
        notes = f'<td class="text">{_e("; ".join(lv.notes))}</td>' if with_notes else ""
        rows.append(f"<tr><td>{_e(lv.key or lv.concurrency)}</td><td>{ok}</td>{cells}"
                    f"<td class=\"text\">{_e(errs)}</td>{notes}</tr>")
    notes_head = '<th class="text">notes</th>' if with_notes else ""
    return (
        f'<table class="levels"><thead><tr><th>C</th><th>ok</th>{head}<th class="text">errors</th>{notes_head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


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
    seen: set[str] = set()
    for c in run.crashes:
        sig = str(c.get("signature") or c.get("message"))
        if sig in seen:
            continue
        seen.add(sig)
        t = c.get("first_seen_s", c.get("t_s"))
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
        "(hover for the signature). Shaded: paused (grey), server down (orange)."
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
{page.summary_html}<h2>Runs</h2><div class="runs">{cards}</div>
<h2>Levels</h2><p class="sub">{baseline}Values with their 95% interval below them where there is one; – marks a figure the run does not have (hover it for why).</p>
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

