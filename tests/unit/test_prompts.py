"""Prompt sources: lengths and their distributions, synthetic prompts sized by a token model, distinct
starts and shared prefixes, fixed text, files and JSONL datasets, and their errors."""

from __future__ import annotations

import random
import statistics

import pytest

from specload.engine.datasets import TOKENS_PER_WORD, load_dataset
from specload.engine.prompts import PromptError, PromptSource
from specload.engine.words import OPENING, VOCABULARY, KeyedBytes, TokenModel, synthetic_text
from specload.plan import Lengths
from specload.sim import tokenizer


def test_guessed_prompts_have_the_guessed_length_and_differ() -> None:
    rng = random.Random(0)
    a, b = synthetic_text(400, TokenModel(), rng), synthetic_text(400, TokenModel(), rng)  # no server to ask
    assert abs(len(a.split()) * TOKENS_PER_WORD - 400) < 0.05 * 400
    assert a != b


def test_words_are_drawn_evenly_and_only_words_the_model_counts() -> None:
    # a word is one random byte: 64 words, each four times in the byte's table, none favoured
    table = TokenModel().draws.table
    assert len(VOCABULARY) == 64 and all(table.count(w) == 4 for w in VOCABULARY)
    text = synthetic_text(50_000, TokenModel(), random.Random(1))
    seen = [text.split().count(w) for w in VOCABULARY]
    assert min(seen) > 0.8 * max(seen)
    # an exact model that counts no tokens for a word never draws it
    partial = dict.fromkeys(VOCABULARY[:10], 1) | dict.fromkeys(VOCABULARY[10:], 0)
    model = TokenModel("tokenize", 1.0, 0.0, 1.0, partial)
    assert set(model.draws.table) == set(VOCABULARY[:10])
    assert set(synthetic_text(300, model, random.Random(2)).split()[1:]) <= set(VOCABULARY[:10])
    # a tokenizer endpoint's absurd count for one word costs no table of that size
    hostile = TokenModel("tokenize", 1.0, 0.0, 1.0, dict.fromkeys(VOCABULARY, 1) | {"the": 10**12})
    words = synthetic_text(300, hostile, random.Random(3)).split()[1:]
    assert len(words) == 299 and "the" not in words
    # a key's bytes are the same however they are read (one read, or many small ones)
    one, many = KeyedBytes("0:n:7"), KeyedBytes("0:n:7")
    pieces = b"".join(many.randbytes(k % 7) for k in range(1000))  # 2,997 bytes in 1,000 reads
    assert len(pieces) == 2997 and one.randbytes(2997) == pieces
    assert KeyedBytes("0:n:8").randbytes(64) != pieces[:64]  # another request's key: other bytes


@pytest.mark.parametrize(
    ("spec", "kind", "mean", "low", "high"),
    [("128", "fixed", 128, 128, 128), ("128:32", "uniform", 128, 96, 160), ("64,128,256", "choice", 448 / 3, 64, 256),
     (" 100 : 0 ", "fixed", 100, 100, 100)],
)
def test_length_specs(spec: str, kind: str, mean: float, low: int, high: int) -> None:
    L = Lengths.parse(spec)
    assert (L.kind, L.low, L.high) == (kind, low, high)
    assert L.mean == pytest.approx(mean)
    rng = random.Random(1)
    draws = [L.draw(rng) for _ in range(3000)]
    assert low <= min(draws) and max(draws) <= high
    if kind == "uniform":
        assert statistics.mean(draws) == pytest.approx(mean, rel=0.02)
        assert len(set(draws)) > 50  # spread over the range, not a few values
    if kind == "choice":
        assert set(draws) == {64, 128, 256}
    assert Lengths.parse(L.spec) == L


@pytest.mark.parametrize("spec", ["0", "-5", "128:200", "128:", "abc", "1e5", "64,,128", "128:-1"])
def test_bad_length_specs_say_what_is_expected(spec: str) -> None:
    with pytest.raises(ValueError, match="expected N, MEAN:SPREAD"):
        Lengths.parse(spec, "--prompt-tokens")


def _sim_model(overhead: int = 7) -> TokenModel:
    """What calibration learns from the simulator's tokenizer: each word's exact count."""
    words = {w: tokenizer.count_text(" " + w) for w in VOCABULARY}
    return TokenModel("tokenize", sum(words.values()) / len(words), overhead, tokenizer.count_text(OPENING), words)


@pytest.mark.parametrize("n", [20, 128, 129, 500, 2000])
def test_an_exact_token_model_makes_prompts_of_exactly_the_asked_length(n: int) -> None:
    model = _sim_model(overhead=7)  # e.g. a chat template's tokens around the text
    src = PromptSource(synthetic_tokens=n, seed=3)
    src.set_model(model)
    for _ in range(20):
        p = src.next()
        assert p.tokens_requested == n
        assert tokenizer.count_text(p.text) + 7 == n


