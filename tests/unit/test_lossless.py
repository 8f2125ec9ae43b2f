"""--check-outputs in pieces: the simulator's greedy text, reading answers off the wire, comparing them.

Pure: no server, no clock. The integration tests (tests/integration/test_lossless.py) run the same
against the simulator over HTTP.
"""

from __future__ import annotations

import random

import orjson
import pytest

from specload.datatypes import Output, RequestRecord
from specload.engine.answers import MAX_OUTPUT_TOKENS, read_output
from specload.engine.api import CHAT, COMPLETIONS, GENERATE
from specload.sim.config import SimConfig
from specload.sim.greedy import BUG_DROP, Greedy, prompt_key
from specload.sim.model import VOCAB, draw_step
from specload.stats.lossless import (
    DIVERGES,
    LOSSLESS,
    NUMERICS,
    Answer,
    LiveOutputs,
    compare_answers,
    first_divergence,
    self_divergence,
    total,
    wilson,
)

# ------------------------------------------------------------------------------ the simulator's text


def _text(cfg: SimConfig, key: int, *, shapes: list[int], seed: int, n: int = 64) -> list[tuple]:
    """A greedy sequence drawn step by step as the scheduler would, each step at the next shape."""
    g = Greedy(key, len(VOCAB), near_tie_rate=cfg.near_tie_rate)
    rng = random.Random(seed)
    out: list[tuple] = []
    i = 0
    while len(out) < n:
        d = draw_step(rng, cfg, remaining=n - len(out), ignore_eos=True, first=not out, greedy=g,
                      shape=shapes[i % len(shapes)])
        assert d.toks is not None and d.tokens == len(d.toks)
        assert d.text == "".join(VOCAB[t[0]] for t in d.toks)
        out += d.toks
        i += 1
    return out


def test_greedy_text_is_the_prompts_whatever_speculation_and_batch() -> None:
    key = prompt_key([1, 2, 3, 99])
    plain = _text(SimConfig(spec_tokens=0), key, shapes=[1], seed=1)
    spec = _text(SimConfig(spec_tokens=4, accept_rate=0.8), key, shapes=[5, 40, 15], seed=2)
    assert [t[0] for t in spec] == [t[0] for t in plain]  # the same tokens, drafts accepted or not
    assert all(t[1] > t[3] + 1.9 for t in plain)  # no near-tie configured: wide margins only
    other = _text(SimConfig(spec_tokens=0), prompt_key([1, 2, 3, 98]), shapes=[1], seed=1)
    assert [t[0] for t in other] != [t[0] for t in plain]  # another prompt, another text


def test_near_ties_flip_with_the_shape_and_only_then() -> None:
    cfg = SimConfig(spec_tokens=0, near_tie_rate=0.2)
    key = prompt_key([7, 7, 7])
    ref = _text(cfg, key, shapes=[1], seed=0, n=200)
    assert _text(cfg, key, shapes=[1], seed=5, n=200) == ref  # shape 1 is the reference: repeatable
    ties = [i for i, t in enumerate(ref) if t[1] - t[3] < 0.05]
    assert 15 <= len(ties) <= 70  # about a fifth of 200 positions
    batched = _text(cfg, key, shapes=[16], seed=0, n=200)
    first = next(i for i, (x, y) in enumerate(zip(ref, batched, strict=True)) if x[0] != y[0])
    assert first in ties  # the first difference is at a near-tie ...
    assert 0 < batched[first][1] - batched[first][3] < 0.05  # ... won by a hair in its run too


def test_a_spec_bug_emits_a_token_the_model_did_not_prefer() -> None:
    key = prompt_key([4, 5])
    good = _text(SimConfig(spec_tokens=3, accept_rate=1.0), key, shapes=[4], seed=3)
    bad = _text(SimConfig(spec_tokens=3, accept_rate=1.0, spec_bug_rate=1.0), key, shapes=[4], seed=3)
    first = next(i for i, (x, y) in enumerate(zip(good, bad, strict=True)) if x[0] != y[0])
    tok, lp, best, best_lp = bad[first]
    assert best == good[first][0] and tok != best
    assert lp - best_lp == pytest.approx(-BUG_DROP, abs=1e-3)
    assert first == 3  # the prefill token (0), then 3 drafts (1-3) + the bonus (4): the last draft is wrong


