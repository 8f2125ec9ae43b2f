"""Mooncake-style traces: reading them (and refusing bad ones in one line), their arrival gaps, and
prompts built to each row's length with the blocks the hash ids share."""

from __future__ import annotations

import orjson
import pytest

from specload.config import ConfigError, RunConfig
from specload.engine.datasets import PromptError
from specload.engine.prompts import PromptSource
from specload.engine.trace import Trace, TraceArrivals, TraceRow, read_trace, trace_plan
from specload.engine.words import OPENING, VOCABULARY, TokenModel
from specload.plan import build_plan
from specload.sim import tokenizer

ROWS = [
    {"timestamp": 0, "input_length": 1200, "output_length": 40, "hash_ids": [1, 2, 3]},
    {"timestamp": 250, "input_length": 1100, "output_length": 7, "hash_ids": [1, 2, 4]},
    {"timestamp": 250, "input_length": 300, "output_length": 12, "hash_ids": [9]},
    {"timestamp": 1250.5, "input_length": 600, "output_length": 3, "hash_ids": [1, 5]},
]


def _write(tmp_path, rows=ROWS, name="t.jsonl"):
    f = tmp_path / name
    f.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return str(f)


def _exact_model(overhead: int = 7) -> TokenModel:
    words = {w: tokenizer.count_text(" " + w) for w in VOCABULARY}
    return TokenModel("tokenize", sum(words.values()) / len(words), overhead, tokenizer.count_text(OPENING), words)


def test_a_trace_is_read_with_its_span_rate_and_blocks(tmp_path) -> None:
    t = read_trace(_write(tmp_path), block_tokens=512)
    assert [r.input_length for r in t.rows] == [1200, 1100, 300, 600]
    assert t.span_s == pytest.approx(1.2505)
    d = t.describe(speed=2.0)
    assert (d["rows"], d["blocks"], d["distinct_blocks"], d["format"]) == (4, 9, 6, "mooncake")
    assert t.mean_rate(2.0) == pytest.approx(4 / 1.2505 * 2)


def test_arrivals_are_the_trace_gaps_at_its_speed() -> None:
    trace = Trace("x", tuple(TraceRow(ms, 10, 5, ()) for ms in (100, 100, 600, 2100)), "d")
    arr = TraceArrivals(trace, speed=2.0)
    gaps = [arr.next_gap_s() for _ in range(5)]
    assert gaps[:4] == [0.0, 0.0, 0.25, 0.75]  # the first at once, then (t[i] - t[i-1]) / speed
    assert gaps[4] >= 1e6  # after the trace: the level's request count ends it first
    assert arr.rate == pytest.approx(4 / 2.0 * 2.0)
    plan = trace_plan(build_plan((1, 8, 64), requests_per_level=5, duration_per_level=None, warmup_requests=2), trace, 2.0)
    assert [(lv.concurrency, lv.requests) for lv in plan.levels] == [(64, 4)]  # one level, -c's largest as cap
    assert plan.rate == pytest.approx(4.0) and plan.warmup_requests == 2


def test_prompts_have_the_rows_lengths_and_share_the_blocks_their_ids_share(tmp_path) -> None:
    model = _exact_model(overhead=7)
    src = PromptSource.from_options(trace=_write(tmp_path), trace_block_tokens=512, seed=1, nonce="n1")
    assert src.synthetic  # sized in the server's tokens: calibrated like synthetic prompts
    src.set_model(model)
    got = [src.next() for _ in range(4)]
    for p, row in zip(got, ROWS, strict=True):
        assert tokenizer.count_text(p.text) + 7 == row["input_length"] == p.tokens_requested
        assert p.max_tokens == row["output_length"]
    a, b, c, d = (p.text for p in got)

    def common(x: str, y: str) -> int:
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        return tokenizer.count_text(x[:n])

    assert common(a, b) >= 2 * 512 - 7 - 2  # blocks 1 and 2 shared (a word may straddle the end)
    assert common(a, b) < 2 * 512 + 20  # block 3 and block 4 differ
    assert 512 - 7 - 2 <= common(a, d) < 2 * 512  # block 1 only
    assert common(a, c) < 5  # nothing shared but the opening word
    again = PromptSource.from_options(trace=_write(tmp_path), seed=1, nonce="n2")
    again.set_model(model)
    assert common(again.next().text, a) < 5  # another run shares nothing with this one's cache
    assert src.describe()["trace"]["rows"] == 4
    assert src.summary().startswith("prompts: trace ") and "ignore_eos" in src.summary()


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([{"timestamp": 0, "input_length": 5}], r":1: expected a Mooncake trace row"),
        ([{"timestamp": "0", "input_length": 5, "output_length": 1}], ":1: 'timestamp' is not a time"),
        ([{"timestamp": 0, "input_length": 0, "output_length": 1}], ":1: 'input_length' is not a whole number"),
        ([{"timestamp": 0, "input_length": 5, "output_length": 1.5}], ":1: 'output_length' is not a whole number"),
        ([{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "1,2"}], "'hash_ids' is not a list"),
        ([{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [True]}], "'hash_ids' is not a list"),
        ([{"timestamp": 9, "input_length": 5, "output_length": 1}, {"timestamp": 3, "input_length": 5, "output_length": 1}],
         ":2: timestamp 3 is before the line above's"),
        ([{"timestamp": 0, "input_length": 5000, "output_length": 1, "hash_ids": [1]}], "cannot cover input_length 5000"),
        ([{"prompt": "hi"}], ":1: expected a Mooncake trace row"),
        ([], "no requests in the trace"),
    ],
)
def test_bad_traces_are_one_line(tmp_path, rows: list, needle: str) -> None:
    with pytest.raises(PromptError, match=needle) as e:
        read_trace(_write(tmp_path, rows) if rows else _write_raw(tmp_path, b""))
    assert "\n" not in str(e.value)


def _write_raw(tmp_path, data: bytes) -> str:
    f = tmp_path / "raw.jsonl"
    f.write_bytes(data)
    return str(f)


@pytest.mark.parametrize(("data", "needle"), [(b"\x00\x00\x00", "not a text file"), (b"{nope\n", "not valid JSON")])
def test_binary_and_broken_traces(tmp_path, data: bytes, needle: str) -> None:
    with pytest.raises(PromptError, match=needle):
        read_trace(_write_raw(tmp_path, data))


def test_trace_options_and_what_does_not_go_with_them(tmp_path) -> None:
    path = _write(tmp_path)
    cfg = RunConfig.of(None, trace=path, trace_speed=4.0)
    assert cfg.request.ignore_eos  # the trace's output lengths are the outputs
    assert cfg.describe()["prompt_source"] == "trace"
    for kw, flag in (({"rate": 2.0}, "--rate"), ({"find_max": True}, "--find-max"), ({"repeat": 2}, "--repeat")):
        with pytest.raises(ConfigError, match=f"{flag} does not go with --trace"):
            RunConfig.of(None, trace=path, **kw)
    with pytest.raises(ConfigError, match="only one of --prompt, --prompt-file, --dataset, --trace"):
        RunConfig.of(None, trace=path, dataset="builtin")
    with pytest.raises(ConfigError, match="--trace-speed and --trace-block-tokens apply to --trace"):
        RunConfig.of(None, trace_speed=2.0)
    with pytest.raises(ConfigError, match="--trace-speed must be positive"):
        RunConfig.of(None, trace=path, trace_speed=0.0)
