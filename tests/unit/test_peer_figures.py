"""The level figures named like ``vllm bench serve``'s mean what vLLM's mean.

Read from ``../shared/fixtures/peer-results/vllm-bench-serve/``: vLLM's own result files (its summary
and its per-request arrays) and specload's records of the same server right after. Three kinds of
checks:

- same definition, same numbers: vLLM's per-request arrays fed through specload's level code give
  vLLM's summary (means, population standard deviations, medians, p99s of TTFT, TPOT, ITL (= our
  per-chunk gap) and E2E; input tokens; acceptance length and rate from the counter deltas);
- figures that share a name but not a definition, shown by recomputing vLLM's from its arrays:
  its "max output tokens/s" counts chunks per whole second (one per streamed chunk, however many
  tokens it carried), its "max concurrent requests" counts requests active at any time in a second;
- specload's own measurements of the same server agree with vLLM's where the definitions agree
  (per-chunk gap), and per-token ITL sits 3-4x below it under speculative decoding.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from specload.datatypes import RequestRecord, ServerSample
from specload.stats.levels import LevelColumns
from specload.stats.server_levels import ServerLevels

_SHARED = Path(os.environ.get("SPECLOAD_SHARED") or Path(__file__).resolve().parents[3] / "shared")
PEER = _SHARED / "fixtures" / "peer-results" / "vllm-bench-serve"
pytestmark = pytest.mark.skipif(not PEER.is_dir(), reason=f"peer result fixtures not found at {PEER}: set "
                                "SPECLOAD_SHARED or put shared/ beside the clone")
LEVELS = (1, 4, 16)
NS = 1_000_000_000


def _vllm(c: int) -> dict:
    return json.loads((PEER / f"vllm-bench-spec-ngram-c{c}.json").read_text())


def _columns_from_vllm(d: dict) -> LevelColumns:
    """vLLM's requests as specload records: its chunk times are ttft + the running sum of its itls
    (exactly the token times its own peak computation rebuilds), its latency the E2E."""
    cols = LevelColumns(0, d["max_concurrency"])
    for i in range(d["completed"]):
        ttft, lat, itls = d["ttfts"][i], d["latencies"][i], d["itls"][i]
        offs = np.concatenate(([ttft], ttft + np.cumsum(itls))) * NS
        start = int(d["start_times"][i] * NS)
        cols.add(RequestRecord(
            request_id=i, level=cols.concurrency, level_index=0, warmup=False, start_ns=start,
            end_ns=start + int(lat * NS), ttft_ns=int(ttft * NS), e2e_ns=int(lat * NS),
            output_tokens=d["output_lens"][i], tokens_estimated=False, prompt_tokens=d["input_lens"][i],
            chunks=len(offs), chunk_offsets_ns=tuple(int(o) for o in offs),
        ))
    return cols


@pytest.mark.parametrize("c", LEVELS)
def test_same_definitions_give_vllms_numbers(c: int) -> None:
    d = _vllm(c)
    s = _columns_from_vllm(d).summary()
    exact = [
        ("mean_ttft_ms", s.ttft_ms_avg), ("std_ttft_ms", s.ttft_ms_std), ("median_ttft_ms", s.ttft_ms_p50),
        ("p99_ttft_ms", s.ttft_ms_p99), ("mean_tpot_ms", s.tpot_ms_avg), ("std_tpot_ms", s.tpot_ms_std),
        ("median_tpot_ms", s.tpot_ms_p50), ("p99_tpot_ms", s.tpot_ms_p99),
        # vLLM's ITL is the gap between streamed chunks: specload's per-chunk gap
        ("mean_itl_ms", s.gap_ms_avg), ("std_itl_ms", s.gap_ms_std),
    ]
    for name, ours in exact:
        assert ours == pytest.approx(d[name], abs=0.0011), name  # the record keeps 3 decimals
    for name, ours in (("mean_e2el_ms", s.e2e_s_avg), ("std_e2el_ms", s.e2e_s_std), ("median_e2el_ms", s.e2e_s_p50),
                       ("p99_e2el_ms", s.e2e_s_p99)):
        assert ours * 1000 == pytest.approx(d[name], abs=0.051), name  # seconds to 4 decimals
    # gap percentiles come from a log-binned histogram: within its 0.6 % bins
    assert s.gap_ms_p50 == pytest.approx(d["median_itl_ms"], rel=0.006)
    assert s.gap_ms_p99 == pytest.approx(d["p99_itl_ms"], rel=0.006)
    assert s.input_tokens == d["total_input_tokens"]
    assert s.output_tokens == d["total_output_tokens"] and s.ok == d["completed"]
    # request and output throughput: over the level's span (first sent to last ended); vLLM's
    # benchmark duration adds its own start-up and the last usage chunk, a fraction of a percent
    assert s.req_s == pytest.approx(d["request_throughput"], rel=0.01)
    assert s.throughput_tok_s == pytest.approx(d["output_throughput"], rel=0.01)


@pytest.mark.parametrize("c", LEVELS)
def test_acceptance_from_the_counters_is_vllms(c: int) -> None:
    d = _vllm(c)
    book = ServerLevels()
    # the counters' deltas over the level, as one scrape interval covering it
    book.add(ServerSample(t_ns=11 * NS, source="metrics", extra={
        "drafts": d["spec_decode_num_drafts"], "draft_tokens": d["spec_decode_draft_tokens"],
        "accepted_tokens": d["spec_decode_accepted_tokens"], "interval_s": 10.0,
        "accepted_per_pos": [r * d["spec_decode_num_drafts"] for r in d["spec_decode_per_position_acceptance_rates"]],
    }))
    fig = book.figures(1 * NS, 11 * NS)
    assert fig is not None
    assert fig.accept_len == pytest.approx(d["spec_decode_acceptance_length"])
    assert 100 * fig.accept_rate == pytest.approx(d["spec_decode_acceptance_rate"])
    assert fig.accept_per_pos == pytest.approx(tuple(d["spec_decode_per_position_acceptance_rates"]))


def _vllm_peaks(d: dict) -> tuple[float, int]:
    """vLLM's own 'max output tokens/s' and 'max concurrent requests', by its formula."""
    t0 = min(d["start_times"])
    n_s = int(np.ceil(max(s + lat for s, lat in zip(d["start_times"], d["latencies"], strict=True)) - t0)) + 1
    chunks, active = np.zeros(n_s), np.zeros(n_s)
    for s, ttft, itl, lat in zip(d["start_times"], d["ttfts"], d["itls"], d["latencies"], strict=True):
        for t in np.concatenate(([s + ttft], s + ttft + np.cumsum(itl))):
            chunks[int(t - t0)] += 1  # one per streamed chunk
        active[int(s - t0): int(s + lat - t0) + 1] += 1
    return float(chunks.max()), int(active.max())


