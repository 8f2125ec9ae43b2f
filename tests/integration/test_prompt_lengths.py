"""Prompt lengths the server agrees with: synthetic prompts sized in the server's own tokens (its
tokenizer endpoint, or usage.prompt_tokens without one), recorded as asked and as counted, a warning
when they differ; dataset prompts' server-counted distribution; distinct starts against a prefix
cache, and a shared prefix that the cache serves. All against the simulator on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest

from specload.config import RunConfig
from specload.engine.words import TokenModel, synthetic_text
from specload.record.reader import read_record
from specload.session import NullListener, Session
from specload.sim.model import estimate_chat_tokens
from specload.stats.levels import LevelSummary
from tests.conftest import make_config


def _cfg(url: str, rec, *, api: str = "chat", c: int = 2, n: int = 12, prompt_tokens: str = "128",
         shared: int = 0, dataset: str | None = None, max_tokens: int = 4) -> RunConfig:
    return make_config(
        url, api=api, concurrency=(c,), requests_per_level=n, drain=True, max_tokens=max_tokens,
        prompt_tokens=prompt_tokens, shared_prefix_tokens=shared, dataset=dataset, health=False, metrics_url="off",
        path=str(rec),
    )


class Heard(NullListener):
    """What a front end is told: notices and run events, in order."""

    def __init__(self) -> None:
        self.notices: list[str] = []
        self.events: list = []

    def notice(self, text: str) -> None:
        self.notices.append(text)

    def run_event(self, event) -> None:  # a RunEvent
        self.events.append(event)


async def _run(cfg: RunConfig) -> tuple[Heard, object]:
    heard = Heard()
    result = await asyncio.wait_for(Session(cfg, listener=heard).run(), 60)
    assert result.reason == "completed", result
    return heard, read_record(cfg.record.path)


def _calibration(data) -> dict:
    (ev,) = [e for e in data.events if e["kind"] == "calibration"]
    return ev["value"]


@pytest.mark.parametrize(("flavor", "api"), [("vllm", "chat"), ("vllm", "completions"), ("vllm", "generate"),
                                             ("llamacpp", "chat")])
async def test_with_a_tokenizer_endpoint_every_prompt_is_exactly_the_asked_length(sim, tmp_path, flavor, api) -> None:
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0, flavor=flavor)
    heard, data = await _run(_cfg(server.url, tmp_path / "r.jsonl", api=api, prompt_tokens="128:32"))
    cal = _calibration(data)
    assert cal["prompts"]["method"] == "tokenize"
    # the endpoint also gave the template's overhead: no generation request reached the server's
    # counters besides the load (the tokenize requests are no load)
    assert cal["requests"] == []
    reqs = [r for r in data.requests if not r["warmup"]]
    assert len(reqs) == 12 and all(r["ok"] for r in reqs)
    for r in reqs:
        assert r["prompt_tokens"] == r["prompt_tokens_requested"], r
    assert len({r["prompt_tokens"] for r in reqs}) > 3 and all(96 <= r["prompt_tokens"] <= 160 for r in reqs)
    (level,) = data.levels
    assert level["prompt_tokens_avg"] == level["prompt_tokens_requested_avg"]
    assert level["input_tokens"] == sum(r["prompt_tokens"] for r in reqs)
    assert not any("WARNING prompts" in n for n in heard.notices)
    assert data.run["prompts"]["prompt_tokens"] == "128:32" and len(data.run["prompts"]["nonce"]) == 8


async def test_without_a_tokenizer_endpoint_usage_calibrates_within_a_few_percent(sim, tmp_path) -> None:
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0, tokenize_endpoint=False)
    heard, data = await _run(_cfg(server.url, tmp_path / "r.jsonl", prompt_tokens="256", n=16))
    cal = _calibration(data)
    assert cal["prompts"]["method"] == "usage"
    # two lengths fit the line; both reached the server and are recorded with what it counted
    assert [(r["purpose"], r["completion_tokens"]) for r in cal["requests"]] == [("prompt calibration", 1)] * 2
    reqs = [r for r in data.requests if not r["warmup"]]
    for r in reqs:  # word choice varies the count a little, the mean is right
        assert abs(r["prompt_tokens"] - 256) <= 0.1 * 256, r
    (level,) = data.levels
    assert abs(level["prompt_tokens_avg"] / 256 - 1) <= 0.03
    assert not any("WARNING prompts" in n for n in heard.notices)


async def test_tokens_per_word_given_sends_no_calibration_and_sizes_by_it(sim, tmp_path) -> None:
    """``--tokens-per-word``: the figure an earlier calibration recorded is used as given; the server
    gets the load's requests and nothing before them."""
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0, tokenize_endpoint=False)
    _, first = await _run(_cfg(server.url, tmp_path / "a.jsonl", prompt_tokens="256", n=4))
    per_word = _calibration(first)["prompts"]["tokens_per_word"]
    before = server.stats.requests
    heard, data = await _run(make_config(
        server.url, api="chat", concurrency=(2,), requests_per_level=16, max_tokens=4, prompt_tokens="256",
        tokens_per_word=per_word, health=False, metrics_url="off", path=str(tmp_path / "b.jsonl")))
    assert server.stats.requests - before == 16  # the load's, no calibration request
    cal = _calibration(data)
    assert cal["prompts"]["method"] == "given" and cal["requests"] == []
    assert cal["prompts"]["tokens_per_word"] == pytest.approx(per_word, abs=1e-4)
    assert any("--tokens-per-word: not calibrated" in n for n in heard.notices)
    (level,) = data.levels  # sized by the given figure: within a few percent, as calibrated ones are
    assert abs(level["prompt_tokens_avg"] / 256 - 1) <= 0.05