def test_greedy_eos_is_the_prompts_too() -> None:
    key = prompt_key([11])
    stops = []
    for shape in (1, 8):
        g = Greedy(key, len(VOCAB), eos_prob=0.05)
        n = 0
        while True:
            toks, eos = g.step(3, shape)
            n += len(toks)
            if eos:
                break
        stops.append(n)
    assert stops[0] == stops[1] > 0


# ------------------------------------------------------------------------------ answers off the wire


def _sse(*objs: object) -> list[bytes]:
    data = b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"
    return [data[i:i + 37] for i in range(0, len(data), 37)]  # cut anywhere, as reads are


def _entry(tok: str, lp: float, alt: str, alt_lp: float, **extra: object) -> dict:
    return {"token": tok, "logprob": lp, **extra,
            "top_logprobs": [{"token": tok, "logprob": lp}, {"token": alt, "logprob": alt_lp}]}


def test_chat_logprobs_give_tokens_and_margins() -> None:
    out = read_output(CHAT, _sse(
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"delta": {"content": " fox jumps"},
                      "logprobs": {"content": [_entry(" fox", -0.01, " dog", -3.0), _entry(" jumps", -0.5, " ran", -0.6)]}}]},
        {"choices": [{"delta": {}, "finish_reason": "length"}]},
    ))
    assert out.text == " fox jumps" and out.chars == 10
    assert out.tokens == (" fox", " jumps")
    assert out.margins == (2.99, 0.1) and out.logprobs == (-0.01, -0.5)
    assert not out.capped


def test_completions_legacy_lists_and_llamacpp_content() -> None:
    vllm = read_output(COMPLETIONS, _sse(
        {"choices": [{"text": " a", "logprobs": {"tokens": [" a"], "token_logprobs": [-0.2], "text_offset": [0],
                                                 "top_logprobs": [{" a": -0.2, " b": -1.2}]}}]},
        {"choices": [{"text": " c", "logprobs": {"tokens": [" c"], "token_logprobs": [-0.3],
                                                 "top_logprobs": [{" c": -0.3}]}}]},  # no runner-up
    ))
    assert vllm.tokens == (" a", " c") and vllm.margins == (1.0, None)
    llama = read_output(COMPLETIONS, _sse(
        {"choices": [{"text": " fox", "logprobs": {"content": [_entry(" fox", -0.004, "ket", -8.49, id=458)]}}]},
    ))
    assert llama.tokens == (" fox",) and llama.margins == (8.486,)


def test_sglang_generate_logprobs_cumulative_or_not() -> None:
    cum = read_output(GENERATE, _sse(
        {"text": " a", "meta_info": {"output_token_logprobs": [[-0.1, 5, " a"]],
                                     "output_top_logprobs": [[[-0.1, 5, " a"], [-2.1, 6, " b"]]]}},
        {"text": " a c", "meta_info": {"output_token_logprobs": [[-0.1, 5, " a"], [-0.2, 7, " c"]],
                                       "output_top_logprobs": [[[-0.1, 5, " a"], [-2.1, 6, " b"]],
                                                               [[-0.2, 7, " c"], [-0.25, 8, " d"]]]}},
    ))
    assert cum.text == " a c" and cum.tokens == (" a", " c") and cum.margins == (2.0, 0.05)
    inc = read_output(GENERATE, _sse(
        {"text": " a", "meta_info": {"output_token_logprobs": [[-0.1, 5, " a"]]}},
        {"text": " a c", "meta_info": {"output_token_logprobs": [[-0.2, 7, " c"]]}},
    ))
    assert inc.tokens == (" a", " c") and inc.margins == (None, None)


