"""Tables are never cut: at 80, 120 and 160 columns, and in the TUI's quit summary on an 80- and a
120-column terminal, every figure of every column is printed whole, C, tok/s and ok lead the first
part, and no line is wider than the width (``formatting.fit_columns``, ``formatting.fitted_table``)."""

from __future__ import annotations

import fcntl
import io
import os
import re
import struct
import termios
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from specload.datatypes import RequestRecord
from specload.formatting import KEY_COLUMNS, fit_columns, level_cells, table_columns
from specload.headless import print_tui_end
from specload.report.report import group_table, level_table
from specload.session.policy import SessionResult
from specload.stats.judgement import LevelJudgement
from specload.stats.levels import LevelColumns, LevelSummary
from specload.stats.slo import Interval, LevelGoodput

MS = 1_000_000


def _level(index: int, concurrency: int, ttft_ms: float, *, judged: bool) -> LevelSummary:
    cols = LevelColumns(index, concurrency)
    for i in range(12):
        start = 1000.0 * index + 7 * i
        offs = tuple(int((ttft_ms + i + 9.5 * k) * MS) for k in range(40))
        cols.add(RequestRecord(
            request_id=i, level=concurrency, level_index=index, warmup=False, start_ns=int(start * MS),
            end_ns=int(start * MS) + offs[-1], ttft_ns=offs[0], e2e_ns=offs[-1], output_tokens=87,
            tokens_estimated=False, prompt_tokens=128, chunks=len(offs), chunk_offsets_ns=offs,
            prompt_tokens_requested=128,
        ))
    s = cols.summary()
    if not judged:
        return s
    good = LevelGoodput("ttft_p99<=200ms", 12, 10, 9, Interval(0.9, 0.6, 0.98), Interval(8.73, 6.1, 9.9),
                        Interval(871.25, 612.5, 990.75), (), "undecided")
    verdict = LevelJudgement("throughput", s.throughput_tok_s, 870.0, 960.0, 4.9, 874.5, 1.0312, 0.9541, 1.1187,
                             "insufficient")
    return replace(s, goodput=good, judged=verdict, errors=(("http_503", 2), ("timeout", 1)))


LEVELS = [_level(i, c, t, judged=True) for i, (c, t) in enumerate(((1, 21.9), (16, 108.4), (128, 1870.2)))]


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _check(text: str, width: int, levels: list[LevelSummary]) -> None:
    assert "…" not in text  # nothing ellipsised
    assert all(len(ln) <= width for ln in text.splitlines()), max(text.splitlines(), key=len)
    for s in levels:
        cells = level_cells(s)
        for name in table_columns(levels):
            for word in cells[name].split():  # every figure whole (the errors column may wrap at a space)
                assert word in text, (name, cells[name])
    first_part = text.split("\n\n")[0]
    header = " ".join(_lines(first_part)[:2])  # a header may fold onto a second line
    for name in ("C", "tok/s", "ok"):
        assert f" {name} " in f" {header} ", name


@pytest.mark.parametrize("width", [80, 120, 160])
def test_a_level_table_fits_every_width_whole(width: int) -> None:
    out = io.StringIO()
    console = Console(file=out, width=width)
    console.print(level_table(LEVELS, width=width))
    _check(out.getvalue(), width, LEVELS)
    if width == 160:
        # the plain table (no --slo, no --baseline) is one table at 160, its headers on one line
        plain = [_level(i, c, t, judged=False) for i, (c, t) in enumerate(((1, 21.9), (16, 108.4)))]
        out = io.StringIO()
        Console(file=out, width=width).print(level_table(plain, width=width))
        assert "\n\n" not in out.getvalue().strip() and "TTFT p50/90/95/99 ms" in out.getvalue()


