"""The simulator's tokenizer (counts a real server would give in shape, not the client's guess) and
its prefix cache (whole blocks from the start, LRU)."""

from __future__ import annotations

from specload.engine.datasets import TOKENS_PER_WORD
from specload.engine.words import VOCABULARY
from specload.sim import tokenizer
from specload.sim.prefix_cache import PrefixCache


def test_counts_are_per_word_and_differ_from_the_clients_guess() -> None:
    assert tokenizer.count_text(" the") == 1
    assert tokenizer.count_text(" speculative") == 3  # 12 characters with the space
    assert tokenizer.count_text("abcd" * 10) == 10
    text = "Write" + "".join(" " + w for w in VOCABULARY)
    # a word's count does not depend on its neighbours, as with byte-level BPE
    assert tokenizer.count_text(text) == tokenizer.count_text("Write") + sum(
        tokenizer.count_text(" " + w) for w in VOCABULARY)
    per_word = (tokenizer.count_text(text) - 2) / len(VOCABULARY)
    assert per_word > 1.4 * TOKENS_PER_WORD  # the guess would ask for far too few words
    assert len(tokenizer.text_ids(text)) == tokenizer.count_text(text)
    assert tokenizer.text_ids(text) == tokenizer.text_ids(text)  # deterministic ids


def test_chat_counts_add_a_chatml_template() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": " the quick fox"}]
    content = tokenizer.count_text("be brief") + tokenizer.count_text(" the quick fox")
    assert tokenizer.count_chat(messages) == content + 2 * 4 + 3
    assert len(tokenizer.chat_ids(messages)) == tokenizer.count_chat(messages)


def test_prefix_cache_serves_whole_matching_blocks_from_the_start() -> None:
    cache = PrefixCache(capacity_tokens=10_000, block_tokens=16)
    a = list(range(100, 200))  # 100 ids: 6 whole blocks
    assert cache.lookup(a) == 0  # cold
    assert cache.lookup(a) == 96  # 6 blocks; the last 4 ids are no block
    b = a[:40] + [7] * 60  # shares 40 ids: 2 whole blocks
    assert cache.lookup(b) == 32
    c = [1] + a[1:]  # differs in the first id: nothing matches after it either
    assert cache.lookup(c) == 0
    assert cache.lookup(a[:32]) == 31  # the last token of a prompt is always computed
    assert cache.queries == 100 + 100 + 100 + 100 + 32 and cache.hits == 96 + 32 + 31


def test_prefix_cache_evicts_the_least_recently_used_blocks() -> None:
    cache = PrefixCache(capacity_tokens=64, block_tokens=16)  # 4 blocks
    a, b = list(range(0, 32)), list(range(1000, 1064))
    cache.lookup(a)  # 2 blocks
    cache.lookup(b)  # 4 more: a's are the oldest and go
    assert cache.lookup(b) == 63
    assert cache.lookup(a) == 0
