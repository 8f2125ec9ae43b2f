"""samples_from_metrics on vLLM, SGLang and llama.cpp exposition texts (deltas checked exactly). The
scraper and the probe over real HTTP: tests/integration/test_metrics_scraper.py."""

from __future__ import annotations

import pytest

from specload.watch.metrics import MetricsState, samples_from_metrics

S = 1_000_000_000  # ns per second


def vllm_text(
    gen: tuple[float, float],
    prompt: tuple[float, float],
    drafts: tuple[float, float],
    draft_tokens: tuple[float, float],
    accepted: tuple[float, float],
    running: tuple[float, float] = (3, 5),
    waiting: tuple[float, float] = (1, 0),
    kv: tuple[float, float] = (0.25, 0.75),
    kv_name: str = "vllm:kv_cache_usage_perc",
    per_pos: tuple[tuple[float, float], ...] = ((90, 80),),
) -> str:
    """Two data-parallel engines, labelled like vLLM V1 does, with a histogram (the parser must step
    over it) and the per-position acceptance counter."""

    def two(name: str, vals: tuple[float, float], extra: str = "") -> str:
        return "".join(f'{name}{{engine="{i}",model_name="tiny"{extra}}} {v}\n' for i, v in enumerate(vals))

    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        + two("vllm:num_requests_running", running)
        + "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        + two("vllm:num_requests_waiting", waiting)
        + f"# HELP {kv_name} KV-cache usage. 1 means 100 percent usage.\n# TYPE {kv_name} gauge\n"
        + two(kv_name, kv)
        + "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        + two("vllm:prompt_tokens_total", prompt)
        + "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        + two("vllm:generation_tokens_total", gen)
        + "# TYPE vllm:request_success_total counter\n"
        + two("vllm:request_success_total", (7, 9), ',finished_reason="length"')
        + "# TYPE vllm:time_to_first_token_seconds histogram\n"
        + two("vllm:time_to_first_token_seconds_bucket", (1, 2), ',le="0.1"')
        + two("vllm:time_to_first_token_seconds_bucket", (106, 2), ',le="+Inf"')
        + two("vllm:time_to_first_token_seconds_count", (106, 2))
        + two("vllm:time_to_first_token_seconds_sum", (4.5, 0.1))
        + "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        + two("vllm:spec_decode_num_drafts_total", drafts)
        + "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        + two("vllm:spec_decode_num_draft_tokens_total", draft_tokens)
        + "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        + two("vllm:spec_decode_num_accepted_tokens_total", accepted)
        + "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        + "".join(two("vllm:spec_decode_num_accepted_tokens_per_pos_total", v, f',position="{i}"')
                  for i, v in enumerate(per_pos))
    )


V1 = vllm_text(
    gen=(1000, 2000), prompt=(500, 500), drafts=(100, 100), draft_tokens=(500, 500), accepted=(300, 300),
    per_pos=((200, 200), (100, 100)),
)
V2 = vllm_text(
    gen=(1600, 2400), prompt=(700, 700), drafts=(150, 150), draft_tokens=(750, 750), accepted=(450, 420),
    per_pos=((290, 280), (160, 140)),
)


def test_vllm_first_scrape_has_gauges_only() -> None:
    s, state = samples_from_metrics(V1, None, 10 * S)
    assert (s.t_ns, s.source) == (10 * S, "metrics")
    assert (s.running, s.queued, s.token_usage) == (8, 1, 0.5)  # counts summed, usage averaged
    assert s.gen_tok_s is s.prompt_tok_s is s.accept_len is s.accept_rate is None
    assert s.extra == {"engine": "vllm"}
    assert state == MetricsState(
        t_ns=10 * S,
        engine="vllm",
        counters={"gen": 3000, "prompt": 1000, "drafts": 200, "draft_tokens": 1000, "accepted": 600},
        per_pos=(400, 200),  # accepted tokens per draft position, summed over the engines
    )


def test_vllm_deltas_between_scrapes() -> None:
    _, st1 = samples_from_metrics(V1, None, 10 * S)
    s, st2 = samples_from_metrics(V2, st1, 12 * S)
    # generation: (1600 + 2400) - (1000 + 2000) = 1000 tokens in 2 s
    assert s.gen_tok_s == 500.0
    assert s.prompt_tok_s == 200.0  # 400 tokens in 2 s
    # accepted: 870 - 600 = 270; draft tokens: 1500 - 1000 = 500; drafts: 300 - 200 = 100
    assert s.accept_rate == 270 / 500
    assert s.accept_len == 1 + 270 / 100
    assert s.extra == {
        "engine": "vllm",
        "drafts": 100,
        "draft_tokens": 500,
        "accepted_tokens": 270,
        "accepted_per_pos": [170, 100],  # position 0 and 1: 570 - 400, 300 - 200
        "interval_s": 2.0,
    }
    assert st2.t_ns == 12 * S and st2.counters["accepted"] == 870


def test_vllm_no_drafts_in_interval_means_unknown_acceptance() -> None:
    _, st1 = samples_from_metrics(V1, None, 10 * S)
    s, _ = samples_from_metrics(V1, st1, 11 * S)  # nothing moved
    assert s.gen_tok_s == 0.0
    assert s.accept_rate is None and s.accept_len is None


