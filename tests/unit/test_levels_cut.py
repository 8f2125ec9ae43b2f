"""Levels cut by a crash, the server down or a pause (issue 11): throughput over the active time only,
the cut and the requests lost in the summary and its record line."""

from __future__ import annotations

import pytest

from specload.datatypes import ErrorKind, RequestRecord
from specload.formatting import level_line
from specload.stats.levels import LevelBook, LevelSummary

S = 1_000_000_000


def rec(start_s: float, end_s: float, tokens: int, *, ok: bool = True, kind: ErrorKind = ErrorKind.STALL,
        idx: int = 0) -> RequestRecord:
    start, end = int(start_s * S), int(end_s * S)
    return RequestRecord(
        request_id=0, level=4, level_index=idx, warmup=False, start_ns=start, end_ns=end,
        ttft_ns=int(0.1 * S) if ok else None, e2e_ns=end - start if ok else None,
        output_tokens=tokens if ok else 0, tokens_estimated=False, prompt_tokens=10, chunks=tokens if ok else 0,
        error_kind=None if ok else kind, error_detail=None if ok else "stalled",
    )


def level(book: LevelBook, records: list[RequestRecord], idx: int = 0) -> LevelSummary:
    for _ in records:
        book.started(idx)
    out = []
    for r in records:
        out += book.add(r)
    out += book.close(idx)
    assert [s.level_index for s in out] == [idx]
    return out[0]


def test_an_uncut_level_is_over_its_wall_time_and_says_nothing_of_cuts() -> None:
    book = LevelBook()
    book.open(0, 2)
    s = level(book, [rec(0, 10, 1000), rec(0, 10, 1000)])
    assert s.throughput_tok_s == pytest.approx(200.0)
    assert s.cut is None and s.active_s is None and s.lost is None
    assert not {"cut", "active_s", "lost"} & set(s.as_record())


def test_a_crash_cuts_the_time_after_it_and_counts_the_hung_requests_as_lost() -> None:
    # 10 s of load at 100 tok/s, then the server crashes: two streams hang 60 s until they stall
    book = LevelBook()
    book.open(0, 2)
    for _ in range(2):
        book.started(0)
    done = book.add(rec(0, 10, 1000))
    book.cut_begin("crash", 10 * S)
    book.started(0)
    book.started(0)
    done += book.add(rec(5, 70, 0, ok=False))
    done += book.add(rec(6, 70, 0, ok=False))
    book.add(rec(0, 9, 0, ok=False, kind=ErrorKind.HTTP))  # failed before the crash: not lost to it
    done += book.close(0)
    (s,) = done
    assert s.wall_s == pytest.approx(70.0)
    assert s.active_s == pytest.approx(10.0)
    assert s.throughput_tok_s == pytest.approx(100.0)  # 1000 tokens / 10 s, not / 70 s (14.3)
    assert s.req_s == pytest.approx(0.1)
    assert s.cut == "crash" and s.lost == 2
    d = s.as_record()
    assert (d["cut"], d["active_s"], d["lost"]) == ("crash", 10.0, 2)
    assert LevelSummary.from_record(d).as_record() == d


def test_a_pause_cuts_only_the_time_no_request_was_in_flight() -> None:
    # the requests in flight when the pause began stream on until 12 s: those seconds count, the
    # idle rest of the 25 s pause does not
    book = LevelBook()
    book.open(0, 1)
    book.cut_begin("pause", 10 * S)
    book.cut_end(35 * S)
    s = level(book, [rec(0, 5, 500), rec(5, 12, 700), rec(35, 40, 500)])
    assert s.wall_s == pytest.approx(40.0)
    assert s.active_s == pytest.approx(17.0)  # 40 - (35 - 12)
    assert s.throughput_tok_s == pytest.approx(1700 / 17)
    assert s.cut == "pause" and s.lost == 0


def test_a_pause_while_requests_streamed_cut_nothing_and_says_nothing() -> None:
    """"cut by pause: active 10.9 of 10.9 s" was said of a level whose pause came while its requests
    streamed on: nothing was cut, so nothing is said."""
    book = LevelBook()
    book.open(0, 1)
    book.cut_begin("pause", 4 * S)
    book.cut_end(6 * S)
    s = level(book, [rec(0, 10, 1000)])  # in flight through the whole pause
    assert s.cut is None and s.active_s is None and s.lost is None
    assert s.throughput_tok_s == pytest.approx(100.0)
    assert "cut by" not in level_line(s)


def test_a_crash_during_a_pause_cuts_from_the_pause_on_and_is_named() -> None:
    book = LevelBook()
    book.open(0, 1)
    book.cut_begin("pause", 10 * S)
    book.cut_begin("crash", 20 * S)
    book.cut_begin("server_down", 21 * S)  # the crash's cut goes on: it came first
    s = level(book, [rec(0, 10, 1000), rec(9, 50, 0, ok=False)])
    # the pause's seconds had a request in flight (it hung later): they count; from the crash on, not
    assert s.active_s == pytest.approx(20.0)
    assert s.cut == "pause"  # what cut it first
    assert s.lost == 1


def test_a_cut_outside_a_levels_span_does_not_mark_it() -> None:
    # paused, then the user set a new concurrency: the new level opens cut but starts after the resume
    book = LevelBook()
    book.open(0, 1)
    book.cut_begin("pause", 10 * S)
    s0 = level(book, [rec(0, 10, 1000)], 0)
    assert s0.cut is None and s0.throughput_tok_s == pytest.approx(100.0)
    book.open(1, 2)
    book.cut_end(30 * S)
    s1 = level(book, [rec(30, 40, 1000, idx=1)], 1)
    assert s1.cut is None and s1.throughput_tok_s == pytest.approx(100.0)


