"""What a level was judged to be while it ran: its primary figure with an interval and, with
``--baseline``, the ratio to the baseline's level and the verdict. Plain data kept in the level's
summary, so the headless line, the table, the TUI and the record's level line all show it.

The live judge (``stats/live_judge.py``) makes these; readers of a record get them back with
``from_record``. ``report`` does not read them: it recomputes every figure from the requests.

Here too is the one rule of when a comparison may give a verdict at all (``unsound_reason``), for
``report A B``, the live ``--baseline`` and the sweep alike: not when the two runs' workloads differ
(``workload_differences``: the prompts, their lengths, the answers' lengths and how they end, the
sampling), and not at a level where either side's figures are not the server's (its client was
saturated or starved, or the requests measured differ in length: ``UNSOUND_FLAGS``). Such a level
reads ``unsound``, never ``better`` or ``worse``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# what two runs' workloads must share (RunDescription.request_shape's keys) for their figures to
# compare; the model's name may differ (an EAGLE-3 deployment is often served under another name)
WORKLOAD_KEYS = ("api", "prompt_source", "dataset", "prompt_tokens", "shared_prefix_tokens", "max_tokens",
                 "output_len", "ignore_eos", "temperature", "rate")
# level flags (report/compare.py) that make that level's comparison unsound
UNSOUND_FLAGS = frozenset({"client_saturated", "client_starved", "shape"})


# token lengths within this share of each other are the same workload (the README's 5 %): a peer tool
# reports the mean its prompts had, specload the length it asked for (126 vs 128 is not a difference)
LENGTH_KEYS = ("prompt_tokens", "shared_prefix_tokens")
LENGTH_TOLERANCE = 0.05


def workload_differences(base: dict, other: dict) -> list[str]:
    """How two runs' workloads differ (``key a vs b``), in ``WORKLOAD_KEYS`` order; a key that either
    side's source does not know (None: a peer tool's file) is not compared; lengths within
    ``LENGTH_TOLERANCE`` are the same."""
    def same(k: str, a: object, b: object) -> bool:
        if k in LENGTH_KEYS and isinstance(a, int | float) and isinstance(b, int | float) and a and b:
            return abs(b / a - 1) <= LENGTH_TOLERANCE
        return a == b

    return [f"{k} {base[k]!r} vs {other[k]!r}" for k in WORKLOAD_KEYS
            if base.get(k) is not None and other.get(k) is not None and not same(k, base[k], other[k])]


def workload_warnings(shape: dict, speculative: bool) -> list[str]:
    """What makes a measurement of speculative decoding on this workload (a ``request_shape``) say
    little about the text people send, one line each; none when no speculation was seen."""
    if not speculative:
        return []
    what = "speculative decoding measured"
    out = []
    source = str(shape.get("prompt_source") or "")
    if source in ("synthetic", "trace") or source.startswith("random"):
        out.append(f"{what} on synthetic prompts (shuffled words, on which a draft model's guesses fail): "
                   "use --dataset builtin or prompts of your own")
    if shape.get("ignore_eos"):
        out.append(f"{what} with ignore_eos (answers forced past their natural end, where drafts fail): "
                   "leave out --ignore-eos and cap the answers with --max-tokens")
    if shape.get("api") in ("completions", "generate"):
        out.append(f"{what} without the chat template (the {shape['api']} API sends raw text, not a "
                   "conversation): use --api chat")
    return out


def unsound_reason(differences: Sequence[str], level_flags: Iterable[str] = ()) -> str | None:
    """Why a level's comparison cannot give a verdict (None: it can): the workloads differ, or the
    level has a flag of ``UNSOUND_FLAGS`` (``kind: detail`` strings or bare kinds)."""
    if differences:
        return "the workloads differ: " + ", ".join(differences)
    flagged = [f for f in level_flags if f.split(":", 1)[0] in UNSOUND_FLAGS]
    return ("not the server's figures: " + "; ".join(flagged)) if flagged else None


@dataclass(frozen=True, slots=True)
class LevelJudgement:
    metric: str  # the primary metric: throughput, per_request_tok_s, tpot_p50, ...
    value: float | None
    ci_low: float | None
    ci_high: float | None
    half_width_pct: float | None  # of the 95% interval, for --target-ci
    # with --baseline: the baseline level's figure, live / baseline with its sequential interval, verdict
    baseline: float | None = None
    ratio: float | None = None
    ratio_ci_low: float | None = None
    ratio_ci_high: float | None = None
    verdict: str | None = None  # better, worse, no_difference, insufficient (not decided), unsound
    done: str | None = None  # why the level stopped: target, decided, cap (None: its planned count)

    def as_record(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in (
            ("metric", self.metric), ("value", self.value), ("ci_low", self.ci_low), ("ci_high", self.ci_high),
            ("half_width_pct", self.half_width_pct), ("baseline", self.baseline), ("ratio", self.ratio),
            ("ratio_ci_low", self.ratio_ci_low), ("ratio_ci_high", self.ratio_ci_high), ("verdict", self.verdict),
            ("done", self.done))}

    @classmethod
    def from_record(cls, d: object) -> LevelJudgement | None:
        if not isinstance(d, dict) or not isinstance(d.get("metric"), str):
            return None
        num = lambda k: d[k] if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) else None  # noqa: E731
        txt = lambda k: d[k] if isinstance(d.get(k), str) else None  # noqa: E731
        return cls(d["metric"], num("value"), num("ci_low"), num("ci_high"), num("half_width_pct"), num("baseline"),
                   num("ratio"), num("ratio_ci_low"), num("ratio_ci_high"), txt("verdict"), txt("done"))
