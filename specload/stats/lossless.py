"""Is it lossless? Two runs' answers to the same prompts, compared prompt by prompt (``--check-outputs``).

At temperature 0 a faster configuration (speculative decoding, overlap scheduling) must produce the
baseline's tokens. Where it does not, the first position that differs says what happened: when
either run's margin between its chosen token and the runner-up is below ``near_tie`` nats there, the
two best tokens were all but tied and batch-dependent numerics may flip them; otherwise the model
emitted a token it did not prefer by a wide margin: a bug. A level's verdict is ``lossless``,
``numerics`` (every divergence a near-tie) or ``diverges``; without logprobs no divergence can be
shown to be a near-tie. Answers are compared by token where both runs recorded every token, else by
text (``first_divergence``); they pair up by level, prompt and its n-th appearance there
(``by_level``), and a pair whose prompt texts differ counts as ``mismatched``. The share identical
carries a Wilson score interval, honest at 0 or n out of n.

``compare_answers`` is the one entry point for two runs (``report A B``, the sweep);
``self_divergence`` is the noise floor; ``LiveOutputs`` does the same as records arrive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specload.datatypes import RequestRecord

NEAR_TIE_NATS = 0.2
EXAMPLES = 3  # divergent prompts kept per level, to show side by side
EXCERPT_CHARS = 160
LOSSLESS, NUMERICS, DIVERGES = "lossless", "numerics", "diverges"
Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of the share k/n (0 <= k <= n, n > 0)."""
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


