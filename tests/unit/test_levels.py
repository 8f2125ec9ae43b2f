"""Level summaries: the formulas, and the order in which completed levels are released."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specload.datatypes import ErrorKind, RequestRecord, _itl_loop, _itl_vectorised
from specload.stats.histogram import LogHistogram
from specload.stats.levels import LevelBook, LevelColumns, LevelSummary

MS = 1_000_000


def rec(idx: int, start_ms: float, ttft_ms: float, e2e_ms: float, tokens: int, *, ok: bool = True,
        chunks: int | None = None) -> RequestRecord:
    chunks = tokens if chunks is None else chunks
    offs = tuple(int((ttft_ms + (e2e_ms - ttft_ms) * i / max(1, chunks - 1)) * MS) for i in range(chunks))
    return RequestRecord(
        request_id=0, level=4, level_index=idx, warmup=False, start_ns=int(start_ms * MS),
        end_ns=int((start_ms + e2e_ms) * MS), ttft_ns=int(ttft_ms * MS) if ok else None,
        e2e_ns=int(e2e_ms * MS) if ok else None, output_tokens=tokens if ok else 0, tokens_estimated=False,
        prompt_tokens=10, chunks=chunks if ok else 0, chunk_offsets_ns=offs if ok else (),
        error_kind=None if ok else ErrorKind.HTTP, error_detail=None if ok else "HTTP 500",
    )


def test_formulas_of_a_level() -> None:
    cols = LevelColumns(0, 2)
    # two requests side by side over 1 s, 101 tokens each; one failure
    cols.add(rec(0, 0, 100, 1000, 101))
    cols.add(rec(0, 0, 100, 1000, 101))
    cols.add(rec(0, 500, 0, 10, 0, ok=False))
    s = cols.summary()
    assert s.requests == 3 and s.ok == 2 and s.errors == (("http", 1),)
    assert s.wall_s == pytest.approx(1.0)
    assert s.throughput_tok_s == pytest.approx(202.0)  # ok tokens / level wall time
    assert s.per_request_tok_s == pytest.approx(101.0)  # mean of tokens / E2E
    assert s.ttft_ms_p50 == pytest.approx(100.0)
    assert s.tpot_ms_p50 == pytest.approx(9.0)  # (1000 - 100) / (101 - 1)
    assert s.itl_ms_p50 == pytest.approx(9.0, rel=0.01)  # histogram bin width
    assert s.e2e_s_avg == pytest.approx(1.0)


def test_itl_divides_multi_token_chunks() -> None:
    # 101 tokens in 26 chunks: ~4 tokens per chunk after the first, so per-token ITL ~ gap / 4
    r = rec(0, 0, 100, 1000, 101, chunks=26)
    gaps = r.chunk_gaps_ns()
    itl = r.itl_per_token_ns()
    assert gaps[0] / itl[0] == pytest.approx(100 / 25)


def test_summaries_are_released_in_level_order() -> None:
    book = LevelBook()
    book.open(0, 1)
    book.started(0)
    book.close(0)  # level 0 closed with one request still in flight
    book.open(1, 2)
    book.started(1)
    assert book.close(1) == []
    assert book.add(rec(1, 0, 1, 2, 2)) == []  # level 1 is complete but waits for level 0
    released = book.add(rec(0, 0, 1, 2, 2))
    assert [s.level_index for s in released] == [0, 1]
    assert book.flush() == []


def test_histogram_percentiles_within_bin_width() -> None:
    h = LogHistogram()
    h.add_many([i * 1000.0 for i in range(1, 10001)])  # 1 us .. 10 ms
    assert h.percentile(50) == pytest.approx(5_000_000 / 1000 * 1000, rel=0.01)
    assert h.percentile(99) == pytest.approx(9_900_000, rel=0.01)


def test_itl_of_bursts_of_one_token_chunks() -> None:
    # llama.cpp with speculation: one chunk per token, but a verify step's 4 tokens in one write
    offs = (10, 10, 20, 20, 20, 20, 30, 30, 30, 30)
    r = RequestRecord(
        request_id=0, level=1, level_index=0, warmup=False, start_ns=0, end_ns=31, ttft_ns=10, e2e_ns=30,
        output_tokens=10, tokens_estimated=False, prompt_tokens=1, chunks=10, chunk_offsets_ns=offs,
        chunk_tokens=(1,) * 10,
    )
    # the 10 ns before each burst is shared by its 4 tokens; never a 0 gap
    assert r.itl_per_token_ns() == [2.5] * 8
    assert min(r.chunk_gaps_ns()) == 0  # what the raw per-chunk gaps would have said


def test_itl_of_one_multi_token_chunk_per_step_is_the_same() -> None:
    r = RequestRecord(
        request_id=0, level=1, level_index=0, warmup=False, start_ns=0, end_ns=31, ttft_ns=10, e2e_ns=30,
        output_tokens=10, tokens_estimated=False, prompt_tokens=1, chunks=3, chunk_offsets_ns=(10, 20, 30),
        chunk_tokens=(2, 4, 4),
    )
    assert r.itl_per_token_ns() == [2.5] * 8  # one value per token, as the bursts give


def test_level_itl_pools_tokens_not_chunks() -> None:
    # a 10 ns step that gave 1 token, then one that gave 5: 6 tokens after the first, five of them 2 ns
    # apart. Pooled per token the median is 2 ns and the mean is TPOT; pooled per chunk it would be 6.
    r = RequestRecord(
        request_id=0, level=1, level_index=0, warmup=False, start_ns=0, end_ns=31_000_000,
        ttft_ns=10_000_000, e2e_ns=30_000_000, output_tokens=7, tokens_estimated=False, prompt_tokens=1,
        chunks=3, chunk_offsets_ns=(10_000_000, 20_000_000, 30_000_000), chunk_tokens=(1, 1, 5),
    )
    cols = LevelColumns(0, 1)
    cols.add(r)
    s = cols.summary()
    assert s.itl_ms_p50 == pytest.approx(2.0, rel=0.01)
    assert s.itl_ms_avg == pytest.approx(20 / 6, abs=1e-3) and s.tpot_ms_avg == pytest.approx(20 / 6, abs=1e-3)


def test_a_chunk_without_tokens_leaves_its_gap_to_the_next_token() -> None:
    r = RequestRecord(
        request_id=0, level=1, level_index=0, warmup=False, start_ns=0, end_ns=31, ttft_ns=10, e2e_ns=30,
        output_tokens=3, tokens_estimated=False, prompt_tokens=1, chunks=4, chunk_offsets_ns=(10, 15, 20, 30),
        chunk_tokens=(1, 0, 1, 1),
    )
    assert r.itl_per_token_ns() == [10, 10]


def test_a_summary_is_at_the_precision_of_its_record_line() -> None:
    # 3 requests of 101 tokens over 0.7 s: 432.857142... tok/s. The screen, --json and the report of
    # the record must all show the same digits, so the summary carries the record's values.
    cols = LevelColumns(0, 3)
    for start in (0, 200, 400):
        cols.add(rec(0, start, 100, 300 + start / 7, 101))
    s = cols.summary()
    assert s == LevelSummary.from_record(s.as_record())
    assert s.throughput_tok_s == round(s.throughput_tok_s, 3) and s.throughput_tok_s != 0
    assert s.e2e_s_avg == round(s.e2e_s_avg, 4)


def test_a_group_of_every_request_has_the_levels_percentiles() -> None:
    """A category holding every request of the level has the level's own p50 and p99 (the group's
    p99 once read the p90 of five percentiles)."""
    from dataclasses import replace

    cols = LevelColumns(0, 2)
    for i in range(20):
        cols.add(replace(rec(0, 10 * i, 10.0 + 10 * i ** 2, 3000, 40), category="all"))
    s = cols.summary()
    (name, g), = s.categories or ()
    same = lambda a, b: a == pytest.approx(b, abs=1e-3)  # noqa: E731  (the record's precisions differ)
    assert same(g.ttft_ms_p50, s.ttft_ms_p50) and same(g.ttft_ms_p99, s.ttft_ms_p99) and s.ttft_ms_p90 < s.ttft_ms_p99
    assert same(g.tpot_ms_p99, s.tpot_ms_p99)


def test_groups_per_category_and_turn_and_the_requests_own_acceptance() -> None:
    from dataclasses import replace

    cols = LevelColumns(0, 2)
    # coding: 2 requests of 100 tokens over 1 s, 30 of 36 drafts accepted in 10 steps each
    for _ in range(2):
        cols.add(replace(rec(0, 0, 50, 1000, 100), category="coding", conversation=1, turn=1,
                         spec_verify_ct=10, spec_accepted=30, spec_drafted=36))
    # chat: one of 50 tokens with 5 of 20 accepted (steps unknown, llama.cpp), one that failed
    cols.add(replace(rec(0, 0, 80, 1000, 50), category="chat", conversation=2, turn=2, spec_accepted=5,
                     spec_drafted=20))
    cols.add(replace(rec(0, 100, 0, 10, 0, ok=False), category="chat"))
    s = cols.summary()  # at the record's precision (4 digits)
    approx = lambda v: pytest.approx(v, abs=1e-4)  # noqa: E731
    assert s.request_accept_rate == approx((60 + 5) / (72 + 20))
    assert s.request_accept_len == approx(1 + 60 / 20)  # steps are known only where given
    cats = dict(s.categories or ())
    assert set(cats) == {"chat", "coding"}
    code, chat = cats["coding"], cats["chat"]
    assert (code.requests, code.ok, code.output_tokens) == (2, 2, 200)
    assert code.throughput_tok_s == approx(200.0)  # its tokens over the level's time: 1 s
    assert code.accept_rate == approx(60 / 72) and code.accept_len == approx(4.0)
    assert code.ttft_ms_p50 == approx(50.0) and chat.ttft_ms_p50 == approx(80.0)
    assert (chat.requests, chat.ok, chat.accept_len, chat.accept_rate) == (2, 1, None, 0.25)
    assert [(k, g.requests) for k, g in s.turns or ()] == [("1", 2), ("2", 1)]
    # the record keeps them: "categories": {NAME: {...}}, read back the same
    d = s.as_record()
    assert d["categories"]["coding"]["accept_rate"] == approx(60 / 72)
    assert d["turns"]["2"]["ttft_ms_p50"] == approx(80.0)
    back = LevelSummary.from_record(d)
    assert back.categories == s.categories and back.turns == s.turns
    assert back.request_accept_rate == approx(s.request_accept_rate)
    # a level without categories has none, and says nothing of them
    plain = LevelColumns(1, 1)
    plain.add(rec(1, 0, 10, 100, 10))
    p = plain.summary()
    assert p.categories is None and p.turns is None and "categories" not in p.as_record()
    assert p.request_accept_len is None and "request_accept_len" not in p.as_record()


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 16), min_size=1, max_size=300), gaps=st.lists(st.integers(1, 10**7), min_size=1),
       tokens=st.none() | st.lists(st.integers(1, 4), min_size=1), mean=st.floats(0.5, 4.0))
def test_the_vectorised_itl_gives_the_loops_values_exactly(sizes, gaps, tokens, mean) -> None:
    # long answers in bursts of any size, with and without per-chunk tokens: numpy's values are the
    # loop's to the last bit (the partial sums as the loop adds them)
    offs, t = [], 10**9
    for k, size in enumerate(sizes):
        t += gaps[k % len(gaps)]
        offs += [t] * size
    per = None if tokens is None else tuple(tokens[i % len(tokens)] for i in range(len(offs)))
    fast = _itl_vectorised(tuple(offs), per, mean)
    if fast is not None:
        assert list(fast) == _itl_loop(tuple(offs), per, mean)
    else:
        assert len(offs) < 200


@settings(max_examples=15, deadline=None)
@given(answers=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 16), st.integers(0, 10**9)), min_size=1, max_size=150),
       every=st.integers(7, 70))
def test_a_levels_figures_do_not_depend_on_when_they_are_read(answers, every) -> None:
    # a level holds its requests' ITLs, gaps and token times and folds them in batches: read after
    # every few requests or once at the end, the figures are the same (the histograms' exactly)
    def record(i: int, n: int, burst: int, start: int) -> RequestRecord:
        offs = tuple(5_000_000 + (k // burst) * 20_000_000 for k in range(n))
        return RequestRecord(request_id=i, level=4, level_index=0, warmup=False, start_ns=start, end_ns=start + offs[-1],
                             ttft_ns=offs[0], e2e_ns=offs[-1], output_tokens=n, tokens_estimated=True,
                             prompt_tokens=8, chunks=n, chunk_offsets_ns=offs)

    recs = [record(i, n, b, s) for i, (n, b, s) in enumerate(answers)]
    once, often = LevelColumns(0, 4), LevelColumns(0, 4)
    for i, r in enumerate(recs):
        once.add(r)
        often.add(r)
        if i % every == 0:
            often.summary()
    a, b = once.summary(), often.summary()
    assert a.peak_tok_s and b.peak_tok_s  # every request's tokens are in the buckets, held or not
    for key in ("itl_ms_p50", "itl_ms_p99", "itl_ms_p90", "gap_ms_p50", "gap_ms_p99"):
        assert getattr(a, key) == getattr(b, key), key
    for key in ("itl_ms_avg", "itl_ms_std", "gap_ms_avg", "gap_ms_std", "peak_tok_s"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-9, abs=1e-9), key
    # and the same as one histogram of every value
    hist = LogHistogram()
    for r in recs:
        hist.add_many(r.itl_per_token_ns())
    p50 = hist.percentile(50)
    assert (a.itl_ms_p50 is None) if p50 is None else a.itl_ms_p50 == pytest.approx(p50 / 1e6, abs=1e-3)


class _Values:
    """Stands in for a level's series: keeps every value it is given, in order (and has no figures)."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.moments = self.hist = self

    def mean_std(self, scale: float) -> tuple[None, None]:
        return None, None

    def percentile(self, q: float) -> None:
        return None

    def add(self, values) -> None:
        self.values.extend(values.tolist())

    def fold(self) -> None:
        pass


