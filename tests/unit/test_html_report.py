"""The HTML report as a file: self-contained, escaped, missing figures shown as missing."""

from __future__ import annotations

import json
import re
from pathlib import Path

from specload.report.figures import ReportLevel, ReportPage, ReportRun, ReportSeries
from specload.report.html import render, write_html
from specload.report.timeseries import build_time_series
from tests.unit.test_timeseries import cols

EVIL = "</script><script>alert(1)</script>"


def page() -> ReportPage:
    ts = build_time_series(
        [cols([(0.0, 2.0, 100.0, 10.0, 50, True, None), (0.5, 3.0, 120.0, 11.0, 60, False, "http")])],
        [{"t_s": 1.0, "kind": "marker", "value": EVIL}],
        end_s=3.0,
    )
    base = ReportRun(
        label="base",
        description=[("target", "http://127.0.0.1:8000"), ("command", "specload run --api-key ***")],
        timeline=ts,
        side="base",
    )
    other = ReportRun(label=EVIL, description=[("model", EVIL)], timeline=None, notes=["vLLM's ITL is per chunk"],
                      side=EVIL)
    series = [
        ReportSeries("base", [ReportLevel(4, 16, 16, {}, {"throughput": {"value": 100.0, "ci_low": 95.0,
                                                                         "ci_high": 105.0}}, key="C=4")],
                     baseline=True),
        ReportSeries(EVIL, [ReportLevel(4, 16, 15, {"http": 1}, {
            "throughput": {"value": 120.0, "ci_low": 110.0, "ci_high": 130.0, "ratio": 1.2,
                           "ratio_ci_low": 1.1, "ratio_ci_high": 1.3, "verdict": "better"},
            "error_rate": {"value": 0.0625, "ci_low": 0.01, "ci_high": 0.28},
        }, key="C=4")]),
    ]
    return ReportPage(runs=[base, other], series=series, baseline="base")


def test_the_page_fetches_nothing() -> None:
    text = render(page())
    # every script and style is inline: no src/href to anywhere, no imports, no url() fetches
    assert not re.search(r"<script[^>]*\bsrc=", text, re.I)
    assert not re.search(r"<link\b", text, re.I)
    assert not re.search(r"@import", text, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text, re.I)
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?(https?:)?//", text, re.I)
    assert "sourceMappingURL" not in text
    assert text.count("<script") == 4  # the data, Chart.js, the annotation plugin, the report's own


def test_text_from_runs_cannot_break_out_of_the_page() -> None:
    text = render(page())
    assert text.count("<script") == 4  # a label with </script> did not open a fifth
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in text  # escaped where it is shown
    data = re.search(r'<script id="specload-data" type="application/json">(.*?)</script>', text, re.S)
    assert data is not None
    payload = json.loads(data.group(1))  # still valid JSON, with the label intact
    assert payload["runs"][1]["label"] == EVIL and payload["series"][1]["label"] == EVIL
    assert payload["runs"][0]["timeline"]["marks"][0]["label"] == EVIL


def test_intervals_verdicts_and_missing_figures() -> None:
    text = render(page())
    assert "[95.0, 105.0]" in text and "×1.200 [1.100, 1.300]" in text
    assert 'class="verdict better">better<' in text
    assert "6.2 <span class=\"ci\">[1.0, 28.0]</span>" in text  # a share shown in %
    # the baseline has no error rate: a dash marked missing, never 0
    base_table = text.split("<h3>base (baseline)</h3>", 1)[1].split("</table>", 1)[0]
    assert 'class="missing"' in base_table
    assert "No timeline: the file has no per-request times." in text
    assert "vLLM&#x27;s ITL is per chunk" in text


def test_write_returns_the_size(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    n = write_html(out, page())
    assert n == out.stat().st_size and 200_000 < n < 400_000  # the libraries are ~250 kB


def test_acceptance_by_category_is_on_the_page_escaped_and_only_when_a_run_has_categories() -> None:
    from specload.stats.levels import GroupFigures

    def group(rate: float | None, n: int) -> GroupFigures:
        return GroupFigures(n, n, 100 * n, 50.0, 40.0, 90.0, 120.0, 12.0, 15.0, 1.2, 300.0, None,
                            None if rate is None else 1 + 3 * rate, rate)

    p = page()
    assert "Acceptance by category" not in render(p)
    p.runs[0].categories = [("C=1", (2.5, 0.52), [("coding", group(0.83, 5)), (EVIL, group(0.26, 4))]),
                            ("C=4", (2.4, 0.48), [("coding", group(0.8, 6)), (EVIL, group(None, 4))])]
    text = render(p)
    section = text[text.index("<h2>Acceptance by category"):text.index("<h2>Timelines")]
    assert "<th>C=1</th><th>C=4</th>" in section and "83%" in section and "26%" in section
    assert EVIL not in section and "&lt;/script&gt;" in section  # a category name from a file is text
    assert section.count('class="missing">–') == 1  # its C=4 requests carried no counts
    assert "server (/metrics, whole level)</td><td>52%" in section


def test_the_page_leads_with_the_answer_one_crossover_and_the_crash() -> None:
    from specload.report.figures import crossover_note

    p = page()
    p.crossover = crossover_note({"primary": "throughput", "crossovers": [
        {"metric": "throughput", "side": "new", "between": [4, 16], "at": 9.2, "below": "worse", "above": "better",
         "decided": True},
        {"metric": "tpot_p50", "side": "new", "between": [1, 4], "at": 2, "below": "better", "above": "worse",
         "decided": True}]})
    p.runs[0].crashes = [{"exception_type": "EngineDeadError", "message": "engine died", "first_seen_s": 12.5}]
    p.series[1].levels[0].level_tok_s = 101.0  # the terminal's figure, 16 % off the steady state
    text = render(p)
    answer = text[text.index("<h2>The answer</h2>"):text.index("<h2>Runs</h2>")]
    assert text.index("<h2>The answer</h2>") < text.index("<h2>Levels</h2>")
    assert "✖ base: server crashed at 12.5 s: EngineDeadError: engine died" in answer
    assert answer.count('class="crossover"') == 1 and "Crossover on output tok/s: new is worse up to C=4" in answer
    assert "TPOT" not in answer.split('class="crossover"')[1].split("</p>")[0]  # one metric's, not every one
    assert "×1.200" in answer and 'class="verdict better"' in answer
    assert "120.0 here, 101.0 there" in answer  # why the page's tok/s and the terminal's differ
    assert "[no interval]" not in text
