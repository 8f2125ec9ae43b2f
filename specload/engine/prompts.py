"""Prompt sources: synthetic prompts of N tokens *as the server counts them*, a fixed text, a text file,
a dataset (``datasets.py``) or a trace (``trace.py``); the runner takes the next ``Prompt`` per request.

Synthetic prompts are built from a fixed vocabulary (``words.py``) under a ``TokenModel`` that
calibration fits to the server's own tokenizer (``calibrate.py``), since prefill time and KV use
follow the server's count, not a guess. Each prompt starts differently (an RNG keyed by the seed, a per-run nonce and the
request's number) so no prefix cache serves one from another, unless ``--shared-prefix-tokens`` asks.
``--check-outputs`` (``identify``) wants the same prompts in every run with the seed and at every
level, so that answers compare prompt by prompt: the nonce is left out (the session resets the
server's cache before each level instead), ``restart`` begins the sequence again for each level, and
each prompt carries its identity (``Prompt.ident``: "synthetic:s0:17", a dataset's row "builtin:42")
and a short hash of its text.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specload.engine.datasets import Conversation, Dataset, PromptError, load_dataset, read_text
from specload.engine.words import OPENING, KeyedBytes, TokenModel, fill_words, synthetic_text
from specload.plan import Lengths, ThinkTime

if TYPE_CHECKING:
    from specload.engine.trace import Trace

__all__ = ["Prompt", "PromptError", "PromptSource"]

@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    tokens_requested: int | None = None  # synthetic: the length asked for, as the server counts
    max_tokens: int | None = None  # a drawn or reference output length (None: the run's --max-tokens)
    category: str | None = None  # a dataset row's category (the built-in set's: chat, coding, ...)
    system: str | None = None  # a dataset row's system message, sent before the text
    ident: tuple[str, str] | None = None  # --check-outputs: (its identity, a hash of its text)

    def body(self) -> str | list[dict]:
        """What the client sends: the text, or with a system message the chat's messages."""
        if self.system is None:
            return self.text
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.text}]


@dataclass(frozen=True, slots=True)
class ConversationPrompt:
    """``--multi-turn``: one dataset row's user turns, to be sent in order in one session."""

    number: int  # the run's n-th conversation, from 1
    turns: tuple[str, ...]
    category: str | None = None
    system: str | None = None
    max_tokens: int | None = None  # a drawn output length, for each turn (None: --max-tokens)
    ident: str | None = None  # --check-outputs: the dataset row ("builtin:42"); each turn adds ":t2"


def prompt_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def output_rule(ignore_eos: bool, max_tokens: int, output_len: str = "max-tokens", drawn: Lengths | None = None) -> str:
    """How long the answers are, in words for the run's start and its record: a comparison of
    speculative decoding should see natural stops, since forcing a model past its end of text
    changes what the draft is asked to guess."""
    if output_len == "dataset":
        return f"the dataset's reference lengths with ignore_eos (--max-tokens {max_tokens} where a row has none)"
    cap = drawn.spec if drawn is not None else str(max_tokens)
    return f"ignore_eos, {cap} tokens each (--max-tokens)" if ignore_eos else f"natural stops (EOS), capped at {cap} tokens (--max-tokens)"