def test_a_cut_that_never_ended_runs_to_the_levels_last_request() -> None:
    book = LevelBook()
    book.open(0, 1)
    book.started(0)
    book.started(0)
    book.add(rec(0, 4, 400))
    book.cut_begin("server_down", 4 * S)
    book.add(rec(3, 30, 0, ok=False, kind=ErrorKind.CONNECT))
    (s,) = book.flush()
    assert (s.cut, s.active_s, s.lost) == ("server_down", pytest.approx(4.0), 1)
    assert s.throughput_tok_s == pytest.approx(100.0)


def _crash_cut_level(book: LevelBook):
    """Level 1 at C=4: one request done by t=20 s, a crash then, one request failing at t=80 s."""
    book.open(1, 4)
    book.started(1)
    book.started(1)
    book.add(rec(10, 20, 1000, idx=1))
    book.cut_begin("crash", 20 * S)
    book.add(rec(15, 80, 0, ok=False, idx=1))
    (cut,) = book.close(1)
    return cut


def test_the_line_the_table_and_the_report_say_a_level_was_cut() -> None:
    from specload.formatting import level_cells, level_line, table_columns
    from specload.report.report import level_table

    book = LevelBook()
    book.open(0, 2)
    uncut = level(book, [rec(0, 10, 1000)])
    cut = _crash_cut_level(book)
    assert "cut" not in level_line(uncut) and "cut" not in table_columns([uncut])
    assert "| req/s: 0.10 | cut by crash: active 10.0 of 70.0 s, 1 request lost |" in level_line(cut)
    cols = table_columns([uncut, cut])
    assert cols[-2:] == ("cut", "errors")
    assert level_cells(cut)["cut"] == "crash, 1 lost" and level_cells(uncut)["cut"] == "-"
    assert "active s" in table_columns([cut], wide=True)
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    Console(file=out, width=200).print(level_table([uncut, cut]))
    assert "crash, 1 lost" in out.getvalue()


def test_the_html_reports_level_table_notes_a_cut_level() -> None:
    from types import SimpleNamespace

    from specload.report.figures import _level_notes

    cut = _crash_cut_level(LevelBook())
    lv = SimpleNamespace(manual=False, open_loop=False, start_s=None, summary=cut)
    assert "cut by crash: active 10.0 of 70.0 s, 1 request lost" in _level_notes(lv)
    assert _level_notes(SimpleNamespace(manual=False, open_loop=False, start_s=None, summary=None)) == []


def test_report_csv_has_the_columns_of_a_cut_level_after_an_uncut_one(capsys) -> None:
    # the CSV's columns came from the first level only: a cut level after it raised ValueError
    from specload.report.report import _levels_csv

    book = LevelBook()
    book.open(0, 2)
    uncut = level(book, [rec(0, 10, 1000)])
    _levels_csv([uncut, _crash_cut_level(book)])
    header, first, second = capsys.readouterr().out.splitlines()
    cols = header.split(",")
    assert {"cut", "active_s", "lost"} <= set(cols)
    assert second.split(",")[cols.index("cut")] == "crash" and first.split(",")[cols.index("cut")] == ""


def test_a_level_still_open_under_a_cut_is_summarised_as_it_stands_and_agrees_with_its_end() -> None:
    # the TUI pauses the load on a crash and the level stays open: the dashboard shows it cut at once
    # (issue 11), with the hung streams counted lost, as its final summary will count them
    book = LevelBook()
    book.open(0, 2)
    assert book.cut_open(5 * S) == ()  # no cut: nothing is summarised while the load is measured
    for _ in range(4):
        book.started(0)
    book.add(rec(0, 10, 1000))
    book.add(rec(0, 10, 1000))
    book.cut_begin("crash", 10 * S)  # the two other streams hang from here
    (now,) = book.cut_open(40 * S)
    assert now.cut == "crash" and now.active_s == pytest.approx(10.0)
    assert now.throughput_tok_s == pytest.approx(200.0)  # its active time, not the 40 s so far
    assert (now.ok, now.lost, now.requests) == (2, 2, 4)
    assert book.cut_open(40 * S) is book.cut_open(40 * S)  # nothing changed: not computed again
    book.add(rec(1, 70, 0, ok=False))
    book.add(rec(2, 70, 0, ok=False))
    (final,) = book.close(0)
    assert (final.cut, final.ok, final.lost, final.requests) == ("crash", 2, 2, 4)
    assert final.active_s == pytest.approx(now.active_s) and final.throughput_tok_s == pytest.approx(200.0)
    assert book.cut_open(80 * S) == ()  # released: its final summary is the one shown


def test_a_pause_does_not_count_the_streams_still_running_as_lost() -> None:
    book = LevelBook()
    book.open(0, 2)
    for _ in range(2):
        book.started(0)
    book.add(rec(0, 10, 1000))
    book.cut_begin("pause", 10 * S)  # the user paused: the other stream goes on and finishes
    (now,) = book.cut_open(12 * S)
    assert now.cut == "pause" and not now.lost and now.requests == 1
    book.cut_end(15 * S)
    assert book.cut_open(16 * S) == ()  # the load runs again: no provisional rows