@pytest.mark.parametrize("width", [60, 80, 120, 160, 200])
def test_fit_columns_keeps_every_column_once_and_the_key_in_each_part(width: int) -> None:
    levels = LEVELS
    headers = list(table_columns(levels, wide=True))
    cells = [level_cells(s) for s in levels]
    widths = [max(len(c[h]) for c in cells) for h in headers]
    parts = fit_columns(headers, widths, width)
    seen = [i for part in parts for i, _ in part if headers[i] not in KEY_COLUMNS]
    assert sorted(seen) == [i for i, h in enumerate(headers) if h not in KEY_COLUMNS]  # each once, none dropped
    for part in parts:
        assert headers[part[0][0]] == "C"  # the key leads every part
        assert [i for i, _ in part] == sorted(i for i, _ in part)  # the table's own order
        need = sum(max(widths[i], max(len(x) for x in text.split("\n"))) for i, text in part) + 3 * (len(part) - 1)
        assert need <= width or len(part) == 2  # only a column too wide even alone may overflow (and folds)
    first = {headers[i] for i, _ in parts[0]}
    assert {"C", "tok/s", "ok"} <= first
    if width >= 120:
        assert {"verdict", "TTFT avg±sd p50/p90/p95/p99 ms"} <= first


def _pty_stream(cols: int) -> tuple[int, io.TextIOWrapper]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    return master, io.TextIOWrapper(os.fdopen(slave, "wb", buffering=0), encoding="utf-8", write_through=True)


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize("cols", [80, 120])
def test_the_tui_quit_summary_fits_its_terminal(cols: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal of ``cols`` columns (a pty; COLUMNS saying otherwise is ignored there), the quit
    summary is the level table with C, TTFT and TPOT, fitted to the terminal."""
    monkeypatch.setenv("COLUMNS", "300")
    master, stream = _pty_stream(cols)
    try:
        print_tui_end(SessionResult("completed", 0, tuple(LEVELS)), None, stream=stream)
    finally:
        stream.close()
    text = _read_all(master)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # the terminal's styles
    _check(text.split("end: ")[0], cols, LEVELS)
    assert "TTFT" in text and "TPOT" in text
    assert "end: completed" in text and "record: none (--no-record)" in text


def test_a_record_from_before_p90_gets_them_from_its_request_lines() -> None:
    """A record made before p90/p95 were kept (its level lines have p50/p99 only) shows them too, from
    its request lines, not as dashes."""
    import numpy as np

    from specload.record.reader import read_record
    from specload.report.report import summaries_from_record

    shared = Path(os.environ.get("SPECLOAD_SHARED") or Path(__file__).resolve().parents[3] / "shared")
    path = shared / "fixtures" / "peer-results" / "vllm-0.32-cpu-2" / "spl_crash_enginecore_kill.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not found: set SPECLOAD_SHARED")
    data = read_record(str(path))
    assert all("ttft_ms_p90" not in d for d in data.levels)  # an older record
    (s,), recomputed = summaries_from_record(data)
    lines = [r for r in data.requests if r.get("ok") and not r.get("warmup") and r["level_index"] == s.level_index]
    for key, got, scale in (("ttft_ms", s.ttft_ms_p90, 1), ("tpot_ms", s.tpot_ms_p95, 1), ("e2e_ms", s.e2e_s_p90, 1e3)):
        q = 95 if key == "tpot_ms" else 90
        assert got == pytest.approx(np.percentile([r[key] for r in lines], q) / scale)
    assert "/-/" not in level_cells(s)["TTFT p50/90/95/99 ms"] and not recomputed


@pytest.mark.parametrize("width", [80, 120, 160])
def test_report_by_category_fits_every_width_whole(width: int) -> None:
    cols = LevelColumns(0, 8)
    for i, cat in enumerate(("summarise", "extract", "creative", "coding") * 3):
        offs = tuple(int((20.5 + i + 3.25 * k) * MS) for k in range(30))
        cols.add(RequestRecord(
            request_id=i, level=8, level_index=0, warmup=False, start_ns=int(7 * i * MS), end_ns=int(7 * i * MS) + offs[-1],
            ttft_ns=offs[0], e2e_ns=offs[-1], output_tokens=30, tokens_estimated=False, prompt_tokens=1372 + i,
            chunks=len(offs), chunk_offsets_ns=offs, prompt_tokens_requested=1372, category=cat,
        ))
    level = cols.summary()
    out = io.StringIO()
    Console(file=out, width=width).print(group_table([level], "category", width=width))
    text = out.getvalue()
    assert "…" not in text and all(len(ln) <= width for ln in text.splitlines()), text
    assert "by category" in text
    for name, g in level.categories or ():
        assert sum(ln.startswith(name + " ") for ln in text.splitlines()) >= 1, name
        assert f"{g.throughput_tok_s:.1f}" in text and f"{g.ttft_ms_p50:.1f}/{g.ttft_ms_p99:.1f}" in text