def _stream(i: int, bursts: list[int], step0: int, extra_tokens: int, capped: bool) -> RequestRecord:
    """A stream whose chunks come in ``bursts`` (chunks per read), its tokens per chunk not told."""
    offs, t = [], 1_000_000
    for k, size in enumerate(bursts):
        t += 0 if (k == 0 and step0 == 0) else 1_000_000 * (1 + (k * 7 + step0) % 5)
        offs += [t] * size
    n = len(offs)
    return RequestRecord(
        request_id=i, level=4, level_index=0, warmup=False, start_ns=10**9 + i * 3_000_000,
        end_ns=10**9 + i * 3_000_000 + t, ttft_ns=offs[0], e2e_ns=offs[-1], output_tokens=max(1, n + extra_tokens),
        tokens_estimated=True, prompt_tokens=8, chunks=n + (5 if capped else 0), chunk_offsets_ns=tuple(offs),
        chunk_tokens=(1,) * (n - 1) if capped and n > 1 else None)  # (a length that is not the chunks')


def _assert_folded_as_each_alone(recs: list[RequestRecord]) -> None:
    cols = LevelColumns(0, 4)
    cols.itl, cols.gap = _Values(), _Values()  # type: ignore[assignment]
    for r in recs:
        cols.add(r)
    cols.summary()
    assert cols.itl.values == [v for r in recs for v in r.itl_per_token_ns()]
    assert cols.gap.values == [float(v) for r in recs for v in r.chunk_gaps_ns()]
    # every chunk's tokens at its time, in its 100 ms bucket
    want: dict[int, float] = {}
    for r in recs:
        for o in r.chunk_offsets_ns:
            k = (r.start_ns + o) // 100_000_000
            want[k] = want.get(k, 0.0) + r.output_tokens / len(r.chunk_offsets_ns)
    assert cols.buckets.keys() == want.keys()
    assert all(cols.buckets[k] == pytest.approx(v, rel=1e-12) for k, v in want.items())


@settings(max_examples=25, deadline=None)
@given(answers=st.lists(st.tuples(st.lists(st.integers(1, 40), min_size=1, max_size=40), st.integers(0, 3),
                                  st.integers(-5, 600), st.booleans()), min_size=1, max_size=140))
def test_streams_folded_together_give_each_requests_own_values(answers) -> None:
    # the level folds the usual streams (tokens per chunk not told) _HOLD at a time in one numpy pass:
    # the ITLs, gaps and token times are those of each record on its own, to the last bit and in order
    _assert_folded_as_each_alone([_stream(i, *a) for i, a in enumerate(answers)])


def test_a_long_burst_among_streams_of_other_lengths_is_folded_as_alone() -> None:
    # one read of 3,000 chunks beside 63 short streams whose means all differ: the partial sums are
    # taken per mean as far as its own bursts go, not in a table of 64 x 3,000
    recs = [_stream(0, [1, 3000, 2], 1, 40, False)]
    recs += [_stream(i, [1, 2, 3], 1, i, False) for i in range(1, 64)]
    _assert_folded_as_each_alone(recs)
