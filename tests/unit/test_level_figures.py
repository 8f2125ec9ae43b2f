"""The level figures besides percentiles: means and standard deviations, per-token ITL and per-chunk
gap, the best second of output, peak concurrency, prompt tokens; and the server's own figures over a
level's span (acceptance and throughput from counter deltas or log lines)."""

from __future__ import annotations

import numpy as np
import pytest

from specload.datatypes import RequestRecord, ServerSample
from specload.formatting import TABLE_COLUMNS, WIDE_COLUMNS, level_cells, level_line
from specload.report.report import level_table
from specload.stats.levels import LevelColumns, LevelSummary, ServerFigures, _Moments
from specload.stats.server_levels import ServerLevels

MS = 1_000_000
NS = 1_000_000_000


def rec(start_ms: float, offs_ms: list[float], tokens: int, *, chunk_tokens: tuple[int, ...] | None = None,
        prompt: int | None = 100, asked: int | None = None) -> RequestRecord:
    offs = tuple(int(o * MS) for o in offs_ms)
    return RequestRecord(
        request_id=0, level=2, level_index=0, warmup=False, start_ns=int(start_ms * MS),
        end_ns=int((start_ms + offs_ms[-1]) * MS), ttft_ns=offs[0], e2e_ns=offs[-1], output_tokens=tokens,
        tokens_estimated=False, prompt_tokens=prompt, chunks=len(offs), chunk_offsets_ns=offs,
        chunk_tokens=chunk_tokens, prompt_tokens_requested=asked,
    )


def test_moments_merged_request_by_request_equal_numpy() -> None:
    rng = np.random.default_rng(0)
    parts = [rng.exponential(5e6, rng.integers(1, 400)) + 1e7 for _ in range(50)]
    m = _Moments()
    for p in parts:
        m.add(p)
    allv = np.concatenate(parts)
    mean, std = m.mean_std(1.0)
    assert mean == pytest.approx(allv.mean(), rel=1e-12)
    assert std == pytest.approx(allv.std(), rel=1e-9)  # population sd, as np.std and vLLM


def test_gap_itl_peak_and_concurrency_of_a_speculative_level() -> None:
    cols = LevelColumns(0, 2)
    # two requests side by side: a first token, then chunks of 3 tokens every 30 ms
    offs = [20.0] + [20.0 + 30 * i for i in range(1, 11)]
    for start in (0.0, 5.0):
        cols.add(rec(start, offs, 31, chunk_tokens=(1,) + (3,) * 10, asked=98))
    cols.add(rec(400.0, [20.0, 50.0], 4, chunk_tokens=(1, 3)))  # a third, after the first ended
    s = cols.summary()
    assert s.gap_ms_p50 == pytest.approx(30, rel=0.006) and s.gap_ms_avg == pytest.approx(30)
    assert s.gap_ms_std == pytest.approx(0, abs=1e-6)
    assert s.itl_ms_p50 == pytest.approx(10, rel=0.006)  # per token: the 30 ms gap over 3 tokens
    assert s.itl_ms_avg == pytest.approx(10)
    assert s.peak_concurrency == 2  # never three at once
    # every token arrived within the first second: the best second holds all of them
    assert s.peak_tok_s == pytest.approx(31 + 31 + 4)
    assert s.input_tokens == 300 and s.prompt_tokens_avg == 100
    assert s.prompt_tokens_requested_avg == 98
    assert s.req_s == pytest.approx(3 / s.wall_s, rel=1e-3)  # the record keeps 3 decimals
    assert s.ttft_ms_std == pytest.approx(0) and s.tpot_ms_avg == pytest.approx((320 - 20) / 30, rel=1e-3)


def test_peak_second_is_the_best_sliding_second() -> None:
    cols = LevelColumns(0, 1)
    # 10 tokens a second for 3 s, with a burst of 40 tokens in 200 ms straddling the 1.0 s mark
    offs = [float(t) for t in range(0, 3000, 100)] + [900.0 + 10 * i for i in range(20)]
    offs.sort()
    cols.add(rec(0.0, offs, len(offs)))
    s = cols.summary()
    assert s.peak_tok_s == pytest.approx(10 + 20, abs=1)  # a 1 s window holds the burst and 10 others
    assert s.throughput_tok_s < s.peak_tok_s