@pytest.mark.parametrize("bad", [
    {"choices": [{"delta": {"content": " x"}, "logprobs": "nope"}]},
    {"choices": [{"delta": {"content": " x"}, "logprobs": {"content": [{"token": 5}]}}]},
    {"choices": [{"delta": {"content": " x"}, "logprobs": {"content": [_entry(" x", "hot", " y", -1)]}}]},
])
def test_hostile_logprobs_never_raise(bad: dict) -> None:
    out = read_output(CHAT, _sse(bad, {"choices": "abc"}, [1, 2], "text"))
    assert out.text == " x"
    if out.tokens is not None:  # a logprob that is not a number: the token stays, its margin unknown
        assert out.margins == (None,)


def test_answers_are_capped_and_say_so() -> None:
    n = MAX_OUTPUT_TOKENS + 10
    out = read_output(CHAT, _sse(*({"choices": [{"delta": {"content": " w"},
                                                  "logprobs": {"content": [_entry(" w", -0.1, " v", -1)]}}]}
                                   for _ in range(n))))
    assert out.token_count == n and len(out.tokens or ()) == MAX_OUTPUT_TOKENS and out.capped
    assert read_output(CHAT, _sse({"choices": [{"delta": {"content": " w"}}]}), capped=True).capped


# ------------------------------------------------------------------------------ comparing answers


def _ans(prompt: str, toks: list[str] | None, margins: list[float] | None = None, *, level: int = 0,
         conc: int = 1, text: str | None = None, sha: str = "s") -> Answer:
    body = text if text is not None else "".join(toks or [])
    return Answer(level, conc, prompt, sha, body, len(body), None if toks is None else tuple(toks),
                  None if margins is None else tuple(margins), len(toks or []))


def test_first_divergence_by_token_and_near_tie() -> None:
    a = _ans("p", [" a", " b", " c"], [5.0, 0.05, 5.0])
    assert first_divergence(a, _ans("p", [" a", " b", " c"], [5.0, 0.01, 5.0])) is None
    tie = first_divergence(a, _ans("p", [" a", " x", " y"], [5.0, 0.01, 3.0]))
    assert tie is not None and tie.position == 1 and tie.by == "token" and tie.near_tie
    assert tie.before == " a" and tie.a == " b c" and tie.b == " x y"
    bug = first_divergence(a, _ans("p", [" a", " b", " z"], [5.0, 0.05, -6.0]))
    assert bug is not None and bug.position == 2 and not bug.near_tie  # 5.0 in A, -6.0 in B: no tie
    shorter = first_divergence(a, _ans("p", [" a", " b"], [5.0, 0.05]))
    assert shorter is not None and shorter.position == 2


def test_without_tokens_by_text_and_never_a_near_tie() -> None:
    d = first_divergence(_ans("p", None, text="hello world"), _ans("p", None, text="hello there"))
    assert d is not None and d.by == "text" and d.position == 6 and not d.near_tie and not d.margins_known


def test_verdicts_per_level_and_mismatched_prompts() -> None:
    base = [_ans("p1", [" a", " b"], [3, 0.01]), _ans("p2", [" c", " d"], [3, 3]),
            _ans("p1", [" a", " b"], [3, 0.01], level=1, conc=4), _ans("p2", [" c", " d"], [3, 3], level=1, conc=4),
            _ans("p3", [" e"], [3], level=1, conc=4)]
    same = compare_answers(base, base)
    assert [lv.verdict for lv in same] == [LOSSLESS, LOSSLESS]
    tie = [*base[:1], _ans("p2", [" c", " d"], [3, 3]), _ans("p1", [" a", " q"], [3, 0.02], level=1, conc=4),
           base[3], _ans("p3", [" e"], [3], level=1, conc=4, sha="other")]
    lv1, lv4 = compare_answers(base, tie)
    assert lv1.verdict == LOSSLESS and lv4.verdict == NUMERICS
    assert (lv4.compared, lv4.identical, lv4.near_tie, lv4.divergent, lv4.mismatched) == (2, 1, 1, 0, 1)
    bug = [*tie[:4], _ans("p3", [" z"], [-6], level=1, conc=4)]
    lv4 = compare_answers(base, bug)[1]
    assert lv4.verdict == DIVERGES and (lv4.near_tie, lv4.divergent) == (1, 1) and lv4.positions == (1, 0)
    assert total(compare_answers(base, bug)).compared == 5