class PromptSource:
    """An endless iterator of prompts."""

    def __init__(
        self,
        prompts: list[str] | None = None,
        *,
        dataset: Dataset | None = None,
        trace: Trace | None = None,
        block_tokens: int = 512,
        synthetic_tokens: int | Lengths | None = None,
        output_lengths: Lengths | None = None,
        output_len: str = "max-tokens",
        shared_prefix_tokens: int = 0,
        seed: int = 0,
        nonce: str | None = None,
        multi_turn: bool = False,
        think_time: str = "0",
        identify: bool = False,
    ) -> None:
        if prompts is not None and not prompts:
            raise PromptError("no prompts to send")
        self.dataset = dataset
        self.trace = trace  # a replayed trace: its rows' lengths and shared blocks, in order
        if trace is not None:
            from specload.engine.trace import BlockTexts

            self._blocks = BlockTexts(seed, nonce or "", block_tokens)
        convs: list[Conversation] | None = (
            list(dataset.conversations) if dataset is not None
            else [Conversation((p,)) for p in prompts] if prompts is not None else None)
        if isinstance(synthetic_tokens, int):
            synthetic_tokens = Lengths("fixed", (synthetic_tokens,))
        self.lengths: Lengths | None = synthetic_tokens if convs is None and trace is None else None
        if convs is None and trace is None and self.lengths is None:
            self.lengths = Lengths("fixed", (128,))
        self.output_lengths = output_lengths if output_lengths is not None and not output_lengths.fixed else None
        self.output_len = output_len
        self.shared_prefix_tokens = shared_prefix_tokens
        self.seed = seed
        # distinct prompts in every run: without it a rerun with the same seed hits a prefix cache
        # (--check-outputs wants the same ones, and resets the cache)
        self.identify = identify
        self.nonce = nonce if nonce is not None else "" if identify else os.urandom(4).hex()
        if trace is not None:
            self._blocks.nonce = self.nonce
        self._rng = random.Random(seed)  # lengths
        self._serial = itertools.count()
        self.sent = 0  # prompts handed out (a dataset's repeat once this passes its rows)
        # --multi-turn: the rows of two or more user turns, each sent turn by turn (next_conversation);
        # otherwise a row is sent as its first turn
        self.multi_turn = multi_turn
        self.think = ThinkTime.parse(think_time)
        self._think_rng = random.Random(f"{seed}:think-time")
        self._index = list(range(len(convs or ())))  # each conversation's row in the dataset
        if multi_turn and convs is not None:
            self._index = [i for i, c in enumerate(convs) if len(c.turns) > 1]
            convs = [convs[i] for i in self._index]
            if not convs:
                raise PromptError("--multi-turn: the dataset has no row of two or more user turns")
        self.rows = len(convs) if convs else 0
        self._convs = convs
        self._last = 0  # the serial of the prompt last given
        self._cycle: Iterator[Conversation] | None = itertools.cycle(convs) if convs else None
        self.model = TokenModel()
        self._prefix = ""
        self._prefix_tokens = 0.0
        self.output = ""  # how long the answers are (output_rule), set by from_options
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
            words = fill_words(rng, self.shared_prefix_tokens - model.opening, model)
            self._prefix = OPENING + "".join(" " + w for w in words)
            self._prefix_tokens = float(self.shared_prefix_tokens)

    def text_of(self, n_tokens: int, serial: int) -> str:
        rng = KeyedBytes(f"{self.seed}:{self.nonce}:{serial}")
        return synthetic_text(n_tokens, self.model, rng, self._prefix, self._prefix_tokens)

    def restart(self) -> None:
        """Begin the sequence again (``--check-outputs``: each level sends the same prompts)."""
        self._rng = random.Random(self.seed)
        self._serial = itertools.count()
        self._cycle = itertools.cycle(self._convs) if self._convs else None

    def next(self) -> Prompt:
        prompt = self._next()
        return replace(prompt, ident=(self._ident(), prompt_hash(prompt.text))) if self.identify else prompt

    def _ident(self) -> str:
        return self._ident_of(self._last)

    def _ident_of(self, n: int) -> str:
        if self._convs:
            name = self.dataset.name if self.dataset is not None else "text"
            return f"{name}:{self._index[n % len(self._convs)]}"
        if self.trace is not None:
            return f"trace:{n % len(self.trace.rows)}"
        return f"synthetic:s{self.seed}:{n}"

    def _next(self) -> Prompt:
        n = self._last = next(self._serial)
        self.sent = max(self.sent, n + 1)  # per level, when each level begins again (--check-outputs)
        max_tokens = self.output_lengths.draw(self._rng) if self.output_lengths is not None else None
        if self._cycle is not None:
            conv = next(self._cycle)
            if self.output_len == "dataset" and conv.output_tokens is not None:
                max_tokens = conv.output_tokens
            return Prompt(conv.turns[0], None, max_tokens, conv.category, conv.system)
        if self.trace is not None:
            row = self.trace.rows[n % len(self.trace.rows)]
            return Prompt(self._blocks.prompt(row, self.model), row.input_length, row.output_length)
        assert self.lengths is not None
        want = self.lengths.draw(self._rng)
        return Prompt(self.text_of(want, n), want, max_tokens)

    def next_conversation(self) -> ConversationPrompt:
        """``--multi-turn``: the next conversation to send turn by turn."""
        assert self._cycle is not None and self.multi_turn
        n = next(self._serial)
        self.sent = n + 1
        conv = next(self._cycle)
        max_tokens = self.output_lengths.draw(self._rng) if self.output_lengths is not None else None
        ident = self._ident_of(n) if self.identify else None
        return ConversationPrompt(n + 1, conv.turns, conv.category, conv.system, max_tokens, ident)

    def think_s(self) -> float:
        """Seconds to wait before a conversation's next turn (``--think-time``)."""
        return self.think.draw(self._think_rng)

    def summary(self) -> str:
        """One line for the start of a run: what is sent and how long the answers are."""
        ds = self.dataset
        if self.trace is not None:
            t = self.trace.describe(block_tokens=self._blocks.block_tokens)
            what = (f"trace {t['name']} ({t['rows']:,} requests over {t['span_s']:,.1f} s, {t['distinct_blocks']:,} "
                    f"distinct blocks of {t['block_tokens']} tokens in {t['blocks']:,})")
        elif ds is None:
            what = "synthetic" if self.synthetic else "a fixed text"
        else:
            info = ds.describe()
            n_cats = len(info.get("categories") or ())
            cats = f"{n_cats} categor{'y' if n_cats == 1 else 'ies'}, " if n_cats else ""
            what = (f"{ds.name} ({cats}{info['rows']:,} prompt{'' if info['rows'] == 1 else 's'}"
                    + ("" if ds.format == "builtin" else f", {ds.format}"))
            if self.multi_turn:
                lens = [len(c.turns) for c in ds.conversations if len(c.turns) > 1]
                pause = f", {self.think.spec} s between turns" if self.think.values != (0.0,) else ""
                what += (f"; {len(lens)} conversations of {min(lens)}-{max(lens)} user turns sent turn by turn, "
                         f"the server's replies in their history{pause} (--multi-turn)")
            elif info["multi_turn"]:
                n = info["multi_turn"]
                what += f"; {n} multi-turn row{'' if n == 1 else 's'} sent as {'its' if n == 1 else 'their'} first turn"
            what += ")"
        return f"prompts: {what} · answers: {self.output}"

    def describe(self) -> dict:
        d: dict = {"nonce": self.nonce}
        if self.identify:
            d["identified"] = "the same prompts at every level and in every run with the seed (--check-outputs)"
        if self.trace is not None:
            d["trace"] = self.trace.describe(block_tokens=self._blocks.block_tokens)
            d["model"] = self.model.describe()
        elif self.synthetic and self.lengths is not None:
            d["prompt_tokens"] = self.lengths.spec
            d["shared_prefix_tokens"] = self.shared_prefix_tokens
            d["model"] = self.model.describe()
        if self.dataset is not None:
            d["dataset"] = self.dataset.describe()
        if self.multi_turn:
            d["multi_turn"] = {"conversations": self.rows, "think_time": self.think.spec}
        if self.output_lengths is not None:
            d["max_tokens"] = self.output_lengths.spec
        if self.output:
            d["output"] = self.output
        return d

    @classmethod
    def from_options(
        cls,
        *,
        prompt: str | None = None,
        prompt_file: str | None = None,
        dataset: str | None = None,
        dataset_format: str = "auto",
        trace: str | None = None,
        trace_block_tokens: int = 512,
        prompt_tokens: int | Lengths = 128,
        output_lengths: Lengths | None = None,
        output_len: str = "max-tokens",
        ignore_eos: bool = False,
        max_tokens: int = 256,
        shared_prefix_tokens: int = 0,
        seed: int = 0,
        nonce: str | None = None,
        multi_turn: bool = False,
        think_time: str = "0",
        identify: bool = False,
    ) -> PromptSource:
        kw: dict = {"output_lengths": output_lengths, "seed": seed, "nonce": nonce, "identify": identify}
        if prompt is not None:
            src = cls([prompt], **kw)
        elif prompt_file is not None:
            text = read_text(prompt_file)
            if not text.strip():
                raise PromptError(f"prompt file {prompt_file} is empty")
            src = cls([text], **kw)
        elif dataset is not None:
            src = cls(dataset=load_dataset(dataset, dataset_format), output_len=output_len, multi_turn=multi_turn,
                      think_time=think_time, **kw)
        elif trace is not None:
            from specload.engine.trace import read_trace

            src = cls(trace=read_trace(trace, trace_block_tokens), block_tokens=trace_block_tokens, **kw)
            src.output = "the trace's output lengths with ignore_eos"
            return src
        else:
            src = cls(synthetic_tokens=prompt_tokens, shared_prefix_tokens=shared_prefix_tokens, **kw)
        src.output = output_rule(ignore_eos, max_tokens, output_len if dataset is not None else "max-tokens",
                                 src.output_lengths)
        return src
