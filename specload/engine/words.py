"""The words synthetic prompts are made of, and how many tokens the server counts for them.

``TokenModel`` is what calibration (``calibrate.py``) learns of the server's tokenizer, or the
1.3-tokens-a-word guess; ``synthetic_text`` and ``fill_words`` build a text of N tokens under it. The
prompt sources (``prompts.py``) and the trace's block texts (``trace.py``) both write with these.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from typing import Protocol

from specload.engine.datasets import TOKENS_PER_WORD

# Every prompt opens with this word (a one-token prefix cannot make a prefix-cache hit: caches
# match whole blocks, vLLM's of 16 tokens), then words from VOCABULARY.
OPENING = "Write"
VOCABULARY: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
            "inference servers batch requests together so that every decode step serves many sequences "
            "speculative decoding drafts several tokens and verifies them in one forward pass of the target "
            "model which raises throughput when the draft is accepted often enough to pay for itself "
            "each prefill fills memory pages the scheduler caches"
        ).split()
    )
)


class Bytes(Protocol):
    """Where a prompt's random bytes come from: ``random.Random``, or a ``KeyedBytes``."""

    def randbytes(self, n: int, /) -> bytes: ...


class KeyedBytes:
    """The bytes of SHAKE-128 of a key, read on: a prompt per request keyed by its number, at a
    fifth of the cost of seeding a ``random.Random`` with the key (its 624-word state)."""

    __slots__ = ("_hash", "_out", "_read")

    def __init__(self, key: str) -> None:
        self._hash = hashlib.shake_128(key.encode("utf-8", "surrogatepass"))
        self._out = b""
        self._read = 0

    def randbytes(self, n: int) -> bytes:
        end = self._read + n
        if end > len(self._out):  # the output is read ahead, doubling: many small reads stay linear
            self._out = self._hash.digest(max(end, 2 * len(self._out), 256))
        got, self._read = self._out[self._read:end], end
        return got


@dataclass(frozen=True)
class TokenModel:
    """How many tokens the server counts for a synthetic prompt.

    ``word_tokens``: the exact count of each vocabulary word with its leading space (from a
    tokenizer endpoint), or None, when every word counts ``per_word`` on average. ``overhead``: what
    the server adds around the text (chat template, BOS), so a prompt of T text tokens is counted
    T + overhead. ``opening``: the count of the opening word.
    """

    method: str = "guess"  # "tokenize" (tokenizer endpoint), "usage" (fitted), "guess", "given" (by the user)
    per_word: float = TOKENS_PER_WORD
    overhead: float = 0.0
    opening: float = TOKENS_PER_WORD
    word_tokens: dict[str, int] | None = field(default=None)
    detail: str = ""  # how it was found, for the record

    @cached_property
    def draws(self) -> _Draws:
        """The tables a prompt's words are drawn from, one random byte a word (built once a model)."""
        exact = self.word_tokens
        vocab = VOCABULARY if exact is None else tuple(w for w in VOCABULARY if exact.get(w, 0) > 0)
        return _Draws(vocab, exact)

    def describe(self) -> dict:
        return {
            "method": self.method,
            "tokens_per_word": round(self.per_word, 4),
            "overhead_tokens": round(self.overhead, 3),
            "opening_tokens": round(self.opening, 3),
            "exact_words": None if self.word_tokens is None else len(self.word_tokens),
            "detail": self.detail,
        }


class _Draws:
    """A byte picks a word: ``table[b]`` (each of 64 words four times, so none is favoured; a vocabulary
    of another size is spread as evenly as 256 allows), and under an exact model its count, the
    largest count and, for the last few tokens, the words of each count and those that fit."""

    def __init__(self, vocab: tuple[str, ...], exact: dict[str, int] | None) -> None:
        self.table = tuple(vocab[i * len(vocab) >> 8] for i in range(256))
        if exact is None:
            return
        self.counts = tuple(exact[w] for w in self.table)
        self.biggest = max(self.counts)
        self.mean = sum(self.counts) / 256
        self.same = {c: tuple(w for w in vocab if exact[w] == c) for c in set(self.counts)}
        self.by_count = sorted(vocab, key=exact.__getitem__)  # the words that fit: a prefix of these
        self.sorted_counts = [exact[w] for w in self.by_count]
        self.exact = exact

    def fits(self, left: int) -> list[str]:
        return self.by_count[:bisect_right(self.sorted_counts, left)]


def fill_words(rng: Bytes, target: float, model: TokenModel) -> list[str]:
    """Words whose tokens add up to ``target`` (exactly when the model knows each word). One prompt a
    request: at the client's ceiling this was a tenth of its CPU, so a word is one random byte looked
    up in a table, and an exact model's counts are summed in C (``accumulate``)."""
    if target <= 0:
        return []
    d = model.draws
    table = d.table
    if model.word_tokens is None:
        return [table[b] for b in rng.randbytes(max(0, round(target / model.per_word)))]
    words: list[str] = []
    left = int(round(target))
    counts = d.counts
    while left > d.biggest:  # words until what is left fits in one
        drawn = rng.randbytes(int((left - d.biggest) / d.mean) + 4)
        total = list(accumulate([counts[b] for b in drawn]))
        end = bisect_left(total, left - d.biggest) + 1
        words += [table[b] for b in drawn[:end]]
        left -= total[min(end, len(total)) - 1]
    # the last few tokens: words that fit, preferring an exact fit
    while left > 0:
        pick = d.same.get(left) or d.fits(left)
        if not pick:
            break  # no word is small enough (no one-token word): the prompt ends a little short
        w = pick[rng.randbytes(1)[0] * len(pick) >> 8]
        words.append(w)
        left -= d.exact[w]
    return words


def synthetic_text(
    n_tokens: int, model: TokenModel, rng: Bytes, prefix: str = "", prefix_tokens: float = 0.0
) -> str:
    """A prompt the server should count as ``n_tokens`` (its overhead included)."""
    if prefix:
        words = fill_words(rng, n_tokens - model.overhead - prefix_tokens, model)
        return prefix + " " + " ".join(words) if words else prefix
    words = fill_words(rng, n_tokens - model.overhead - model.opening, model)
    return OPENING + " " + " ".join(words) if words else OPENING
