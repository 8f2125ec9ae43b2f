"""The simulator's pure parts: token estimates, the timing curve, speculative draws, config validation."""

from __future__ import annotations

import random
import time

import pytest

from specload.sim.config import SimConfig
from specload.sim.gpus import SimGpus
from specload.sim.model import (
    VOCAB,
    decode_step_s,
    draw_step,
    estimate_chat_tokens,
    estimate_prompt_tokens,
    jitter,
    prefill_s,
    request_accept_rate,
)


def test_prompt_token_estimates():
    assert estimate_prompt_tokens("abcd" * 10) == 10
    assert estimate_prompt_tokens("abcde") == 2  # ceil
    assert estimate_prompt_tokens("") == 1
    assert estimate_prompt_tokens([1, 2, 3]) == 3  # token ids count themselves
    assert estimate_prompt_tokens(["abcd", "abcdabcd"]) == 3
    # chat: 3 for the assistant header + 4 per message + ceil(chars / 4)
    assert estimate_chat_tokens([{"role": "user", "content": "abcdefgh"}]) == 3 + 4 + 2
    with pytest.raises(ValueError):
        estimate_prompt_tokens(3.5)


def test_vocabulary_tokens_are_single_visible_words():
    assert all(t.startswith(" ") and len(t.split()) == 1 for t in VOCAB)


def test_step_time_rises_with_batch_and_throughput_too():
    cfg = SimConfig(spec_tokens=0)
    steps = [decode_step_s(cfg, b) for b in (1, 8, 32)]
    assert steps[0] == pytest.approx(0.030)
    assert steps[0] < steps[1] < steps[2]  # per-request speed falls
    tput = [b / decode_step_s(cfg, b) for b in (1, 8, 32)]
    assert tput[0] < tput[1] < tput[2]  # aggregate throughput rises
    assert prefill_s(cfg, 1000) > prefill_s(cfg, 10)


def test_speculation_can_lose_at_large_batches_when_verification_costs_grow():
    def gain(cfg: SimConfig, b: int) -> float:
        # tokens per step under speculation (1 + p + p² + p³) over the step's extra cost
        plain = SimConfig(**{**cfg.__dict__, "spec_tokens": 0})
        return sum(cfg.accept_rate**i for i in range(cfg.spec_tokens + 1)) * decode_step_s(plain, b) / decode_step_s(
            cfg, b)

    flat = SimConfig(spec_tokens=3, accept_rate=0.7)
    assert gain(flat, 1) == pytest.approx(gain(flat, 64))  # a constant draft cost: the same gain everywhere
    growing = SimConfig(spec_tokens=3, accept_rate=0.7, draft_cost=0.15, draft_batch_slope=0.1)
    assert gain(growing, 1) > 1.5 and gain(growing, 64) < 1.0


def test_pinned_values_override_the_model():
    cfg = SimConfig(ttft_ms=50, itl_ms=10)
    assert cfg.pinned
    assert prefill_s(cfg, 5000) == pytest.approx(0.050)
    assert decode_step_s(cfg, 64) == pytest.approx(0.010)


def test_speculative_draws_match_the_acceptance_model():
    cfg = SimConfig(spec_tokens=4, accept_rate=0.6, eos_prob=0.0)
    rng = random.Random(1)
    draws = [draw_step(rng, cfg, remaining=10**6, ignore_eos=False, first=False) for _ in range(20000)]
    mean = sum(d.tokens for d in draws) / len(draws)
    expected = sum(0.6**i for i in range(5))  # 1 + p + p^2 + p^3 + p^4
    assert mean == pytest.approx(expected, rel=0.03)
    assert all(1 <= d.tokens <= 5 and d.accepted == d.tokens - 1 for d in draws)
    assert all(len(d.text.split()) == d.tokens for d in draws[:200])


def test_draw_respects_remaining_and_eos():
    cfg = SimConfig(spec_tokens=4, accept_rate=1.0, eos_prob=0.0)
    rng = random.Random(2)
    d = draw_step(rng, cfg, remaining=2, ignore_eos=False, first=False)
    assert (d.tokens, d.finish_reason) == (2, "length")
    first = draw_step(rng, cfg, remaining=100, ignore_eos=False, first=True)
    assert first.tokens == 1 and first.accepted == 0  # the prefill token is never speculative
    eos = SimConfig(spec_tokens=4, accept_rate=1.0, eos_prob=1.0)
    d = draw_step(rng, eos, remaining=100, ignore_eos=False, first=False)
    assert (d.tokens, d.finish_reason) == (1, "stop")
    d = draw_step(rng, eos, remaining=100, ignore_eos=True, first=False)
    assert (d.tokens, d.finish_reason) == (5, None)