def test_self_divergence_against_the_c1_level() -> None:
    run = [_ans("p1", [" a", " b"], [3, 0.01], level=0, conc=1), _ans("p2", [" c"], [3], level=0, conc=1),
           _ans("p1", [" a", " x"], [3, 0.01], level=1, conc=16), _ans("p2", [" c"], [3], level=1, conc=16)]
    (lv,) = self_divergence(run)
    assert (lv.concurrency, lv.reference, lv.compared, lv.near_tie, lv.verdict) == (16, 1, 2, 1, NUMERICS)
    assert self_divergence(run[:2]) == ()


def test_wilson_interval() -> None:
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)  # not [1, 1], as p +- 1.96 sqrt(pq/n) says
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(57, 58)
    assert lo == pytest.approx(0.9086, abs=1e-3) and hi == pytest.approx(0.9970, abs=1e-3)


def test_answers_from_hostile_record_lines() -> None:
    good = {"type": "request", "ok": True, "level_index": 0, "level": 1, "prompt_id": "p", "prompt_sha": "s",
            "output": {"text": " a", "chars": 2, "tokens": [" a"], "margins": [1.0], "token_count": 1}}
    assert Answer.from_line(good) == Answer(0, 1, "p", "s", " a", 2, (" a",), (1.0,), 1)
    for bad in ({"text": 5, "chars": 1}, {"text": "x"}, {"text": "x", "chars": "1"}, "x"):
        assert Answer.from_line({**good, "output": bad}) is None
    odd = Answer.from_line({**good, "output": {"text": "x", "chars": 1, "tokens": [1], "margins": ["m"]}})
    assert odd is not None and odd.tokens is None  # tokens of the wrong type: compared by text
    assert Answer.from_line({**good, "ok": False}) is None and Answer.from_line({**good, "warmup": True}) is None


def _rec(rid: int, level: int, conc: int, prompt: str, toks: list[str], margins: list[float]) -> RequestRecord:
    text = "".join(toks)
    return RequestRecord(request_id=rid, level=conc, level_index=level, warmup=False, start_ns=0, end_ns=1,
                         ttft_ns=1, e2e_ns=1, output_tokens=len(toks), tokens_estimated=False, prompt_tokens=4,
                         chunks=len(toks), prompt_id=prompt, prompt_sha="s",
                         output=Output(text, len(text), tuple(toks), tuple(-0.1 for _ in toks), tuple(margins),
                                       len(toks)))


def test_live_outputs_alert_once_per_level_and_count_the_rest() -> None:
    base = [_ans("p1", [" a", " b"], [3, 3], conc=4), _ans("p2", [" c"], [3], conc=4), _ans("p3", [" e"], [3], conc=4)]
    live = LiveOutputs(base)
    live.level_started(0, 4)
    assert live.add(_rec(0, 0, 4, "p1", [" a", " b"], [3, 3])) is None
    found = live.add(_rec(1, 0, 4, "p2", [" z"], [-6]))
    assert found is not None and found.prompt == "p2" and found.position == 0 and found.b == " z"
    assert live.add(_rec(2, 0, 4, "p3", [" y"], [-6])) is None  # counted, not alerted again
    assert live.add(_rec(3, 0, 4, "p9", [" y"], [-6])) is None  # no baseline answer: not compared
    v = live.view()
    assert (v.compared, v.identical, v.divergent) == (3, 1, 2) and v.text().endswith("2 DIVERGE") and v.text(short=True) == "out 1/3 same · 2 DIVERGE"
    lv = live.level(0)
    assert lv is not None and lv.verdict == DIVERGES


