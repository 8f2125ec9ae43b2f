"""Per-level summaries: the numbers of one concurrency level, computed the same way everywhere.

The live run, the headless table, the record's ``level`` lines and ``specload report`` all call
``summarize_level`` on the same columns, so the numbers cannot drift apart. Definitions (README):
throughput = output tokens of the level's successful requests / the level's wall time (first request
sent to last request ended); per-request tok/s = mean over successful requests of tokens / E2E.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from specload.records import RequestRecord
from specload.stats.histogram import LogHistogram
from specload.stats.judgement import LevelJudgement
from specload.stats.quantiles import percentiles
from specload.stats.slo import LevelGoodput


@dataclass(frozen=True, slots=True)
class LevelSummary:
    level_index: int
    concurrency: int
    requests: int
    ok: int
    errors: tuple[tuple[str, int], ...]  # (kind, count), most frequent first
    output_tokens: int
    tokens_estimated: bool
    wall_s: float
    throughput_tok_s: float
    per_request_tok_s: float
    req_s: float
    ttft_ms_avg: float | None
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    itl_ms_p50: float | None
    itl_ms_p99: float | None
    e2e_s_avg: float | None
    e2e_s_p50: float | None
    e2e_s_p99: float | None
    # open loop: the offered request rate (req/s) of the level; None in a closed loop
    rate: float | None = None
    # the level against the --slo objectives (stats/goodput.py); None without objectives
    goodput: LevelGoodput | None = None
    # --target-ci / --baseline: the primary figure's interval and the live verdict (stats/judgement.py)
    judged: LevelJudgement | None = None

    def as_record(self) -> dict:
        d = {
            "level_index": self.level_index,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "ok": self.ok,
            "errors": dict(self.errors),
            "output_tokens": self.output_tokens,
            "tokens_estimated": self.tokens_estimated,
            "wall_s": _r(self.wall_s),
            "throughput_tok_s": _r(self.throughput_tok_s),
            "per_request_tok_s": _r(self.per_request_tok_s),
            "req_s": _r(self.req_s),
            "ttft_ms_avg": _r(self.ttft_ms_avg),
            "ttft_ms_p50": _r(self.ttft_ms_p50),
            "ttft_ms_p99": _r(self.ttft_ms_p99),
            "tpot_ms_p50": _r(self.tpot_ms_p50),
            "tpot_ms_p99": _r(self.tpot_ms_p99),
            "itl_ms_p50": _r(self.itl_ms_p50),
            "itl_ms_p99": _r(self.itl_ms_p99),
            "e2e_s_avg": _r(self.e2e_s_avg, 4),
            "e2e_s_p50": _r(self.e2e_s_p50, 4),
            "e2e_s_p99": _r(self.e2e_s_p99, 4),
        }
        if self.rate is not None:
            d["rate"] = self.rate
        if self.goodput is not None:
            d["goodput"] = self.goodput.as_record()
        if self.judged is not None:
            d["judged"] = self.judged.as_record()
        return d

    @classmethod
    def from_record(cls, d: dict) -> LevelSummary:
        errs = d.get("errors") or {}
        return cls(
            level_index=d.get("level_index", -1),
            concurrency=d["concurrency"],
            requests=d["requests"],
            ok=d["ok"],
            errors=tuple(sorted(errs.items(), key=lambda kv: -kv[1])),
            output_tokens=d.get("output_tokens", 0),
            tokens_estimated=d.get("tokens_estimated", False),
            wall_s=d["wall_s"],
            throughput_tok_s=d["throughput_tok_s"],
            per_request_tok_s=d["per_request_tok_s"],
            req_s=d.get("req_s", 0.0),
            ttft_ms_avg=d.get("ttft_ms_avg"),
            ttft_ms_p50=d.get("ttft_ms_p50"),
            ttft_ms_p99=d.get("ttft_ms_p99"),
            tpot_ms_p50=d.get("tpot_ms_p50"),
            tpot_ms_p99=d.get("tpot_ms_p99"),
            itl_ms_p50=d.get("itl_ms_p50"),
            itl_ms_p99=d.get("itl_ms_p99"),
            e2e_s_avg=d.get("e2e_s_avg"),
            e2e_s_p50=d.get("e2e_s_p50"),
            e2e_s_p99=d.get("e2e_s_p99"),
            rate=d.get("rate"),
            goodput=LevelGoodput.from_record(d.get("goodput")),
            judged=LevelJudgement.from_record(d.get("judged")),
        )


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


class LevelColumns:
    """The columns of one level's requests, kept compact (array('d')) so long runs stay small."""

    __slots__ = (
        "level_index", "concurrency", "requests", "ok", "errors", "estimated",
        "first_start_ns", "last_end_ns", "tokens", "ttft_ns", "tpot_ns", "e2e_ns", "itl", "rate",
    )

    def __init__(self, level_index: int, concurrency: int, rate: float | None = None) -> None:
        self.level_index = level_index
        self.concurrency = concurrency
        self.rate = rate
        self.requests = 0
        self.ok = 0
        self.errors: dict[str, int] = {}
        self.estimated = False
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None
        self.tokens = array("d")  # per ok request
        self.ttft_ns = array("d")
        self.tpot_ns = array("d")
        self.e2e_ns = array("d")
        self.itl = LogHistogram()  # every per-token ITL of the level's successful requests

    def add(self, rec: RequestRecord) -> None:
        self.add_values(
            start_ns=rec.start_ns,
            end_ns=rec.end_ns,
            ok=rec.ok,
            error_kind=rec.error_kind.value if rec.error_kind is not None else None,
            output_tokens=rec.output_tokens,
            estimated=rec.tokens_estimated,
            ttft_ns=rec.ttft_ns,
            e2e_ns=rec.e2e_ns,
            tpot_ns=rec.tpot_ns,
            itl_ns=rec.itl_per_token_ns() if rec.ok else None,
        )

    def add_values(
        self,
        *,
        start_ns: int,
        end_ns: int,
        ok: bool,
        error_kind: str | None,
        output_tokens: int,
        estimated: bool,
        ttft_ns: float | None,
        e2e_ns: float | None,
        tpot_ns: float | None,
        itl_ns: list[float] | None,
    ) -> None:
        self.requests += 1
        if self.first_start_ns is None or start_ns < self.first_start_ns:
            self.first_start_ns = start_ns
        if self.last_end_ns is None or end_ns > self.last_end_ns:
            self.last_end_ns = end_ns
        if not ok:
            k = error_kind or "error"
            self.errors[k] = self.errors.get(k, 0) + 1
            return
        self.ok += 1
        self.estimated = self.estimated or estimated
        self.tokens.append(output_tokens)
        if ttft_ns is not None:
            self.ttft_ns.append(ttft_ns)
        if e2e_ns is not None:
            self.e2e_ns.append(e2e_ns)
        if tpot_ns is not None:
            self.tpot_ns.append(tpot_ns)
        if itl_ns:
            self.itl.add_many(itl_ns)

    def summary(self) -> LevelSummary:
        wall_ns = (self.last_end_ns - self.first_start_ns) if self.first_start_ns is not None else 0
        wall_s = wall_ns / 1e9
        toks = np.frombuffer(self.tokens, dtype=np.float64) if len(self.tokens) else np.zeros(0)
        e2e = np.frombuffer(self.e2e_ns, dtype=np.float64) if len(self.e2e_ns) else np.zeros(0)
        total = int(toks.sum()) if toks.size else 0
        per_req = 0.0
        if e2e.size and e2e.size == toks.size:
            valid = e2e > 0
            if valid.any():
                per_req = float(np.mean(toks[valid] / (e2e[valid] / 1e9)))
        ttft = _pct(self.ttft_ns, 1e6)
        tpot = _pct(self.tpot_ns, 1e6)
        itl = (None, _scaled(self.itl.percentile(50), 1e6), _scaled(self.itl.percentile(99), 1e6))
        e2e_p = _pct(self.e2e_ns, 1e9)
        full = LevelSummary(
            level_index=self.level_index,
            concurrency=self.concurrency,
            requests=self.requests,
            ok=self.ok,
            errors=tuple(sorted(self.errors.items(), key=lambda kv: -kv[1])),
            output_tokens=total,
            tokens_estimated=self.estimated,
            wall_s=wall_s,
            throughput_tok_s=total / wall_s if wall_s > 0 else 0.0,
            per_request_tok_s=per_req,
            req_s=self.requests / wall_s if wall_s > 0 else 0.0,
            ttft_ms_avg=ttft[0],
            ttft_ms_p50=ttft[1],
            ttft_ms_p99=ttft[2],
            tpot_ms_p50=tpot[1],
            tpot_ms_p99=tpot[2],
            itl_ms_p50=itl[1],
            itl_ms_p99=itl[2],
            e2e_s_avg=e2e_p[0],
            e2e_s_p50=e2e_p[1],
            e2e_s_p99=e2e_p[2],
            rate=self.rate,
        )
        # At the record's precision everywhere: the run's table, the TUI, --json and `report` of
        # the record then print the same digits (354.35 in the record was once 354.3 on screen).
        return LevelSummary.from_record(full.as_record())


