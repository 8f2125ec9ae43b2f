"""Prompt sources: synthetic prompts of N tokens *as the server counts them*, a fixed text, a text
file, a JSONL dataset; and the lengths to ask for (prompt and output), fixed or drawn.

A source is an endless stream of ``Prompt``s; the runner takes the next one per request.

Lengths are distributions (``Lengths``): ``128`` (every request), ``128:32`` (uniform over
mean +- spread), or ``64,128,256`` (one of the list, uniformly). Draws come from one RNG seeded by
``--seed``, so a run's lengths are reproducible and the seed is in the record.

Synthetic prompts. "128 tokens" means 128 in the server's ``usage.prompt_tokens``, chat template
included, because that is what prefill time and KV use depend on: a guess of 1.3 tokens a word
gave 313 tokens on one real server and 99 on another. The text is built from a fixed vocabulary of
words under a ``TokenModel``: before the load, ``engine/calibrate.py`` asks the server's tokenizer
endpoint how many tokens each vocabulary word is (exact, since common tokenizers split words at
their leading space), or fits tokens per word from the ``usage.prompt_tokens`` of two calibration
requests, and learns the template's overhead; without either it keeps the guess and says so.

Prefix caching. A prompt's first tokens decide what a prefix cache can serve, so every synthetic
prompt starts differently: its words are drawn from an RNG keyed by the seed, a per-run nonce and
the request's number. Without the nonce, two runs with the same seed would send the same prompts and
the second would be served from the first one's cache. ``--shared-prefix-tokens N`` instead gives
every prompt of the run the same first N tokens (the same for every run with that seed), to measure
caching on purpose.
"""

from __future__ import annotations

import itertools
import os
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

# About 1.3 tokens per English word for common BPE tokenizers: the guess when nothing better is known.
TOKENS_PER_WORD = 1.3

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


class PromptError(ValueError):
    """A prompt source that cannot be used (missing file, empty dataset, bad JSONL line)."""


# --------------------------------------------------------------------------- lengths