def test_summary_round_trips_through_its_record_line_with_every_figure() -> None:
    cols = LevelColumns(0, 2)
    cols.add(rec(0.0, [20.0, 50.0, 80.0], 7, chunk_tokens=(1, 3, 3)))
    s = cols.summary().with_server(ServerFigures(2.5, 0.5, (0.7, 0.5, 0.3), 123.4, "metrics"))
    back = LevelSummary.from_record(s.as_record())
    assert back == s
    assert back.accept_per_pos == (0.7, 0.5, 0.3) and back.server_gen_tok_s == 123.4
    # an old record line (before these figures) still reads, with the new ones unknown
    old = {k: v for k, v in s.as_record().items() if k in LevelSummary.__dataclass_fields__ and
           k in ("level_index", "concurrency", "requests", "ok", "errors", "wall_s", "throughput_tok_s",
                 "per_request_tok_s")}
    assert LevelSummary.from_record(old).accept_len is None


def test_every_place_shows_acceptance_and_server_throughput() -> None:
    cols = LevelColumns(0, 4)
    cols.add(rec(0.0, [20.0, 50.0, 80.0], 7, chunk_tokens=(1, 3, 3), asked=100))
    s = cols.summary().with_server(ServerFigures(2.53, 0.701, None, 182.0, "metrics"))
    line = level_line(s)
    assert line.startswith("C=  4 | 1 requests | throughput:")  # the familiar part is unchanged
    assert "latency avg/p50/p99:   0.08/  0.08/  0.08s" in line  # a fast server's latency is not 0.0
    assert "accept len/rate: 2.53/70%" in line and "server: 182.0 tok/s" in line and "prompt: 100/100 tok" in line
    cells = level_cells(s)
    assert cells["accept"] == "2.53/70%" and cells["srv tok/s"] == "182.0"
    assert {"accept", "srv tok/s", "req/s", "ITL/gap ms"} <= set(TABLE_COLUMNS)
    assert {"peak tok/s", "peak C", "accept per pos", "input tok", "gap/chunk avg±sd p50/p90/p95/p99 ms"} <= set(WIDE_COLUMNS)
    for wide, columns in ((False, TABLE_COLUMNS), (True, WIDE_COLUMNS)):
        (table,) = level_table([s], wide=wide, width=1000).renderables  # room for all: one table
        assert len(table.columns) == len(columns)


def _metrics(t_s: float, interval_s: float, drafts: float, accepted: float, gen_tok_s: float) -> ServerSample:
    return ServerSample(t_ns=int(t_s * NS), source="metrics", gen_tok_s=gen_tok_s, extra={
        "drafts": drafts, "draft_tokens": 4 * drafts, "accepted_tokens": accepted, "interval_s": interval_s})


def test_server_figures_weigh_each_scrape_by_its_overlap_with_the_level() -> None:
    book = ServerLevels()
    book.add(_metrics(1.0, 1.0, 100, 100, 100))  # before the level: must not count
    book.add(_metrics(2.0, 1.0, 100, 300, 200))  # half inside [1.5, 3.5]
    book.add(_metrics(3.0, 1.0, 100, 200, 300))  # inside
    book.add(_metrics(4.0, 1.0, 100, 400, 400))  # half inside
    fig = book.figures(int(1.5 * NS), int(3.5 * NS))
    drafts, accepted = 50 + 100 + 50, 150 + 200 + 200
    assert fig.accept_len == pytest.approx(1 + accepted / drafts)
    assert fig.accept_rate == pytest.approx(accepted / (4 * drafts))
    assert fig.gen_tok_s == pytest.approx((100 + 300 + 200) / 2.0)
    assert fig.source == "metrics"
    assert book.figures(int(10 * NS), int(11 * NS)) is None  # nothing about that time