def _pct(values: array, scale: float) -> tuple[float | None, float | None, float | None]:
    """(mean, p50, p99) in units of ``scale`` ns; linear-interpolated percentiles (numpy default)."""
    if not len(values):
        return None, None, None
    a = np.frombuffer(values, dtype=np.float64) / scale
    p50, p99 = percentiles(a, (50, 99))
    return float(a.mean()), p50, p99


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v / scale


class LevelBook:
    """Which requests belong to which level, and when a level is complete.

    A level's statistics cover the requests it started, including those that end after the ramp
    moved on (no-drain mode). A level is complete when it is closed (no more starts) and none of
    its requests is still in flight. Summaries are released in level order: a level that
    completes before an earlier one waits for it, so tables and records list levels in order.
    """

    def __init__(self) -> None:
        self._cols: dict[int, LevelColumns] = {}
        self._in_flight: dict[int, int] = {}
        self._closed: set[int] = set()
        self._released: set[int] = set()

    def open(self, level_index: int, concurrency: int, rate: float | None = None) -> None:
        self._cols[level_index] = LevelColumns(level_index, concurrency, rate)
        self._in_flight[level_index] = 0

    def started(self, level_index: int) -> None:
        self._in_flight[level_index] += 1

    def in_flight(self, level_index: int) -> int:
        return self._in_flight.get(level_index, 0)

    def add(self, rec: RequestRecord) -> list[LevelSummary]:
        idx = rec.level_index
        cols = self._cols.get(idx)
        if cols is None:
            return []
        cols.add(rec)
        self._in_flight[idx] -= 1
        return self._release()

    def close(self, level_index: int) -> list[LevelSummary]:
        self._closed.add(level_index)
        return self._release()

    def _complete(self, idx: int) -> bool:
        return idx in self._closed and self._in_flight.get(idx, 0) <= 0

    def _release(self) -> list[LevelSummary]:
        out = []
        for idx in sorted(self._cols):
            if idx in self._released:
                continue
            if not self._complete(idx):
                break
            self._released.add(idx)
            if self._cols[idx].requests:
                out.append(self._cols[idx].summary())
        return out

    def flush(self) -> list[LevelSummary]:
        """At the end of a run: the summaries of levels not yet released (cut short by a stop)."""
        out = []
        for idx in sorted(self._cols):
            if idx not in self._released:
                self._released.add(idx)
                if self._cols[idx].requests:
                    out.append(self._cols[idx].summary())
        return out
