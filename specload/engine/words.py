"""The words synthetic prompts are made of, and how many tokens the server counts for them.

``TokenModel`` is what calibration (``calibrate.py``) learns of the server's tokenizer, or the
1.3-tokens-a-word guess; ``synthetic_text`` and ``fill_words`` build a text of N tokens under it. The
prompt sources (``prompts.py``) and the trace's block texts (``trace.py``) both write with these.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

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
            "model which raises throughput when the draft is accepted often enough to pay for itself"
        ).split()
    )
)


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

    def describe(self) -> dict:
        return {
            "method": self.method,
            "tokens_per_word": round(self.per_word, 4),
            "overhead_tokens": round(self.overhead, 3),
            "opening_tokens": round(self.opening, 3),
            "exact_words": None if self.word_tokens is None else len(self.word_tokens),
            "detail": self.detail,
        }


def fill_words(rng: random.Random, target: float, model: TokenModel) -> list[str]:
    """Words whose tokens add up to ``target`` (exactly when the model knows each word)."""
    words: list[str] = []
    if target <= 0:
        return words
    exact = model.word_tokens
    if exact is None:
        # one prompt per request: at the client's ceiling this loop is a tenth of its CPU, so it
        # reads locals only
        n = max(0, round(target / model.per_word))
        draw, size, words_of = rng.random, len(VOCABULARY), VOCABULARY
        return [words_of[int(draw() * size)] for _ in range(n)]
    left = int(round(target))
    vocab = [w for w in VOCABULARY if exact.get(w, 0) > 0]
    biggest = max(exact[w] for w in vocab)
    while left > biggest:
        w = vocab[int(rng.random() * len(vocab))]
        words.append(w)
        left -= exact[w]
    # the last few tokens: words that fit, preferring an exact fit
    while left > 0:
        fits = [w for w in vocab if exact[w] <= left]
        if not fits:
            break  # no word is small enough (no one-token word): the prompt ends a little short
        same = [w for w in fits if exact[w] == left]
        w = same[int(rng.random() * len(same))] if same else fits[int(rng.random() * len(fits))]
        words.append(w)
        left -= exact[w]
    return words


def synthetic_text(
    n_tokens: int, model: TokenModel, rng: random.Random, prefix: str = "", prefix_tokens: float = 0.0
) -> str:
    """A prompt the server should count as ``n_tokens`` (its overhead included)."""
    if prefix:
        words = fill_words(rng, n_tokens - model.overhead - prefix_tokens, model)
        return prefix + " " + " ".join(words) if words else prefix
    words = fill_words(rng, n_tokens - model.overhead - model.opening, model)
    return OPENING + " " + " ".join(words) if words else OPENING