_LIST = re.compile(r"^\d+(,\d+)+$")


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length distribution: ``fixed`` N, ``uniform`` mean +- spread, or ``choice`` of a list."""

    kind: str
    values: tuple[int, ...]

    @classmethod
    def parse(cls, spec: str | int, what: str = "length") -> Lengths:
        """``128``, ``128:32`` or ``64,128,256``; ValueError with a one-line message otherwise."""
        text = str(spec).strip().replace(" ", "")
        try:
            if text.isdigit():
                n = int(text)
                if n < 1:
                    raise ValueError
                return cls("fixed", (n,))
            if ":" in text:
                mean_s, spread_s = text.split(":", 1)
                mean, spread = int(mean_s), int(spread_s)
                if mean < 1 or spread < 0 or spread >= mean:
                    raise ValueError
                return cls("uniform", (mean, spread)) if spread else cls("fixed", (mean,))
            if _LIST.match(text):
                vals = tuple(int(v) for v in text.split(","))
                if min(vals) < 1:
                    raise ValueError
                return cls("choice", vals)
        except ValueError:
            pass
        raise ValueError(
            f"bad {what} {spec!r}: expected N, MEAN:SPREAD (uniform, spread < mean) or a list A,B,C of positive integers"
        )

    @property
    def spec(self) -> str:
        if self.kind == "uniform":
            return f"{self.values[0]}:{self.values[1]}"
        return ",".join(str(v) for v in self.values)

    @property
    def mean(self) -> float:
        if self.kind == "choice":
            return sum(self.values) / len(self.values)
        return float(self.values[0])

    @property
    def low(self) -> int:
        return self.values[0] - self.values[1] if self.kind == "uniform" else min(self.values)

    @property
    def high(self) -> int:
        return self.values[0] + self.values[1] if self.kind == "uniform" else max(self.values)

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed"

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.values[0]
        if self.kind == "uniform":
            mean, spread = self.values
            return rng.randint(mean - spread, mean + spread)
        return rng.choice(self.values)


# --------------------------------------------------------------------------- token model


@dataclass(frozen=True)
class TokenModel:
    """How many tokens the server counts for a synthetic prompt.

    ``word_tokens``: the exact count of each vocabulary word with its leading space (from a
    tokenizer endpoint), or None, when every word counts ``per_word`` on average. ``overhead``: what
    the server adds around the text (chat template, BOS), so a prompt of T text tokens is counted
    T + overhead. ``opening``: the count of the opening word.
    """

    method: str = "guess"  # "tokenize" (tokenizer endpoint), "usage" (fitted), "guess"
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


def _fill(rng: random.Random, target: float, model: TokenModel) -> list[str]:
    """Words whose tokens add up to ``target`` (exactly when the model knows each word)."""
    words: list[str] = []
    if target <= 0:
        return words
    exact = model.word_tokens
    if exact is None:
        n = max(0, round(target / model.per_word))
        return [VOCABULARY[int(rng.random() * len(VOCABULARY))] for _ in range(n)]
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
        words = _fill(rng, n_tokens - model.overhead - prefix_tokens, model)
        return prefix + "".join(" " + w for w in words)
    words = _fill(rng, n_tokens - model.overhead - model.opening, model)
    return OPENING + "".join(" " + w for w in words)


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    tokens_requested: int | None = None  # synthetic: the length asked for, as the server counts
    max_tokens: int | None = None  # a drawn output length (None: the run's fixed --max-tokens)


class PromptSource:
    """An endless iterator of prompts."""

    def __init__(
        self,
        prompts: list[str] | None = None,
        *,
        synthetic_tokens: int | Lengths | None = None,
        output_lengths: Lengths | None = None,
        shared_prefix_tokens: int = 0,
        seed: int = 0,
        nonce: str | None = None,
    ) -> None:
        if prompts is not None and not prompts:
            raise PromptError("no prompts to send")
        self._prompts = prompts
        if isinstance(synthetic_tokens, int):
            synthetic_tokens = Lengths("fixed", (synthetic_tokens,))
        self.lengths: Lengths | None = synthetic_tokens if prompts is None else None
        if prompts is None and self.lengths is None:
            self.lengths = Lengths("fixed", (128,))
        self.output_lengths = output_lengths if output_lengths is not None and not output_lengths.fixed else None
        self.shared_prefix_tokens = shared_prefix_tokens
        self.seed = seed
        # distinct prompts in every run: without it a rerun with the same seed hits a prefix cache
        self.nonce = nonce if nonce is not None else os.urandom(4).hex()
        self._rng = random.Random(seed)  # lengths
        self._serial = itertools.count()
        self._cycle: Iterator[str] | None = itertools.cycle(prompts) if prompts else None
        self.model = TokenModel()
        self._prefix = ""
        self._prefix_tokens = 0.0
        self.set_model(self.model)

    @property
    def synthetic(self) -> bool:
        return self._cycle is None

    def set_model(self, model: TokenModel) -> None:
        """Size prompts with what calibration learned about the server's tokenizer."""
        self.model = model
        if self.shared_prefix_tokens and self.synthetic:
            # the first N tokens of the text (after whatever the template puts before it)
            rng = random.Random(f"{self.seed}:shared-prefix")
            words = _fill(rng, self.shared_prefix_tokens - model.opening, model)
            self._prefix = OPENING + "".join(" " + w for w in words)
            self._prefix_tokens = float(self.shared_prefix_tokens)

    def text_of(self, n_tokens: int, serial: int) -> str:
        rng = random.Random(f"{self.seed}:{self.nonce}:{serial}")
        return synthetic_text(n_tokens, self.model, rng, self._prefix, self._prefix_tokens)

    def next(self) -> Prompt:
        n = next(self._serial)
        max_tokens = self.output_lengths.draw(self._rng) if self.output_lengths is not None else None
        if self._cycle is not None:
            return Prompt(next(self._cycle), None, max_tokens)
        assert self.lengths is not None
        want = self.lengths.draw(self._rng)
        return Prompt(self.text_of(want, n), want, max_tokens)

    def describe(self) -> dict:
        d: dict = {"nonce": self.nonce}
        if self.synthetic and self.lengths is not None:
            d["prompt_tokens"] = self.lengths.spec
            d["shared_prefix_tokens"] = self.shared_prefix_tokens
            d["model"] = self.model.describe()
        if self.output_lengths is not None:
            d["max_tokens"] = self.output_lengths.spec
        return d

    @classmethod
    def from_options(
        cls,
        *,
        prompt: str | None = None,
        prompt_file: str | None = None,
        dataset: str | None = None,
        prompt_tokens: int | Lengths = 128,
        output_lengths: Lengths | None = None,
        shared_prefix_tokens: int = 0,
        seed: int = 0,
        nonce: str | None = None,
    ) -> PromptSource:
        kw: dict = {"output_lengths": output_lengths, "seed": seed, "nonce": nonce}
        if prompt is not None:
            return cls([prompt], **kw)
        if prompt_file is not None:
            text = _read(prompt_file)
            if not text.strip():
                raise PromptError(f"prompt file {prompt_file} is empty")
            return cls([text], **kw)
        if dataset is not None:
            return cls(load_dataset(dataset), **kw)
        return cls(synthetic_tokens=prompt_tokens, shared_prefix_tokens=shared_prefix_tokens, **kw)