def test_text_without_logprobs_is_unscored_and_then_compared_by_text() -> None:
    """llama-server with --spec-type ngram-mod sends no logprobs for the draft tokens it accepted:
    those chunks become tokens without a logprob, and answers with them compare by text, the margin
    taken from the token holding the diverging character where one is known."""
    out = read_output(CHAT, _sse(
        {"choices": [{"delta": {"content": " a"}, "logprobs": {"content": [_entry(" a", -0.1, " b", -2.1)]}}]},
        {"choices": [{"delta": {"content": " c"}}]},
    ))
    assert out.tokens == (" a", " c") and out.margins == (2.0, None) and out.logprobs == (-0.1, None)
    assert out.unscored == 1
    a = _ans("p", [" a", " x"], [2.0, 0.05])
    b = Answer(0, 1, "p", "s", " a y", 4, (" a", " y"), (2.0, None), 2, complete=False)
    d = first_divergence(a, b)
    assert d is not None and d.by == "text" and d.position == 3 and d.margin_a == 0.05 and d.near_tie
    assert first_divergence(a, Answer(0, 1, "p", "s", " a x", 4, (" a x",), (None,), 1, complete=False)) is None


# ------------------------------------------------------------------------------ options a sweep carries


def test_check_outputs_options_are_run_options_a_sweep_generates() -> None:
    """A sweep offers every RunConfig option field (``option_fields``) and builds its base config with
    ``build``: --check-outputs, --logprobs and --on-divergence come with it, and mean the same."""
    from specload.config import ConfigError, RunConfig
    from specload.options import build, option_fields

    flags = {f.name: opt for f, opt, _ in option_fields(RunConfig)}
    assert {"check_outputs", "logprobs", "on_divergence"} <= flags.keys()
    cfg = build(RunConfig, {"url": "http://127.0.0.1:1", "check_outputs": True}, ui=False)
    assert cfg.request.check_outputs and cfg.request.temperature == 0.0 and cfg.request.logprobs is None
    cfg = build(RunConfig, {"url": "http://127.0.0.1:1", "check_outputs": True, "temperature": 0.7}, ui=False)
    assert cfg.request.temperature == 0.7  # given: kept
    with pytest.raises(ConfigError, match="applies to --check-outputs"):
        build(RunConfig, {"url": "http://127.0.0.1:1", "logprobs": True}, ui=False)


def test_identified_prompts_are_the_same_for_the_same_seed_and_nonce() -> None:
    """Answers compare prompt by prompt: the same ids and texts at every level and in every run with the
    seed; a nonce given (a sweep gives all its runs one) keeps the texts alike across those runs only."""
    from specload.engine.prompts import PromptSource

    def sent(nonce: str | None, n: int = 5) -> list[tuple[str, str, str]]:
        src = PromptSource.from_options(prompt_tokens=32, seed=4, nonce=nonce, identify=True)
        out = []
        for _ in range(2):  # two levels
            src.restart()
            for _ in range(n):
                p = src.next()
                assert p.ident is not None
                out.append((*p.ident, p.text))
        return out

    plain = sent(None)
    assert [i for i, _, _ in plain[:5]] == [f"synthetic:s4:{i}" for i in range(5)] and plain[:5] == plain[5:]
    assert sent(None) == plain  # another run
    swept = sent("sweep-7f3a")
    assert sent("sweep-7f3a") == swept and [i for i, _, _ in swept] == [i for i, _, _ in plain]
    assert {s for _, s, _ in swept}.isdisjoint(s for _, s, _ in plain)  # other texts: not compared with them
    unidentified = PromptSource.from_options(prompt_tokens=32, seed=4)
    assert unidentified.next().ident is None and unidentified.nonce != ""
