"""A request trace replayed as it was recorded: Mooncake-style JSONL, its prompts and its arrivals.

Each line is one request: ``timestamp`` (ms since the trace began), ``input_length`` and
``output_length`` (tokens) and ``hash_ids``, one id per block of ``block_tokens`` prompt tokens (512 in
Mooncake's traces), the same id where two requests share that block of their prefix. Replaying it
(``--trace FILE``, ``--trace-speed X``):

- the arrivals are the timestamps, divided by the speed: ``TraceArrivals`` gives the gaps between
  them to the runner's open-loop loop, in place of its random ones;
- each prompt is built to its ``input_length`` as the server counts it (the calibrated
  ``TokenModel``, as synthetic prompts are), block by block, each block's text drawn from an RNG
  keyed by its hash id and the run's nonce: requests that share an id share that block's text, so a
  prefix cache sees the sharing the trace recorded, and nothing is shared with an earlier run;
- the output length is ``output_length``, sent with ignore_eos.

The file is read bounded and checked like a dataset (``engine/datasets.py``): a bad line is one line
naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, replace

import orjson

from specload.engine.datasets import PromptError, first_byte, read_lines, read_once
from specload.engine.load import Arrivals
from specload.engine.words import OPENING, KeyedBytes, TokenModel, fill_words
from specload.plan import LevelSpec, LoadPlan

BLOCK_TOKENS = 512
MAX_TOKENS_PER_ROW = 10_000_000
_FIELDS = ("timestamp", "input_length", "output_length")


@dataclass(frozen=True, slots=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Trace:
    path: str
    rows: tuple[TraceRow, ...]
    digest: str

    @property
    def span_s(self) -> float:
        return (self.rows[-1].timestamp_ms - self.rows[0].timestamp_ms) / 1000

    def mean_rate(self, speed: float = 1.0) -> float:
        """Requests per second over the trace's span at ``speed`` (the level's open-loop rate)."""
        return len(self.rows) / self.span_s * speed if self.span_s > 0 else float(len(self.rows))

    def describe(self, speed: float = 1.0, block_tokens: int = BLOCK_TOKENS) -> dict:
        ids = [h for r in self.rows for h in r.hash_ids]
        return {"name": self.path, "format": "mooncake", "rows": len(self.rows), "sha256": self.digest,
                "span_s": round(self.span_s, 3), "speed": speed, "block_tokens": block_tokens,
                "blocks": len(ids), "distinct_blocks": len(set(ids))}


def _whole(v: object, what: str, low: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_TOKENS_PER_ROW:
        raise ValueError(f"{what} is not a whole number from {low} to {MAX_TOKENS_PER_ROW:,}")
    return v


def _row(obj: object) -> TraceRow:
    if not isinstance(obj, dict) or any(k not in obj for k in _FIELDS):
        raise ValueError("expected a Mooncake trace row: {\"timestamp\" (ms), \"input_length\", \"output_length\", "
                         "\"hash_ids\"}")
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0 <= ts < 1e15:
        raise ValueError("'timestamp' is not a time in ms (a number of at least 0)")
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < 2**63 for h in ids):
        raise ValueError("'hash_ids' is not a list of whole numbers")
    return TraceRow(float(ts), _whole(obj["input_length"], "'input_length'", 1),
                    _whole(obj["output_length"], "'output_length'", 1), tuple(ids))


def read_trace(path: str, block_tokens: int = BLOCK_TOKENS) -> Trace:
    """A Mooncake-style JSONL trace; PromptError with one line when it cannot be replayed."""
    return read_once(path, ("trace", block_tokens), lambda: _read(path, block_tokens))


def _read(path: str, block_tokens: int) -> Trace:
    if first_byte(path, "a Mooncake trace (JSONL)") == b"[":
        raise PromptError(f"{path}: a JSON array; expected a Mooncake trace, one JSON object per line")
    rows: list[TraceRow] = []
    digest = hashlib.sha256()
    for n, line in read_lines(path):
        digest.update(line)
        if not line.strip():
            continue
        try:
            row = _row(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise PromptError(f"{path}:{n}: not valid JSON; expected a Mooncake trace row per line") from None
        except ValueError as e:
            raise PromptError(f"{path}:{n}: {e}") from None
        if rows and row.timestamp_ms < rows[-1].timestamp_ms:
            raise PromptError(f"{path}:{n}: timestamp {row.timestamp_ms:g} is before the line above's "
                              f"({rows[-1].timestamp_ms:g}): a trace is in time order")
        if len(row.hash_ids) * block_tokens < row.input_length - block_tokens:
            raise PromptError(f"{path}:{n}: {len(row.hash_ids)} hash_ids of {block_tokens} tokens cannot cover "
                              f"input_length {row.input_length} (--trace-block-tokens?)")
        rows.append(row)
    if not rows:
        raise PromptError(f"{path}: no requests in the trace")
    return Trace(path, tuple(rows), digest.hexdigest()[:16])


class TraceArrivals(Arrivals):
    """The trace's own gaps, sped up ``speed`` times, for the runner's open-loop loop; the first
    request goes at once. The rate is the trace's mean (what the level shows)."""

    def __init__(self, trace: Trace, speed: float = 1.0) -> None:
        super().__init__(trace.mean_rate(speed))
        self._times = [r.timestamp_ms for r in trace.rows]
        self._speed = speed
        self._i = 0

    def next_gap_s(self) -> float:
        i, times = self._i, self._times
        self._i += 1
        if i == 0:
            return 0.0
        if i >= len(times):
            return 1e9  # the trace is over: the level ends at its request count first
        return (times[i] - times[i - 1]) / 1000 / self._speed