@pytest.mark.parametrize("c", LEVELS)
def test_peaks_named_alike_count_different_things(c: int) -> None:
    d = _vllm(c)
    chunks_per_s, active_per_s = _vllm_peaks(d)
    assert chunks_per_s == d["max_output_tokens_per_s"] and active_per_s == d["max_concurrent_requests"]
    s = _columns_from_vllm(d).summary()
    # specload's peak counts tokens (a chunk under speculation carries several), in the best 1 s
    tokens_per_chunk = d["total_output_tokens"] / sum(len(x) + 1 for x in d["itls"])
    assert tokens_per_chunk > 2.5
    assert s.peak_tok_s >= s.throughput_tok_s
    assert s.peak_tok_s > 2 * d["max_output_tokens_per_s"]
    # ... and its peak concurrency is requests in flight at one moment: the level's C, not the
    # number of requests touching a second (28 at C=4)
    assert s.peak_concurrency == c
    assert d["max_concurrent_requests"] > c or c == 16


def _specload_level(c: int) -> LevelColumns:
    cols = LevelColumns(0, c)
    for line in (PEER / f"specload-spec-ngram-c{c}.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("type") != "request" or r["warmup"] or not r["ok"]:
            continue
        offs = tuple(int(ms * 1e6) for ms in r["chunk_ms"])
        start = int(r["start_s"] * NS)
        cols.add(RequestRecord(
            request_id=r["id"], level=c, level_index=0, warmup=False, start_ns=start, end_ns=int(r["end_s"] * NS),
            ttft_ns=int(r["ttft_ms"] * 1e6), e2e_ns=int(r["e2e_ms"] * 1e6), output_tokens=r["output_tokens"],
            tokens_estimated=False, prompt_tokens=r["prompt_tokens"], chunks=len(offs), chunk_offsets_ns=offs,
        ))
    return cols


@pytest.mark.parametrize("c", LEVELS)
def test_specloads_measurements_of_the_same_server_agree_where_the_definitions_do(c: int) -> None:
    ours, theirs = _specload_level(c).summary(), _vllm(c)
    # the per-chunk gap is the figure vLLM calls ITL: the same server, a run apart
    assert ours.gap_ms_p50 == pytest.approx(theirs["median_itl_ms"], rel=0.5)
    # per-token ITL divides each gap by the tokens in the chunk: 3-4x smaller under speculation
    assert 2.5 < ours.gap_ms_p50 / ours.itl_ms_p50 < 6
    assert ours.tpot_ms_avg == pytest.approx(theirs["mean_tpot_ms"], rel=0.5)