@dataclass(frozen=True, slots=True)
class Answer:
    """One request's answer as a comparison needs it (from a record line or a live record)."""

    level_index: int
    concurrency: int
    prompt: str
    sha: str | None
    text: str
    chars: int
    tokens: tuple[str, ...] | None = None
    margins: tuple[float | None, ...] | None = None
    token_count: int = 0
    capped: bool = False
    complete: bool = True  # the tokens are the server's, each with its logprob (else: compared by text)

    @classmethod
    def from_line(cls, d: dict) -> Answer | None:
        """From a record's request line; None when it has no answer or one of the wrong shape (a
        record from elsewhere is hostile input: nothing of another type gets past here)."""
        out, prompt = d.get("output"), d.get("prompt_id")
        if not isinstance(out, dict) or not isinstance(prompt, str) or d.get("warmup") or not d.get("ok"):
            return None
        text, chars, idx, conc = out.get("text"), out.get("chars"), d.get("level_index"), d.get("level", 0)
        if not isinstance(text, str) or type(chars) is not int or type(idx) is not int or type(conc) is not int:
            return None
        tokens, margins = out.get("tokens"), out.get("margins")
        if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
            ok_m = isinstance(margins, list) and len(margins) == len(tokens) and all(
                m is None or (isinstance(m, (int, float)) and not isinstance(m, bool)) for m in margins)
            toks: tuple[str, ...] | None = tuple(tokens)
            mg = tuple(None if m is None else float(m) for m in margins) if ok_m else None  # type: ignore[union-attr]
        else:
            toks, mg = None, None
        count = out.get("token_count")
        sha = d.get("prompt_sha")
        return cls(idx, conc, prompt, sha if isinstance(sha, str) else None, text, chars, toks, mg,
                   count if type(count) is int else len(toks or ()), out.get("capped") is True,
                   not out.get("unscored"))

    @classmethod
    def from_record(cls, rec: RequestRecord) -> Answer | None:
        o = rec.output
        if o is None or rec.prompt_id is None or rec.warmup or not rec.ok:
            return None
        return cls(rec.level_index, rec.level, rec.prompt_id, rec.prompt_sha, o.text, o.chars, o.tokens, o.margins,
                   o.token_count, o.capped, not o.unscored)


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where two answers to one prompt part: the first position that differs (a token index ``by``
    token, a character index by text), the margins there (None: not known), both texts from there."""

    prompt: str
    concurrency: int
    position: int
    by: str  # "token" or "text"
    near_tie: bool
    margin_a: float | None
    margin_b: float | None
    before: str  # the text both share just before the divergence
    a: str  # each answer from the divergence on (an excerpt)
    b: str

    @property
    def margins_known(self) -> bool:
        return self.margin_a is not None or self.margin_b is not None

    def as_dict(self) -> dict:
        return {"prompt": self.prompt, "concurrency": self.concurrency, "position": self.position, "by": self.by,
                "near_tie": self.near_tie, "margin_a": self.margin_a, "margin_b": self.margin_b,
                "before": self.before, "a": self.a, "b": self.b}


def _margin(ans: Answer, pos: int) -> float | None:
    m = ans.margins
    return m[pos] if m is not None and pos < len(m) else None


def _offset(ans: Answer, pos: int) -> int:
    """The character offset in the text where token ``pos`` starts."""
    return min(len(ans.text), sum(len(t) for t in (ans.tokens or ())[:pos]))


def _margin_at_char(ans: Answer, c: int) -> float | None:
    """The margin of the token holding character ``c`` (answers compared by text), where known:
    llama-server sends no logprobs for the draft tokens its speculation accepted."""
    if ans.tokens is None:
        return None
    end = 0
    for i, t in enumerate(ans.tokens):
        end += len(t)
        if c < end:
            return _margin(ans, i)
    return None


def first_divergence(a: Answer, b: Answer, near_tie: float = NEAR_TIE_NATS) -> Divergence | None:
    """None when the answers are the same, else where they part and whether it is a near-tie."""
    if a.tokens is not None and b.tokens is not None and a.complete and b.complete:
        ta, tb = a.tokens, b.tokens
        n = min(len(ta), len(tb))
        pos = next((i for i in range(n) if ta[i] != tb[i]), n)
        if pos == n and len(ta) == len(tb) and a.token_count == b.token_count and not (a.capped ^ b.capped):
            return None
        by, ca, cb = "token", _offset(a, pos), _offset(b, pos)
        ma, mb = _margin(a, pos), _margin(b, pos)
    else:
        xa, xb = a.text, b.text
        n = min(len(xa), len(xb))
        pos = next((i for i in range(n) if xa[i] != xb[i]), n)
        if pos == n and len(xa) == len(xb) and a.chars == b.chars:
            return None
        by, ca, cb, ma, mb = "text", pos, pos, _margin_at_char(a, pos), _margin_at_char(b, pos)
    tie = any(m is not None and abs(m) < near_tie for m in (ma, mb))
    start = max(0, ca - 40)
    return Divergence(a.prompt, a.concurrency, pos, by, tie, ma, mb, a.text[start:ca],
                      a.text[ca:ca + EXCERPT_CHARS], b.text[cb:cb + EXCERPT_CHARS])


@dataclass(frozen=True)
class OutputsLevel:
    """One level's answers compared: counts, first-divergence positions, the first few divergences."""

    concurrency: int
    occurrence: int
    compared: int = 0
    identical: int = 0
    near_tie: int = 0
    divergent: int = 0  # divergences that are not near-ties
    mismatched: int = 0  # prompt texts that differ between the runs: not compared
    unmargined: int = 0  # divergences with no margin known (no logprobs)
    by: tuple[str, ...] = ()  # how the answers were compared: "token", "text"
    positions: tuple[int, ...] = ()  # the first-divergence position of each divergence
    examples: tuple[Divergence, ...] = field(default=(), repr=False)
    reference: int | None = None  # self-divergence: the concurrency compared against

    @property
    def key(self) -> str:
        return f"C={self.concurrency}" + (f"#{self.occurrence + 1}" if self.occurrence else "")

    @property
    def verdict(self) -> str | None:
        if not self.compared:
            return None
        return LOSSLESS if self.identical == self.compared else NUMERICS if not self.divergent else DIVERGES

    @property
    def share(self) -> tuple[float, float, float] | None:
        """(share identical, its 95% Wilson interval) or None when nothing was compared."""
        if not self.compared:
            return None
        return (self.identical / self.compared, *wilson(self.identical, self.compared))

    def as_dict(self) -> dict:
        d: dict = {"compared": self.compared, "identical": self.identical, "near_tie": self.near_tie,
                   "divergent": self.divergent, "verdict": self.verdict}
        sh = self.share
        if sh is not None:
            d["identical_share"] = [round(x, 4) for x in sh]
        if self.mismatched:
            d["mismatched"] = self.mismatched
        if self.unmargined:
            d["without_margins"] = self.unmargined
        d["by"] = list(self.by)
        if self.positions:
            d["first_divergence"] = position_summary(self.positions)
        if self.reference is not None:
            d["reference_concurrency"] = self.reference
        if self.examples:
            d["examples"] = [x.as_dict() for x in self.examples]
        return d


def outputs_line(lv: OutputsLevel) -> str:
    """``57/58 identical (98.3% [90.8, 99.7]) · 1 near-tie · numerics``: a level (or a run) in words."""
    sh = lv.share
    if sh is None:
        return "no answers compared" + (f" ({lv.mismatched} prompts differ between the runs)" if lv.mismatched else "")
    parts = [f"{lv.identical}/{lv.compared} identical ({100 * sh[0]:.1f}% [{100 * sh[1]:.1f}, {100 * sh[2]:.1f}])"]
    if lv.near_tie:
        parts.append(f"{lv.near_tie} near-tie")
    if lv.divergent:
        parts.append(f"{lv.divergent} divergent")
    parts.append(lv.verdict or "")
    return " · ".join(parts)