def test_the_guess_is_far_off_on_the_simulators_tokenizer() -> None:
    # what specload sent before calibration: 1.3 tokens a word. The simulator's tokenizer (like
    # real small-vocabulary ones) counts far more, so the tests above show calibration at work.
    text = synthetic_text(128, TokenModel(), random.Random(0))
    assert estimate_chat_tokens([{"role": "user", "content": text}]) > 1.5 * 128


async def test_dataset_prompts_report_the_servers_count(sim, tmp_path) -> None:
    server = await sim(ttft_ms=2, itl_ms=1, spec_tokens=0)
    texts = ["short one", "a somewhat longer prompt about speculative decoding", "x " * 300]
    ds = tmp_path / "d.jsonl"
    ds.write_text("".join(f'{{"prompt": "{t}"}}\n' for t in texts))
    heard, data = await _run(_cfg(server.url, tmp_path / "r.jsonl", dataset=str(ds), n=6))
    assert not [e for e in data.events if e["kind"] == "calibration"]  # nothing to size
    counts = sorted(estimate_chat_tokens([{"role": "user", "content": t}]) for t in texts)
    (level,) = data.levels
    assert level["prompt_tokens_avg"] == pytest.approx(statistics.mean(counts * 2), abs=0.001)
    assert level["prompt_tokens_p50"] == pytest.approx(statistics.median(counts * 2))
    assert level["prompt_tokens_requested_avg"] is None
    assert level["input_tokens"] == 2 * sum(counts)


async def test_distinct_starts_get_no_prefix_cache_hits_and_a_shared_prefix_does(sim, tmp_path) -> None:
    # prefill costs 1 ms a token here, so what the cache serves shows in TTFT as well
    server = await sim(spec_tokens=0, prefix_cache=True, prefill_base_ms=5, prefill_per_token_ms=1.0, step_ms=2)
    _, plain = await _run(_cfg(server.url, tmp_path / "a.jsonl", c=1, n=4, prompt_tokens="512"))
    _, shared = await _run(_cfg(server.url, tmp_path / "b.jsonl", c=1, n=4, prompt_tokens="512", shared=448))
    a = [r for r in plain.requests if not r["warmup"]]
    b = [r for r in shared.requests if not r["warmup"]]
    assert all(r["prompt_tokens_cached"] == 0 for r in a)  # no accidental common prefix
    # the template's 3 tokens + 448 shared ones = 451: 28 whole 16-token blocks from the cache, for
    # every request after the first
    b.sort(key=lambda r: r["id"])
    assert [r["prompt_tokens_cached"] for r in b] == [0, 448, 448, 448]
    assert statistics.median(r["ttft_ms"] for r in b[1:]) < 0.5 * statistics.median(r["ttft_ms"] for r in a)
    (level,) = shared.levels
    assert level["prompt_tokens_cached_avg"] == 3 * 448 / 4
    assert shared.run["prompts"]["shared_prefix_tokens"] == 448


async def test_a_level_whose_prompts_the_server_counted_differently_is_warned_and_recorded(tmp_path) -> None:
    heard = Heard()
    cfg = _cfg("http://127.0.0.1:9", tmp_path / "r.jsonl")
    session = Session(cfg, listener=heard)
    base = dict(level_index=0, concurrency=4, requests=8, ok=8, errors=(), output_tokens=80, tokens_estimated=False,
                wall_s=1.0, throughput_tok_s=80.0, per_request_tok_s=10.0, req_s=8.0, ttft_ms_avg=1.0,
                ttft_ms_p50=1.0, ttft_ms_p99=1.0, tpot_ms_p50=1.0, tpot_ms_p99=1.0, itl_ms_p50=1.0, itl_ms_p99=1.0,
                e2e_s_avg=0.1, e2e_s_p50=0.1, e2e_s_p99=0.1)
    session.fan.level_done(LevelSummary(**base, prompt_tokens_avg=131.0, prompt_tokens_requested_avg=128.0))
    assert not heard.notices and not heard.events  # 2 % off: within tolerance
    session.fan.level_done(LevelSummary(**base, prompt_tokens_avg=313.0, prompt_tokens_requested_avg=128.0))
    assert heard.notices == ["WARNING prompts at C=4: asked for 128 tokens on average, the server counted 313 "
                             "(+145 %): the level's prefill work is not what was asked"]
    assert heard.events[0].kind == "prompt_length" and heard.events[0].value["server_avg"] == 313.0