def test_step_noise_has_mean_one_and_the_asked_spread():
    rng = random.Random(3)
    xs = [jitter(rng, 0.05) for _ in range(20000)]
    mean = sum(xs) / len(xs)
    sd = (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5
    assert mean == pytest.approx(1.0, abs=0.002)  # no drift in the mean step time
    assert sd == pytest.approx(0.05, rel=0.05)
    assert jitter(rng, 0.0) == 1.0


def test_each_request_draws_its_own_acceptance_around_the_mean():
    cfg = SimConfig(accept_rate=0.7, accept_spread=0.1)
    rng = random.Random(4)
    ps = [request_accept_rate(rng, cfg) for _ in range(20000)]
    mean = sum(ps) / len(ps)
    sd = (sum((p - mean) ** 2 for p in ps) / len(ps)) ** 0.5
    assert mean == pytest.approx(0.7, abs=0.005) and sd == pytest.approx(0.1, rel=0.05)
    assert all(0.0 <= p <= 1.0 for p in ps)
    assert request_accept_rate(rng, SimConfig(accept_rate=0.7, accept_spread=0.0)) == 0.7
    # a request's own rate drives its draws
    low = [draw_step(rng, cfg, remaining=10**6, ignore_eos=True, first=False, accept_rate=0.2) for _ in range(5000)]
    assert sum(d.tokens for d in low) / len(low) == pytest.approx(sum(0.2**i for i in range(4)), rel=0.03)


@pytest.mark.parametrize(
    "bad",
    [
        {"accept_rate": 1.5},
        {"max_batch": 0},
        {"port": 70000},
        {"itl_ms": -1.0},
        {"fail_rate": 0.5, "disconnect_rate": 0.3, "stall_rate": 0.3},
        {"burst": 0},
        {"log_interval": 0},
        {"step_jitter": -0.1},
        {"accept_spread": 0.6},
    ],
)
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        SimConfig(**bad)


def test_a_requests_category_comes_from_its_text_and_sets_its_acceptance_and_answer_length():
    from specload.engine.datasets import load_builtin
    from specload.sim.model import CATEGORY_PROFILES, category_of, request_profile

    convs = load_builtin().conversations
    cfg = SimConfig()
    means = {}
    for conv in convs:
        assert category_of(conv.turns[-1]) == conv.category  # every turn of the set is known
        cat, p, eos = request_profile(cfg, conv.turns[0], 100)
        assert cat == conv.category
        means[cat] = (p, eos)
    assert set(means) == set(CATEGORY_PROFILES)
    ranked = sorted(means, key=lambda c: -means[c][0])
    assert ranked[:2] == ["extract", "coding"] and ranked[-1] == "creative"
    assert means["chat"][0] < cfg.accept_rate < means["coding"][0]
    # natural answers: chat runs longer than extraction; translation answers as long as its text
    assert means["chat"][1] < means["extract"][1]
    assert request_profile(cfg, next(c.turns[0] for c in convs if c.category == "translate"), 2000)[2] == 1 / 2000
    # text the set does not have (synthetic words, another dataset): the configured defaults
    assert request_profile(cfg, "Write the quick brown fox", 20) == (None, cfg.accept_rate, cfg.eos_prob)
    assert request_profile(cfg, None, 20) == (None, cfg.accept_rate, cfg.eos_prob)
    # --accept-rate moves every category; 0 and 1 stay as asked; --eos-prob 0 never stops
    code = next(c.turns[0] for c in convs if c.category == "coding")
    assert request_profile(SimConfig(accept_rate=0.9), code, 10)[1] > means["coding"][0]
    assert request_profile(SimConfig(accept_rate=1.0), code, 10)[1] == 1.0
    assert request_profile(SimConfig(eos_prob=0.0), code, 10)[2] == 0.0


def _power(cfg: SimConfig, batch: int, busy: float) -> float:
    """GPU 0's modelled draw after one second of passes at ``batch`` that kept the clock ``busy``."""
    gpus = SimGpus(cfg)  # its window starts now
    t0 = time.perf_counter()
    calls = round(busy / decode_step_s(cfg, batch))
    families = {f.name: f for f in gpus.families(t0 + 1.0, calls, calls * batch, 0.0)}
    return families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value


def test_simulated_gpu_power_follows_the_batch_and_the_busy_share():
    cfg = SimConfig(gpus=2, step_ms=10, spec_tokens=3)
    idle = _power(cfg, 1, 0.0)
    assert idle == 70.0
    one, eight = _power(cfg, 1, 1.0), _power(cfg, 8, 1.0)
    assert idle < one < eight <= 700.0  # a wider pass verifies more positions and draws more
    assert _power(cfg, 8, 0.5) < eight  # half the time busy, less drawn