def _m(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "?"


def divergence_text(d: dict, *, a: str = "baseline", b: str = "this run") -> str:
    """A divergence (``Divergence.as_dict``, a ``divergence`` event's value) in three lines: where,
    and both answers from there on."""
    unit = "token" if d.get("by") == "token" else "character"
    known = d.get("margin_a") is not None or d.get("margin_b") is not None
    why = (f"margins {_m(d.get('margin_a'))} / {_m(d.get('margin_b'))} nats: "
           + ("a near-tie" if d.get("near_tie") else "not a near-tie")) if known else "no logprobs: a near-tie cannot be told"
    before = str(d.get("before", ""))[-30:]
    return (f"C={d.get('concurrency')} · prompt {d.get('prompt')} · {unit} {d.get('position')} ({why})\n"
            f"{a}: …{before!r} + {str(d.get('a', ''))[:80]!r}\n{b}: …{before!r} + {str(d.get('b', ''))[:80]!r}")


def position_summary(positions: Sequence[int]) -> dict:
    """The first-divergence positions: quantiles and counts in power-of-two bins ("0-1", "2-3", ...)."""
    s = sorted(positions)
    q = lambda f: s[min(len(s) - 1, int(f * len(s)))]  # noqa: E731
    bins: dict[str, int] = {}
    for p in s:
        lo = 0 if p < 2 else 1 << (p.bit_length() - 1)
        hi = 1 if p < 2 else 2 * lo - 1
        bins[f"{lo}-{hi}"] = bins.get(f"{lo}-{hi}", 0) + 1
    return {"min": s[0], "p25": q(0.25), "p50": q(0.5), "p75": q(0.75), "max": s[-1], "bins": bins}


def total(levels: Iterable[OutputsLevel]) -> OutputsLevel:
    """The levels pooled (the run's overall figures)."""
    acc = OutputsLevel(0, 0)
    for lv in levels:
        acc = OutputsLevel(
            0, 0, acc.compared + lv.compared, acc.identical + lv.identical, acc.near_tie + lv.near_tie,
            acc.divergent + lv.divergent, acc.mismatched + lv.mismatched, acc.unmargined + lv.unmargined,
            tuple(dict.fromkeys(acc.by + lv.by)), acc.positions + lv.positions, acc.examples + lv.examples)
    return acc


class _Tally:
    """A level's comparison as pairs come in."""

    def __init__(self, concurrency: int, occurrence: int, near_tie: float, reference: int | None = None) -> None:
        self.concurrency, self.occurrence, self.near_tie, self.reference = concurrency, occurrence, near_tie, reference
        self.compared = self.identical = self.ties = self.divergent = self.mismatched = self.unmargined = 0
        self.by: dict[str, None] = {}
        self.positions: list[int] = []
        self.examples: list[Divergence] = []

    def add(self, a: Answer, b: Answer) -> Divergence | None:
        if a.sha is not None and b.sha is not None and a.sha != b.sha:
            self.mismatched += 1
            return None
        self.compared += 1
        self.by["token" if a.tokens is not None and b.tokens is not None and a.complete and b.complete
                else "text"] = None
        d = first_divergence(a, b, self.near_tie)
        if d is None:
            self.identical += 1
            return None
        self.positions.append(d.position)
        self.unmargined += not d.margins_known
        if d.near_tie:
            self.ties += 1
        else:
            self.divergent += 1
        # the first few, a divergence that is not a near-tie before any near-tie
        if len(self.examples) < EXAMPLES:
            self.examples.append(d)
        elif not d.near_tie and all(x.near_tie for x in self.examples[-1:]):
            self.examples[-1] = d
        return d

    def result(self) -> OutputsLevel:
        return OutputsLevel(self.concurrency, self.occurrence, self.compared, self.identical, self.ties,
                            self.divergent, self.mismatched, self.unmargined, tuple(self.by), tuple(self.positions),
                            tuple(self.examples), self.reference)


_Key = tuple[int, int]  # (concurrency, occurrence)


def by_level(answers: Iterable[Answer]) -> dict[_Key, dict[tuple[str, int], Answer]]:
    """A run's answers keyed by level (its concurrency and how many levels at that concurrency came
    before it) and by (prompt, n-th appearance in the level), in the order they were sent."""
    levels: dict[int, list[Answer]] = {}
    conc: dict[int, int] = {}
    for ans in answers:
        levels.setdefault(ans.level_index, []).append(ans)
        conc.setdefault(ans.level_index, ans.concurrency)
    seen: dict[int, int] = {}
    out: dict[_Key, dict[tuple[str, int], Answer]] = {}
    for idx in sorted(levels):
        c = conc[idx]
        key = (c, seen.get(c, 0))
        seen[c] = key[1] + 1
        count: dict[str, int] = {}
        table = out[key] = {}
        for ans in levels[idx]:
            k = count.get(ans.prompt, 0)
            count[ans.prompt] = k + 1
            table[(ans.prompt, k)] = ans
    return out


def compare_answers(a: Iterable[Answer], b: Iterable[Answer], *, near_tie: float = NEAR_TIE_NATS) -> tuple[OutputsLevel, ...]:
    """B's answers against A's, level by level (the levels both have, in A's order)."""
    la, lb = by_level(a), by_level(b)
    out = []
    for key in sorted(la.keys() & lb.keys()):
        tally = _Tally(*key, near_tie)
        ta, tb = la[key], lb[key]
        for pk, ans in ta.items():  # in the order A sent them
            if pk in tb:
                tally.add(ans, tb[pk])
        out.append(tally.result())
    return tuple(out)


def self_divergence(answers: Iterable[Answer], *, near_tie: float = NEAR_TIE_NATS) -> tuple[OutputsLevel, ...]:
    """The noise floor: each level's answers against the same prompts' at the run's first C=1 level
    (or its lowest concurrency when it has none). Empty when the run has one level."""
    levels = by_level(answers)
    if len(levels) < 2:
        return ()
    ref_key = min(levels, key=lambda k: (k[0] != 1, k[0], k[1]))
    ref = {(p, n): ans for (p, n), ans in levels[ref_key].items()}
    out = []
    for key in sorted(levels):
        if key == ref_key:
            continue
        tally = _Tally(*key, near_tie, reference=ref_key[0])
        for pk, ans in levels[key].items():
            if pk in ref:
                tally.add(ref[pk], ans)
        out.append(tally.result())
    return tuple(out)


# ------------------------------------------------------------------------------------------ live


@dataclass(frozen=True, slots=True)
class OutputsView:
    """The outputs compared so far against the baseline, for the screen; ``share``: the share
    identical with its 95% interval."""

    compared: int
    identical: int
    near_tie: int
    divergent: int
    share: tuple[float, float, float] | None

    def text(self, *, short: bool = False) -> str:
        """``outputs 57/58 identical (98.3% [90.8,99.7]) · 1 near-tie · 1 DIVERGES``; ``short``: the
        dashboard's ``out 57/58 same · 1 tie · 1 DIVERGES``, beside the level's bar."""
        if not self.compared or self.share is None:
            return "outputs: none compared yet"
        p, lo, hi = (100 * x for x in self.share)
        parts = [f"out {self.identical}/{self.compared} same" if short else
                 f"outputs {self.identical}/{self.compared} identical ({p:.1f}% [{lo:.1f},{hi:.1f}])"]
        if self.near_tie:
            parts.append(f"{self.near_tie} {'tie' if short else 'near-tie'}")
        if self.divergent:
            parts.append(f"{self.divergent} DIVERGE{'S' if self.divergent == 1 else ''}")
        return " · ".join(parts)


class LiveOutputs:
    """Each finished request's answer against the baseline's for the same level and prompt, as the
    run goes; ``add`` returns the level's first divergence that is not a near-tie (the alert; the
    level's others are counted), else None."""

    def __init__(self, baseline: Iterable[Answer], *, near_tie: float = NEAR_TIE_NATS) -> None:
        self.baseline = by_level(baseline)
        self.near_tie = near_tie
        self._levels: dict[int, _Key] = {}  # this run's level index -> its key
        self._seen: dict[int, int] = {}
        self._counts: dict[int, dict[str, int]] = {}
        self._tallies: dict[int, _Tally] = {}
        self._alerted: set[int] = set()

    def level_started(self, index: int, concurrency: int) -> None:
        if index in self._levels:
            return
        key = (concurrency, self._seen.get(concurrency, 0))
        self._seen[concurrency] = key[1] + 1
        self._levels[index] = key
        self._tallies[index] = _Tally(*key, self.near_tie)

    def add(self, rec: RequestRecord) -> Divergence | None:
        ans = Answer.from_record(rec)
        key = self._levels.get(rec.level_index)
        if ans is None or key is None:
            return None
        counts = self._counts.setdefault(rec.level_index, {})
        k = counts.get(ans.prompt, 0)
        counts[ans.prompt] = k + 1
        base = self.baseline.get(key, {}).get((ans.prompt, k))
        if base is None:
            return None
        d = self._tallies[rec.level_index].add(base, ans)
        if d is None or d.near_tie or rec.level_index in self._alerted:
            return None
        self._alerted.add(rec.level_index)  # the others of the level are counted, not alerted
        return d

    def view(self) -> OutputsView:
        t = total(t.result() for t in self._tallies.values())
        return OutputsView(t.compared, t.identical, t.near_tie, t.divergent, t.share)

    def level(self, index: int) -> OutputsLevel | None:
        """A level's comparison so far (None: the level had no baseline level to compare with)."""
        t = self._tallies.get(index)
        return t.result() if t is not None and (t.compared or t.mismatched) else None
