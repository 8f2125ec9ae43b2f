"""What a level was judged to be while it ran: its primary figure with an interval and, with
``--baseline``, the ratio to the baseline's level and the verdict. Plain data kept in the level's
summary, so the headless line, the table, the TUI and the record's level line all show it.

The live judge (``stats/live_judge.py``) makes these; readers of a record get them back with
``from_record``. ``report`` does not read them: it recomputes every figure from the requests.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    verdict: str | None = None  # better, worse, no_difference, insufficient (not decided)
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