# Bounds on what is read from a prompt file or dataset: a path may name /dev/zero, a FIFO or a
# file far larger than memory. No prompt is anywhere near 16 MiB (about 4 million tokens), and a
# dataset's prompts are all held in memory, so its size is capped too.
MAX_PROMPT_BYTES = 16 << 20
MAX_DATASET_BYTES = 2 << 30


def _read(path: str, limit: int = MAX_PROMPT_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise PromptError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise PromptError(f"prompt file {path} is larger than {limit >> 20} MiB")
    return data.decode("utf-8", errors="replace")


_PROMPT_KEYS = ("prompt", "text", "input", "question", "instruction")


def _dataset_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a JSONL file, read a line at a time, each line and the whole bounded."""
    total = 0
    try:
        with open(path, "rb") as f:
            for n in itertools.count(1):
                line = f.readline(MAX_PROMPT_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_PROMPT_BYTES:
                    raise PromptError(f"{path}:{n}: line longer than {MAX_PROMPT_BYTES >> 20} MiB")
                total += len(line)
                if total > MAX_DATASET_BYTES:
                    raise PromptError(f"{path}: larger than {MAX_DATASET_BYTES >> 30} GiB (use a sample of it)")
                yield n, line
    except OSError as e:
        raise PromptError(f"cannot read {path}: {e.strerror or e}") from None


def load_dataset(path: str) -> list[str]:
    """JSONL: one object per line with a prompt under a common key, or a chat ``messages`` list
    (the first user message is used; ShareGPT's ``conversations`` with ``from``/``value`` too)."""
    prompts: list[str] = []
    for n, line in _dataset_lines(path):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise PromptError(f"{path}:{n}: not valid JSON") from None
        text = _prompt_of(obj)
        if text is None:
            raise PromptError(f"{path}:{n}: no prompt found (keys {', '.join(_PROMPT_KEYS)} or messages)")
        prompts.append(text)
    if not prompts:
        raise PromptError(f"{path}: no prompts")
    return prompts


def _prompt_of(obj: object) -> str | None:
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        return None
    for k in _PROMPT_KEYS:
        v = obj.get(k)
        if isinstance(v, str) and v:
            return v
    for k in ("messages", "conversations"):
        msgs = obj.get(k)
        if isinstance(msgs, list):
            for m in msgs:
                if isinstance(m, dict) and m.get("role", m.get("from")) in ("user", "human"):
                    v = m.get("content", m.get("value"))
                    if isinstance(v, str):
                        return v
    return None