class BlockTexts:
    """The text of each hash block, the same for every request that names it, drawn on demand
    (and drawn again the same if evicted: a trace may name far more blocks than are worth holding)."""

    def __init__(self, seed: int, nonce: str, block_tokens: int = BLOCK_TOKENS, keep: int = 4096) -> None:
        self.seed, self.nonce, self.block_tokens, self.keep = seed, nonce, block_tokens, keep
        self._texts: OrderedDict[tuple[int, int, int], str] = OrderedDict()

    def text(self, hash_id: int, tokens: float, model: TokenModel, first: bool) -> str:
        key = (hash_id, round(tokens), first)
        got = self._texts.get(key)
        if got is not None:
            self._texts.move_to_end(key)
            return got
        rng = KeyedBytes(f"{self.seed}:{self.nonce}:block:{hash_id}")
        if first:  # the prompt's start: the opening word, then words (as synthetic prompts begin)
            words = fill_words(rng, tokens - model.opening, model)
            text = OPENING + "".join(" " + w for w in words)
        else:
            text = "".join(" " + w for w in fill_words(rng, tokens, model))
        self._texts[key] = text
        if len(self._texts) > self.keep:
            self._texts.popitem(last=False)
        return text

    def prompt(self, row: TraceRow, model: TokenModel) -> str:
        """``row``'s prompt: its blocks in order, the first less what the server adds around the text
        (template, BOS), the last cut to what is left of ``input_length``."""
        b = self.block_tokens
        left = row.input_length - model.overhead
        ids = row.hash_ids or (-1 - row.input_length,)  # no ids: one block of its own
        parts = []
        for i, h in enumerate(ids):
            if left <= 0:
                break
            size = min(float(b) - (model.overhead if i == 0 else 0.0), left)
            if i == len(ids) - 1:
                size = left  # the last block takes the rest (ids may cover a little less)
            parts.append(self.text(h, size, model, i == 0))
            left -= size
        return "".join(parts)


def trace_plan(plan: LoadPlan, trace: Trace, speed: float = 1.0) -> LoadPlan:
    """The run as the trace's replay: one level of its requests, open loop at its own times, the
    ramp's highest concurrency as the cap on requests in flight (warm-up and bounds kept)."""
    cap = max((lv.concurrency for lv in plan.levels), default=1)
    return replace(plan, levels=(LevelSpec(cap, requests=len(trace.rows)),), rate=trace.mean_rate(speed))