def test_counter_reset_gives_no_rate_then_recovers() -> None:
    _, st1 = samples_from_metrics(V2, None, 10 * S)
    restarted = vllm_text(gen=(10, 0), prompt=(5, 0), drafts=(1, 0), draft_tokens=(5, 0), accepted=(4, 0))
    s, st2 = samples_from_metrics(restarted, st1, 11 * S)
    assert s.gen_tok_s is None and s.accept_rate is None and s.accept_len is None
    assert s.running == 8  # gauges are still read
    later = vllm_text(gen=(110, 0), prompt=(5, 0), drafts=(3, 0), draft_tokens=(15, 0), accepted=(9, 0))
    s, _ = samples_from_metrics(later, st2, 13 * S)
    assert s.gen_tok_s == 50.0 and s.accept_rate == 5 / 10 and s.accept_len == 1 + 5 / 2


def test_vllm_older_gpu_cache_usage_name() -> None:
    text = vllm_text(
        (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), kv=(0.5, 0.5), kv_name="vllm:gpu_cache_usage_perc"
    )
    s, _ = samples_from_metrics(text, None, S)
    assert s.token_usage == 0.5


SGLANG_1 = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 4.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 6.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 0.25
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 0.5
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 100.5
sglang:gen_throughput{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 200.25
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 2.5
sglang:spec_accept_length{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 3.5
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 0.5
sglang:spec_accept_rate{dp_rank="1",engine_type="unified",model_name="m",tp_rank="0"} 0.75
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",model_name="m"} 1.0e+04
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{engine_type="unified",model_name="m"} 5000.0
"""


def test_sglang_gauges_and_gen_throughput_gauge_on_first_scrape() -> None:
    s, _ = samples_from_metrics(SGLANG_1, None, S)
    assert (s.running, s.queued, s.token_usage) == (10, 3, 0.375)
    assert (s.accept_len, s.accept_rate) == (3.0, 0.625)  # averaged over ranks, not summed
    assert s.gen_tok_s == 300.75 and s.extra["gen_tok_s_from"] == "gauge"
    assert s.prompt_tok_s is None


def test_sglang_counter_delta_wins_over_stale_gauge() -> None:
    _, st = samples_from_metrics(SGLANG_1, None, S)
    text2 = SGLANG_1.replace("} 1.0e+04", "} 10500").replace("} 5000.0", "} 5100")
    s, _ = samples_from_metrics(text2, st, S + S // 2)
    assert s.gen_tok_s == 1000.0 and "gen_tok_s_from" not in s.extra  # 500 tokens in 0.5 s
    assert s.prompt_tok_s == 200.0


def test_sglang_underscore_names_and_speculation_off() -> None:
    text = (
        'sglang_num_running_reqs{model_name="m"} 2\n'
        'sglang_num_queue_reqs{model_name="m"} 7\n'
        'sglang_spec_accept_length{model_name="m"} 0\n'
    )
    s, _ = samples_from_metrics(text, None, S)
    assert s.extra["engine"] == "sglang"
    assert (s.running, s.queued, s.accept_len) == (2, 7, None)


# The llama-server excerpt from the real-server report, then the same server 4 s later.
LLAMA_1 = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 4443
llamacpp:prompt_tokens_cached_total 3877
llamacpp:prompt_seconds_total 4.29646
llamacpp:tokens_predicted_total 18459
llamacpp:tokens_predicted_seconds_total 107.542
llamacpp:n_decode_total 4835
llamacpp:n_tokens_max 159
llamacpp:spec_decode_num_draft_tokens_total 2808
llamacpp:spec_decode_num_accepted_tokens_total 2808
llamacpp:spec_decode_num_drafts_total 48
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 48
# gauges
llamacpp:prompt_tokens_seconds 1034.11
llamacpp:predicted_tokens_seconds 165.712
llamacpp:requests_processing 0
llamacpp:requests_deferred 0
llamacpp:n_busy_slots_per_decode 3.81779
"""
LLAMA_2 = (
    LLAMA_1.replace("tokens_total 4443", "tokens_total 4843")
    .replace("predicted_total 18459", "predicted_total 19459")
    .replace("draft_tokens_total 2808", "draft_tokens_total 3008")
    .replace("accepted_tokens_total 2808", "accepted_tokens_total 2958")
    .replace("drafts_total 48", "drafts_total 58")
    .replace("requests_processing 0", "requests_processing 3")
    .replace("requests_deferred 0", "requests_deferred 2")
)


def test_llamacpp_report_excerpt_and_deltas() -> None:
    s1, st = samples_from_metrics(LLAMA_1, None, 20 * S)
    assert s1.extra == {"engine": "llamacpp"}
    assert (s1.running, s1.queued, s1.gen_tok_s, s1.accept_rate, s1.token_usage) == (0, 0, None, None, None)
    s2, _ = samples_from_metrics(LLAMA_2, st, 24 * S)
    assert (s2.running, s2.queued) == (3, 2)
    assert s2.gen_tok_s == 250.0  # 1000 tokens in 4 s
    assert s2.prompt_tok_s == 100.0  # 400 in 4 s
    assert s2.accept_rate == 150 / 200
    assert s2.accept_len == 1 + 150 / 10


def test_engine_change_resets_the_deltas() -> None:
    _, st = samples_from_metrics(V1, None, S)
    s, st2 = samples_from_metrics(LLAMA_1, st, 2 * S)
    assert s.gen_tok_s is None and st2.engine == "llamacpp"


@pytest.mark.parametrize("body", ["<html><body>Not Found</body></html>", '{"status":"ok"}', "Not Found"])
def test_non_prometheus_text_raises_value_error(body: str) -> None:
    with pytest.raises(ValueError):
        samples_from_metrics(body, None, S)


def test_unknown_exporter_gives_an_empty_sample() -> None:
    s, st = samples_from_metrics("process_cpu_seconds_total 1.5\n", None, S)
    assert s.extra == {"engine": None} and s.running is None and st.counters == {}