def test_server_figures_from_log_lines_without_counters() -> None:
    book = ServerLevels()
    # SGLang: acceptance-length gauge and throughput per Decode batch line, averaged
    for t, al, g in ((1.0, 2.0, 100.0), (2.0, 3.0, 300.0), (9.0, 9.0, 900.0)):
        book.add(ServerSample(t_ns=int(t * NS), source="log:sglang", accept_len=al, gen_tok_s=g))
    fig = book.figures(0, int(5 * NS))
    assert (fig.accept_len, fig.gen_tok_s, fig.source) == (2.5, 200.0, "log:sglang")
    # llama.cpp: per-request draft lines, summed; its "mean len" is no acceptance length
    book = ServerLevels()
    for acc, gen in ((30, 40), (10, 40)):
        book.add(ServerSample(t_ns=NS, source="log:llamacpp", accept_rate=acc / gen, accept_len=54.0,
                              extra={"kind": "spec", "scope": "request", "accepted_tokens": acc, "drafted_tokens": gen}))
    book.add(ServerSample(t_ns=NS, source="log:llamacpp", gen_tok_s=1500.0,
                          extra={"kind": "eval", "scope": "request"}))  # one request's rate: not the server's
    fig = book.figures(0, 2 * NS)
    assert fig.accept_rate == 0.5 and fig.accept_len is None and fig.gen_tok_s is None


def test_the_record_reader_checks_the_new_level_and_request_keys() -> None:
    from specload.record.reader import line_problem
    from specload.record.schema import request_line

    cols = LevelColumns(0, 2)
    r = rec(0.0, [20.0, 50.0, 80.0], 7, chunk_tokens=(1, 3, 3), asked=100)
    cols.add(r)
    line = {"type": "level", **cols.summary().with_server(ServerFigures(2.5, 0.5, (0.7, 0.3), 12.0, "metrics"))
            .as_record()}
    assert line_problem(line) is None
    for key, bad in (("accept_len", "2.5"), ("accept_per_pos", ["x"]), ("peak_concurrency", 1.5),
                     ("gap_ms_p99", float("nan"))):
        assert line_problem({**line, key: bad}) is not None, key
    req = {"type": "request", **request_line(r, 0)}
    assert req["prompt_tokens_requested"] == 100 and line_problem(req) is None
    assert line_problem({**req, "prompt_tokens_requested": "100"}) is not None


def test_a_levels_server_figures_are_over_its_own_span_not_the_next_levels() -> None:
    # C=1 at 114 tok/s; at 5 s a key sets C=16 (826 tok/s on the server) while the C=1 level's last
    # request runs on to 8 s: over its whole span the C=1 level read 381 tok/s on the server
    from specload.stats.levels import LevelBook
    from tests.unit.test_levels import rec

    server = ServerLevels()
    for t in range(1, 11):
        server.add(_metrics(t, 1.0, 10, 20, 114.0 if t <= 5 else 826.0))
    book = LevelBook()
    book.open(0, 1, now_ns=0)
    for _ in range(2):
        book.started(0)
    book.add(rec(0, 0, 100, 4000, 456))
    book.close(0)
    book.open(1, 16, now_ns=5 * NS)
    book.started(1)
    book.started(1)
    assert book.add(rec(1, 5000, 100, 2000, 1600)) == []  # level 1 waits for level 0
    (slow,) = book.add(rec(0, 4000, 100, 4000, 456))
    assert slow.span_ns == (0, 8 * NS) and slow.own_span_ns == (0, 5 * NS)
    assert server.figures(*slow.server_span_ns()).gen_tok_s == pytest.approx(114.0)
    assert server.figures(*slow.span_ns).gen_tok_s == pytest.approx((5 * 114 + 3 * 826) / 8)  # as it was
    book.close(1)
    # a key at 9 s again: a level of half a second, all of it beside the C=16 level's requests
    book.open(2, 4, now_ns=9 * NS)
    book.started(2)
    book.close(2)
    assert book.add(rec(2, 9000, 100, 500, 40)) == []
    fast, short = book.add(rec(1, 6000, 100, 4000, 1600))
    assert fast.own_span_ns == (8 * NS, 9 * NS)  # from the C=1 level's last end to the next key
    assert server.figures(*fast.server_span_ns()).gen_tok_s == pytest.approx(826.0)
    assert short.server_span_ns() is None  # no time of its own: no server figure, not another level's
    # a summary that never went through the book (a peer's file) keeps its whole span
    assert LevelSummary.from_record(slow.as_record()).server_span_ns() is None
