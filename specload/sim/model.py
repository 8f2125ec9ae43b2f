"""The simulated model: how long things take and what a decode step produces. Pure, no I/O.

Kept apart from the scheduler and the HTTP layer so the numbers can be unit-tested without a clock.
Prompt lengths are the simulator's tokenizer's (``tokenizer.py``); ``usage.prompt_tokens`` reports
exactly them. Prefill grows linearly with the prompt and a decode step with the batch, so aggregate
tok/s rises with concurrency while per-request tok/s falls, and the FIFO queue beyond ``max_batch``
makes the knee; speculation makes a step dearer, the more so as the batch grows, so its gain can turn
into a loss at high concurrency. ``draw_step`` draws one step's tokens: K drafts, each accepted with
the request's own acceptance probability (``request_accept_rate``, shifted by its category in
``request_profile``) until the first rejection, plus the bonus token. A temperature-0 request's
tokens come from ``greedy.py``. ``jitter`` is the seeded noise that makes runs with different seeds
vary as real runs do. ``accepted = emitted - 1`` always, so for a finished request
``completion_tokens == 1 (prefill token) + verify_steps + accepted``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from specload.data import builtin_rows
from specload.sim import tokenizer
from specload.sim.config import SimConfig
from specload.sim.greedy import Greedy, Token

# Word-ish pieces with a leading space, so every token (and every chunk) is visible, non-empty text.
VOCAB: tuple[str, ...] = tuple(
    " " + w
    for w in (
        "the quick brown fox jumps over lazy dog while river runs past old mill and "
        "small birds sing in tall green trees near quiet town where people walk slowly "
        "along narrow streets under bright sky model server token batch draft verify "
        "accept speed cache memory kernel graph layer head attention value key query "
        "light stone water fire wind cloud rain snow road bridge tower garden window door"
    ).split()
)

# prompt lengths are the tokenizer's (tokenizer.py); these names stay for the callers and tests
CHAT_TOKENS_PER_MESSAGE = tokenizer.CHAT_TOKENS_PER_MESSAGE
CHAT_TOKENS_ASSISTANT_HEADER = tokenizer.CHAT_TOKENS_ASSISTANT_HEADER


def estimate_text_tokens(text: str) -> int:
    return max(1, tokenizer.count_text(text))


def estimate_prompt_tokens(prompt: object) -> int:
    """Tokens of an OpenAI completions ``prompt`` (str, list of str, list of token ids)."""
    if isinstance(prompt, str):
        return estimate_text_tokens(prompt)
    if isinstance(prompt, list):
        if not prompt:
            return 1
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        return sum(estimate_prompt_tokens(p) for p in prompt)
    raise ValueError("prompt must be a string, a list of strings or a list of token ids")


def estimate_chat_tokens(messages: list) -> int:
    return tokenizer.count_chat(messages)


def prefill_s(cfg: SimConfig, prompt_tokens: int) -> float:
    if cfg.ttft_ms is not None:
        return cfg.ttft_ms / 1000.0
    return (cfg.prefill_base_ms + cfg.prefill_per_token_ms * prompt_tokens) / 1000.0


def decode_step_s(cfg: SimConfig, batch: int) -> float:
    """One decode step: linear in the batch; verifying K drafts costs ``draft_cost`` each, dearer
    with ``draft_batch_slope`` as the batch grows (compute-bound verification)."""
    if cfg.itl_ms is not None:
        return cfg.itl_ms / 1000.0
    extra = max(0, batch - 1)
    plain = cfg.step_ms * (1.0 + cfg.step_slope * extra)
    draft = cfg.draft_cost * (1.0 + cfg.draft_batch_slope * extra)
    return plain * (1.0 + draft * cfg.spec_tokens) / 1000.0


def jitter(rng: random.Random, sigma: float) -> float:
    """A lognormal factor with mean 1 (``exp(sigma*Z - sigma²/2)``); 1.0 when ``sigma`` is 0."""
    if sigma <= 0.0:
        return 1.0
    return math.exp(rng.gauss(0.0, sigma) - sigma * sigma / 2.0)


# category -> (shift of the acceptance log-odds, mean natural answer in tokens, answer per prompt token).
# With the default --accept-rate 0.7: extract 0.88, coding 0.85, math 0.78, translate 0.75,
# summarise 0.72, rewrite 0.70, chat 0.62, creative 0.45.
CATEGORY_PROFILES: dict[str, tuple[float, int, float]] = {
    "extract": (1.1, 120, 0.0),
    "coding": (0.9, 220, 0.0),
    "math": (0.4, 200, 0.0),
    "translate": (0.25, 60, 1.0),
    "summarise": (0.1, 140, 0.0),
    "rewrite": (0.0, 60, 0.9),
    "chat": (-0.35, 180, 0.0),
    "creative": (-1.05, 260, 0.0),
}
_BUILTIN_TURNS: dict[str, str] = {}


def category_of(text: str) -> str | None:
    """The built-in set's category of a user turn's text, or None for text the set does not have."""
    if not _BUILTIN_TURNS:
        for category, turns in builtin_rows()[0]:
            for turn in turns:
                _BUILTIN_TURNS.setdefault(turn, category)
    return _BUILTIN_TURNS.get(text) or None


def request_profile(cfg: SimConfig, text: str | None, prompt_tokens: int) -> tuple[str | None, float, float]:
    """(category, mean draft acceptance, EOS probability per token) of a request whose last user turn
    is ``text``."""
    cat = category_of(text) if text else None
    if cat is None or cat not in CATEGORY_PROFILES:
        return None, cfg.accept_rate, cfg.eos_prob
    shift, answer, per_prompt = CATEGORY_PROFILES[cat]
    p = cfg.accept_rate
    if 0.0 < p < 1.0:
        p = 1.0 / (1.0 + math.exp(-(math.log(p / (1.0 - p)) + shift)))
    # --eos-prob 0 asks for answers that never end: kept
    return cat, p, 1.0 / max(answer, per_prompt * prompt_tokens) if cfg.eos_prob > 0.0 else 0.0


def request_accept_rate(rng: random.Random, cfg: SimConfig, mean: float | None = None) -> float:
    """One request's draft acceptance probability: Beta with mean ``accept_rate`` (or ``mean``) and
    standard deviation ``accept_spread`` (the largest the mean allows, if asked for more)."""
    p, sd = cfg.accept_rate if mean is None else mean, cfg.accept_spread
    if sd <= 0.0 or p <= 0.0 or p >= 1.0:
        return p
    # mean p, variance sd²: alpha + beta = p(1-p)/sd² - 1, which must stay positive
    total = p * (1.0 - p) / (sd * sd) - 1.0
    if total <= 0.5:
        total = 0.5
    return rng.betavariate(p * total, (1.0 - p) * total)


@dataclass(slots=True)
class StepDraw:
    tokens: int  # tokens emitted this step (>= 1)
    text: str
    accepted: int  # accepted draft tokens actually emitted (tokens - 1); 0 without speculation
    finish_reason: str | None  # "stop" (EOS), "length" (max_tokens) or None
    # each token with its logprob and the runner-up's (greedy.Token), when the request is greedy or
    # asked for logprobs; None otherwise
    toks: list[Token] | None = None


_N_VOCAB = len(VOCAB)


def draw_tokens(rng: random.Random, n: int) -> str:
    # indexing by rng.random() instead of rng.choices: this is the max-speed hot path
    r = rng.random
    if n == 1:
        return VOCAB[int(r() * _N_VOCAB)]
    return "".join([VOCAB[int(r() * _N_VOCAB)] for _ in range(n)])


def draw_step(
    rng: random.Random,
    cfg: SimConfig,
    *,
    remaining: int,
    ignore_eos: bool,
    first: bool,
    accept_rate: float | None = None,
    eos_prob: float | None = None,
    greedy: Greedy | None = None,
    shape: int = 1,
    logprobs: bool = False,
) -> StepDraw:
    """One step's output for one sequence. ``first``: the prefill token (never speculative);
    ``accept_rate``: the request's own acceptance probability (default: the configured mean);
    ``eos_prob``: its chance of EOS per token (default: the configured one). ``greedy``: a
    temperature-0 request's text (``greedy.py``), the same whatever the acceptance, its EOS its own;
    ``shape``: the tokens this step's forward pass computes (near-ties flip with it); ``logprobs``: a
    sampled request asked for them."""
    if first or cfg.spec_tokens == 0:
        n = 1
    else:
        n = 1
        p = cfg.accept_rate if accept_rate is None else accept_rate
        for _ in range(cfg.spec_tokens):
            if rng.random() >= p:
                break
            n += 1
    finish: str | None = None
    if n >= remaining:
        n = remaining
        finish = "length"
    if greedy is not None:
        bug = n > 1 and cfg.spec_bug_rate > 0.0 and rng.random() < cfg.spec_bug_rate
        toks, stop = greedy.step(n, shape, bug=bug, eos=not ignore_eos)
        k = len(toks)
        return StepDraw(k, "".join([VOCAB[t[0]] for t in toks]), k - 1, "stop" if stop else finish, toks)
    eos = cfg.eos_prob if eos_prob is None else eos_prob
    if not ignore_eos and eos > 0.0:
        # each emitted token may be EOS; the EOS token ends the sequence and counts as output
        for i in range(n):
            if rng.random() < eos:
                n = i + 1
                finish = "stop"
                break
    if logprobs:  # sampled: the drawn word, a plausible logprob and another word just below it
        idx = [int(rng.random() * _N_VOCAB) for _ in range(n)]
        toks = [(i, -1.0, (i + 1) % _N_VOCAB, -1.6) for i in idx]
        return StepDraw(n, "".join([VOCAB[i] for i in idx]), n - 1, finish, toks)
    return StepDraw(tokens=n, text=draw_tokens(rng, n), accepted=n - 1, finish_reason=finish)
