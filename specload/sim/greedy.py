"""The simulated model's greedy text: a pure function of the prompt and the position, with logprobs.

At temperature 0 a real model's output depends on the prompt alone: speculation must not change it,
and only numerics (a near-tie whose order flips with the batch's shape) may. The simulator plays
both, and a bug, so that ``--check-outputs`` can be tested against known answers:

- each position has a best token and a runner-up, drawn from a 64-bit hash of the sequence's *key*
  (the prompt's token ids) and the position; their margin is wide (2 to 10 nats) except at
  ``near_tie_rate`` of the positions, where it is under 0.032;
- at a near-tie the choice flips with the step's shape (batch size times tokens verified per
  sequence): never at shape 1, else on one hash bit of (key, position, shape);
- ``spec_bug_rate`` of the speculative steps that accepted drafts emit a wrong token in place of
  their last accepted draft (6 nats below the best);
- once a sequence took another token than the reference one, its key changes and the text goes on
  differently, as a real model's would.

A token is ``(vocabulary index, logprob, runner-up index, runner-up logprob)``. EOS is drawn per
position from the same hash, so it too is the same in every run.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

MASK = (1 << 64) - 1
NEAR_TIE_MARGIN = 0.032  # the widest near-tie margin (nats): well below any sensible threshold
BUG_DROP = 6.0  # a wrong token's logprob below the best token's (nats)

Token = tuple[int, float, int, float]


def mix(x: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits from any integer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def prompt_key(ids: Sequence[int]) -> int:
    """The key of a prompt: a hash of its token ids (the chat template's included)."""
    digest = hashlib.blake2b(b",".join(str(i).encode() for i in ids), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _unit(h: int) -> float:
    return (h & 0xFFFFFF) / float(1 << 24)


class Greedy:
    """One sequence's greedy continuation: ``step`` gives its next tokens, advancing the position."""

    __slots__ = ("key", "pos", "vocab", "near_tie_rate", "eos_prob")

    def __init__(self, key: int, vocab: int, *, near_tie_rate: float = 0.0, eos_prob: float = 0.0) -> None:
        self.key = key
        self.pos = 0
        self.vocab = vocab
        self.near_tie_rate = near_tie_rate
        self.eos_prob = eos_prob

    def _reference(self, pos: int) -> tuple[int, int, float, int]:
        """At ``pos``: (hash, best index, margin, runner-up index) under the current key."""
        h = mix(self.key ^ mix(pos))
        n = self.vocab
        best = h % n
        alt = (best + 1 + (h >> 20) % (n - 1)) % n
        if _unit(h >> 32) < self.near_tie_rate:
            margin = 0.001 + NEAR_TIE_MARGIN * ((h >> 8) & 0xFF) / 256.0
        else:
            margin = 2.0 + 8.0 * ((h >> 8) & 0xFF) / 256.0
        return h, best, margin, alt

    def step(self, n: int, shape: int, *, bug: bool = False, eos: bool = True) -> tuple[list[Token], bool]:
        """The next ``n`` tokens of a step whose forward pass computes ``shape`` tokens, and whether the
        last is EOS (they stop there; ``eos``: the request lets EOS end it). ``bug``: the step's last
        accepted draft (its second to last token) is a wrong one."""
        out: list[Token] = []
        for i in range(n):
            pos = self.pos
            h, best, margin, alt = self._reference(pos)
            lp = -math.log1p(math.exp(-margin)) - 0.0005  # the other tokens share a little mass
            if bug and i == n - 2:
                wrong = (best + 1 + (h >> 40) % (self.vocab - 1)) % self.vocab
                out.append((wrong, round(lp - BUG_DROP, 4), best, round(lp, 4)))
                self.key = mix(self.key ^ mix(pos) ^ wrong ^ 0xB06)
            elif margin < 0.05 and shape > 1 and mix(self.key ^ mix(pos) ^ mix(shape)) & 1:
                # the runner-up wins under this shape's numerics, by a hair
                out.append((alt, round(lp - margin / 2, 4), best, round(lp - margin, 4)))
                self.key = mix(self.key ^ mix(pos) ^ alt ^ 0xF11)
            else:
                out.append((best, round(lp, 4), alt, round(lp - margin, 4)))
            self.pos = pos + 1
            if eos and self.eos_prob > 0.0 and _unit(mix(self.key ^ mix(pos) ^ 0xE05)) < self.eos_prob:
                return out, True
        return out, False
