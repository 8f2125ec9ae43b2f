"""parse_stats_line: every supported statistics line format, prefixes and variants, and the
real server logs in ../shared/fixtures/server-logs (skipped when that folder is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specload.watch.server_stats import parse_stats_line

T = 123_456_789
FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "server-logs"


# -- SGLang -------------------------------------------------------------------------------------


def test_sglang_decode_with_accept_len() -> None:
    line = (
        "[2025-06-01 10:00:00 TP0] Decode batch. #running-req: 3, #token: 1234, token usage: 0.02, "
        "accept len: 2.41, gen throughput (token/s): 512.33, #queue-req: 0, "
    )
    s = parse_stats_line(line, T)
    assert s is not None
    assert (s.t_ns, s.source) == (T, "log:sglang")
    assert (s.running, s.queued, s.token_usage, s.accept_len, s.gen_tok_s) == (3, 0, 0.02, 2.41, 512.33)
    assert s.accept_rate is None and s.prompt_tok_s is None
    assert s.extra == {"phase": "decode", "proc": "TP0", "tokens": 1234}


def test_sglang_decode_newer_comma_form_with_graph_retracted_and_accept_rate() -> None:
    line = (
        "[2026-01-02 03:04:05 DP1 TP3] Decode batch, #running-req: 64, #token: 90000, token usage: 0.55, "
        "accept len: 3.10, accept rate: 0.70, pre-allocated usage: 0.00, #prealloc-req: 0, "
        "#transfer-req: 0, #retracted-req: 2, cuda graph: True, gen throughput (token/s): 4100.50, "
        "#queue-req: 17, #cache_miss: 0"
    )
    s = parse_stats_line(line, T)
    assert s is not None
    assert (s.running, s.queued, s.token_usage) == (64, 17, 0.55)
    assert (s.accept_len, s.accept_rate, s.gen_tok_s) == (3.10, 0.70, 4100.50)
    assert s.extra["retracted"] == 2 and s.extra["graph"] is True and s.extra["proc"] == "DP1 TP3"


def test_sglang_decode_without_speculation() -> None:
    line = (
        "[2025-06-01 10:00:00] Decode batch. #running-req: 1, #token: 20, token usage: 0.00, "
        "cuda graph: False, gen throughput (token/s): 35.12, #queue-req: 0"
    )
    s = parse_stats_line(line, T)
    assert s is not None and s.accept_len is None and s.gen_tok_s == 35.12
    assert s.extra["graph"] is False and "proc" not in s.extra


def test_sglang_prefill_batch() -> None:
    line = (
        "1779264164792\t2026-05-20T08:02:44.792Z\t[2026-05-20 08:02:44 PP0 ATTN_CP7 TP7] Prefill batch, "
        "#new-seq: 1, #new-token: 128, #cached-token: 57856, token usage: 0.97, #running-req: 3, "
        "#queue-req: 5, cuda graph: False, input throughput (token/s): 1732.68"
    )
    s = parse_stats_line(line, T)
    assert s is not None and s.source == "log:sglang"
    assert (s.running, s.queued, s.token_usage, s.prompt_tok_s, s.gen_tok_s) == (3, 5, 0.97, 1732.68, None)
    assert s.extra == {
        "phase": "prefill",
        "proc": "PP0 ATTN_CP7 TP7",
        "graph": False,
        "new_seq": 1,
        "new_tokens": 128,
        "cached_tokens": 57856,
    }


# -- vLLM ---------------------------------------------------------------------------------------


def test_vllm_v1_engine_line() -> None:
    line = (
        "INFO 07-30 17:40:29 [loggers.py:122] Engine 000: Avg prompt throughput: 227.0 tokens/s, "
        "Avg generation throughput: 1135.5 tokens/s, Running: 32 reqs, Waiting: 4 reqs, "
        "GPU KV cache usage: 0.8%, Prefix cache hit rate: 12.5%"
    )
    s = parse_stats_line(line, T)
    assert s is not None and s.source == "log:vllm"
    assert (s.prompt_tok_s, s.gen_tok_s, s.running, s.queued) == (227.0, 1135.5, 32, 4)
    assert s.token_usage == pytest.approx(0.008)
    assert s.extra == {"kind": "throughput", "engine": "000", "prefix_hit_rate": 0.125}


def test_vllm_cpu_build_reports_cpu_kv_usage() -> None:
    line = (
        "(APIServer pid=1) INFO 01-01 00:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 35.4 tokens/s, Running: 2 reqs, Waiting: 0 reqs, "
        "CPU KV cache usage: 1.5%, Prefix cache hit rate: 35.8%"
    )
    s = parse_stats_line(line, T)
    assert s is not None and s.token_usage == pytest.approx(0.015)


def test_vllm_v0_line_prefers_gpu_usage_and_reads_pending() -> None:
    line = (
        "INFO 05-01 12:00:00 metrics.py:351] Avg prompt throughput: 10.5 tokens/s, Avg generation "
        "throughput: 88.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 3 reqs, "
        "GPU KV cache usage: 4.0%, CPU KV cache usage: 50.0%."
    )
    s = parse_stats_line(line, T)
    assert s is not None
    assert (s.prompt_tok_s, s.gen_tok_s, s.running, s.queued) == (10.5, 88.0, 1, 3)
    assert s.token_usage == pytest.approx(0.04)  # GPU, not the swap space's CPU usage
    assert s.extra["swapped"] == 0 and "engine" not in s.extra


def test_vllm_spec_decoding_metrics() -> None:
    line = (
        "INFO 09-01 10:00:00 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 6.00, "
        "Accepted throughput: 168.87 tokens/s, Drafted throughput: 168.87 tokens/s, Accepted: 1690 tokens, "
        "Drafted: 1690 tokens, Per-position acceptance rate: 1.000, 1.000, 0.900, 0.800, 0.700, "
        "Avg Draft acceptance rate: 100.0%"
    )
    s = parse_stats_line(line, T)
    assert s is not None and s.source == "log:vllm"
    assert (s.accept_len, s.accept_rate) == (6.0, 1.0)
    assert s.extra["accepted_tokens"] == 1690 and s.extra["drafted_tokens"] == 1690
    assert s.extra["per_position"] == (1.0, 1.0, 0.9, 0.8, 0.7)


def test_vllm_early_v1_spec_line_without_mean_length() -> None:
    line = "SpecDecoding metrics: Draft acceptance rate: 62.5%, Accepted: 500 tokens, Drafted: 800 tokens"
    s = parse_stats_line(line, T)
    assert s is not None and s.accept_rate == 0.625 and s.accept_len is None


def test_vllm_spec_line_with_nan_rate_falls_back_to_counts() -> None:
    line = (
        "SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, "
        "Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, "
        "Per-position acceptance rate: 0.000, Avg Draft acceptance rate: nan%"
    )
    s = parse_stats_line(line, T)
    assert s is not None and s.accept_rate is None and s.accept_len == 1.0


# -- llama.cpp ----------------------------------------------------------------------------------


def test_llamacpp_eval_and_prompt_eval_lines() -> None:
    gen = (
        "0.03.526.090 I slot print_timing: id  7 | task 0 |        eval time =     448.16 ms /     5 tokens "
        "(  112.04 ms per token,     8.93 tokens per second)"
    )
    prompt = (
        "0.03.526.081 I slot print_timing: id  7 | task 0 | prompt eval time =       6.05 ms /    17 tokens "
        "(    0.36 ms per token,  2808.06 tokens per second)"
    )
    g = parse_stats_line(gen, T)
    p = parse_stats_line(prompt, T)
    assert g is not None and g.source == "log:llamacpp"
    assert (g.gen_tok_s, g.prompt_tok_s) == (8.93, None)
    assert g.extra == {"kind": "eval", "scope": "request", "ms": 448.16, "tokens": 5, "slot": 7, "task": 0}
    assert p is not None and (p.gen_tok_s, p.prompt_tok_s) == (None, 2808.06)
    assert p.extra["kind"] == "prompt_eval" and p.extra["tokens"] == 17


def test_llamacpp_draft_acceptance_current_and_older_forms() -> None:
    cur = (
        "0.05.000.000 I slot print_timing: id  3 | task 42 | draft acceptance = 1.00000 "
        "(  213 accepted /   213 generated), mean len = 54.25"
    )
    old = "slot print_timing: id  0 | task 1 | draft acceptance rate = 0.57576 (  171 accepted /   297 generated)"
    c = parse_stats_line(cur, T)
    o = parse_stats_line(old, T)
    assert c is not None and (c.accept_rate, c.accept_len) == (1.0, 54.25)
    assert c.extra == {
        "kind": "spec",
        "scope": "request",
        "accepted_tokens": 213,
        "drafted_tokens": 213,
        "slot": 3,
        "task": 42,
    }
    assert o is not None and o.accept_rate == 0.57576 and o.accept_len is None
    assert o.extra["drafted_tokens"] == 297


# -- robustness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        'INFO:     127.0.0.1:55020 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "0.03.526.092 I slot print_timing: id  7 | task 0 |       total time =     454.22 ms /    22 tokens",
        "max batch size 256, chunked prefill",  # "batch" but no SGLang marker
        "Decode batch.",  # marker and nothing else
        "Avg prompt throughput: garbage",
        "SpecDecoding metrics: ",
        "draft acceptance = ??? (x accepted / y generated)",
        "eval time = not a number",
    ],
)
def test_other_and_mangled_lines_give_none(line: str) -> None:
    assert parse_stats_line(line, T) is None


def test_ansi_colour_and_arbitrary_prefixes_are_ignored() -> None:
    line = (
        "\x1b[36m(VllmWorker rank=0 pid=12)\x1b[0m web-1  | \x1b[32mINFO\x1b[0m Engine 001: Avg prompt throughput: "
        "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, "
        "GPU KV cache usage: \x1b[1m50.0%\x1b[0m, Prefix cache hit rate: 0.0%"
    )
    s = parse_stats_line(line, T)
    assert s is not None
    assert (s.gen_tok_s, s.running, s.queued, s.token_usage, s.extra["engine"]) == (2.0, 3, 4, 0.5, "001")


def test_real_server_logs() -> None:
    if not FIXTURES.is_dir():
        pytest.skip(f"real server logs not found at {FIXTURES}")
    counts: dict[str, int] = {}
    for path in sorted(FIXTURES.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            s = parse_stats_line(line, T)
            if s is not None:
                counts[path.name] = counts.get(path.name, 0) + 1
                assert s.source in ("log:sglang", "log:vllm", "log:llamacpp")
                assert s.running is not None or s.accept_rate is not None or s.gen_tok_s is not None
    assert counts.get("004_sglang_aggregator_prefix_runtimeerror.log", 0) >= 9
    assert counts.get("014_vllm_illegal_memory_access_multirank.log", 0) >= 10
    # Crash logs and normal logs without statistics lines give nothing.
    assert "039_llamacpp_sampler_assert_abort.log" not in counts
