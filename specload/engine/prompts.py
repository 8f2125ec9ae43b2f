"""Prompt sources: synthetic prompts of about N tokens, a fixed text, a text file, a JSONL dataset.

A source is an endless cycle of prompt strings; the runner takes the next one per request. Synthetic
prompts are made from a fixed word list with a per-request prefix, so servers with prefix caching do
not serve every request from cache (which would flatter TTFT).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import orjson

# About 1.3 tokens per English word for common BPE tokenizers; good enough for "about N tokens".
TOKENS_PER_WORD = 1.3

_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
    "inference servers batch requests together so that every decode step serves many sequences "
    "speculative decoding drafts several tokens and verifies them in one forward pass of the target "
    "model which raises throughput when the draft is accepted often enough to pay for itself"
).split()


class PromptError(ValueError):
    """A prompt source that cannot be used (missing file, empty dataset, bad JSONL line)."""


def synthetic_prompt(n_tokens: int, rng: random.Random, serial: int) -> str:
    n_words = max(1, round(n_tokens / TOKENS_PER_WORD))
    head = f"Request {serial}: write a long story."
    words = [rng.choice(_WORDS) for _ in range(max(0, n_words - 5))]
    return head + " " + " ".join(words)


class PromptSource:
    """An endless iterator of prompts."""

    def __init__(self, prompts: list[str] | None = None, *, synthetic_tokens: int | None = None, seed: int = 0):
        if prompts is not None and not prompts:
            raise PromptError("no prompts to send")
        self._prompts = prompts
        self._synthetic_tokens = synthetic_tokens
        self._rng = random.Random(seed)
        self._serial = itertools.count()
        self._cycle: Iterator[str] | None = itertools.cycle(prompts) if prompts else None

    def next(self) -> str:
        n = next(self._serial)
        if self._cycle is not None:
            return next(self._cycle)
        return synthetic_prompt(self._synthetic_tokens or 128, self._rng, n)

    @classmethod
    def from_options(
        cls,
        *,
        prompt: str | None = None,
        prompt_file: str | None = None,
        dataset: str | None = None,
        prompt_tokens: int = 128,
        seed: int = 0,
    ) -> PromptSource:
        if prompt is not None:
            return cls([prompt])
        if prompt_file is not None:
            text = _read(prompt_file)
            if not text.strip():
                raise PromptError(f"prompt file {prompt_file} is empty")
            return cls([text])
        if dataset is not None:
            return cls(load_dataset(dataset), seed=seed)
        return cls(synthetic_tokens=prompt_tokens, seed=seed)


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