def test_prompts_start_differently_within_a_run_and_across_runs() -> None:
    model = _sim_model()
    a, b = PromptSource(synthetic_tokens=256, seed=0), PromptSource(synthetic_tokens=256, seed=0)
    a.set_model(model)
    b.set_model(model)
    assert a.nonce != b.nonce  # a fresh nonce per run
    texts = [a.next().text for _ in range(50)] + [b.next().text for _ in range(50)]
    # a prefix cache matches whole 16-token blocks from the start: no two prompts share one
    firsts = {tuple(tokenizer.text_ids(t)[:16]) for t in texts}
    assert len(firsts) == 100
    # the same seed and nonce give the same prompts (a run can be replayed)
    c = PromptSource(synthetic_tokens=256, seed=0, nonce=a.nonce)
    c.set_model(model)
    assert c.next().text == texts[0]


def test_shared_prefix_gives_every_prompt_the_same_first_tokens() -> None:
    model = _sim_model(overhead=0)
    src = PromptSource(synthetic_tokens=Lengths.parse("200:50"), shared_prefix_tokens=96, seed=5)
    src.set_model(model)
    prompts = [src.next() for _ in range(30)]
    ids = [tokenizer.text_ids(p.text) for p in prompts]
    assert len({tuple(x[:96]) for x in ids}) == 1  # the first 96 tokens: one prefix for all
    assert len({tuple(x[:104]) for x in ids}) == 30  # right after it they differ
    for p in prompts:  # and each is still the length asked for
        assert tokenizer.count_text(p.text) == p.tokens_requested
    assert len({p.tokens_requested for p in prompts}) > 5


def test_lengths_and_output_lengths_are_drawn_from_the_seed() -> None:
    def run(seed: int) -> list[tuple[int | None, int | None]]:
        src = PromptSource(synthetic_tokens=Lengths.parse("64,128"), output_lengths=Lengths.parse("100:50"), seed=seed)
        return [(p.tokens_requested, p.max_tokens) for p in (src.next() for _ in range(40))]

    assert run(7) == run(7)
    assert run(7) != run(8)
    outs = [m for _, m in run(7)]
    assert all(50 <= m <= 150 for m in outs) and len(set(outs)) > 10
    # a fixed output length is the run's --max-tokens: nothing drawn per request
    src = PromptSource(synthetic_tokens=128, output_lengths=Lengths.parse("256"))
    assert src.next().max_tokens is None


def test_dataset_keys_and_chat_shapes(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": "one"}\n'
        '\n'
        '{"text": "two"}\n'
        '{"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "three"}]}\n'
        '{"conversations": [{"from": "human", "value": "four"}]}\n'
        '"five"\n'
    )
    assert [c.turns[0] for c in load_dataset(str(f)).conversations] == ["one", "two", "three", "four", "five"]
    src = PromptSource.from_options(dataset=str(f))
    assert not src.synthetic
    got = [src.next() for _ in range(6)]
    assert [p.text for p in got] == ["one", "two", "three", "four", "five", "one"]
    assert all(p.tokens_requested is None for p in got)  # a dataset's lengths are what they are


@pytest.mark.parametrize(
    ("content", "needle"),
    [("{bad json\n", "not valid JSON"), ('{"other": 1}\n', "expected JSONL or a JSON array"), ("\n\n", "no prompts")],
)
def test_bad_datasets_name_the_line(tmp_path, content: str, needle: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(PromptError, match=needle):
        load_dataset(str(f))


def test_prompt_file_and_text(tmp_path) -> None:
    f = tmp_path / "p.txt"
    f.write_text("hello from a file")
    assert PromptSource.from_options(prompt_file=str(f)).next().text == "hello from a file"
    assert PromptSource.from_options(prompt="fixed").next().text == "fixed"
    with pytest.raises(PromptError, match="cannot read"):
        PromptSource.from_options(prompt_file=str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("kind", ["prompt_file", "dataset"])
def test_dev_zero_is_refused_after_a_bounded_read(kind: str) -> None:
    # before: read without limit until MemoryError
    with pytest.raises(PromptError, match="over 16 MiB|not a text file"):
        PromptSource.from_options(**{kind: "/dev/zero"})


def test_a_dataset_line_over_the_bound_names_its_line(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    with open(f, "wb") as out:
        out.write(b'{"prompt": "ok"}\n')
        out.write(b'{"prompt": "' + b"a" * (16 << 20) + b'"}\n')
    with pytest.raises(PromptError, match=r"d.jsonl: line 2 runs over 16 MiB"):
        load_dataset(str(f))
