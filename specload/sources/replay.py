"""A recorded run played back as the dashboard's data source (``specload tui --replay RUN.jsonl``).

``ReplaySource`` has the read methods the app samples (``snapshot``, ``runner_state``, ``state_label``,
``log_lines``) and a ``runner`` with the controls its keys call, so the dashboard shows a past run as it
happened (sparklines, level table, crashes, server samples, markers in the log panel) without knowing
it is a replay. Playback is pulled: each snapshot advances the record's clock by the real time elapsed
times ``speed`` and feeds what happened meanwhile into a ``LiveStats`` of its own, the same class the
live run uses, so every panel computes exactly what it computed live.

Tokens: a record keeps each request's token count, not when each token came (unless it was made with
``--record-chunks``), so a request's tokens are spread over its decode span (the first at its TTFT),
fed in 0.25 s slices of record time. Keys: space pauses and resumes, ``n`` jumps to the next level;
the concurrency keys do nothing (a record cannot be steered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import (
    ConcurrencyChanged,
    CrashEvent,
    ErrorKind,
    HealthChanged,
    LevelStarted,
    LoadControl,
    Marker,
    RequestRecord,
    SearchProgress,
    ServerExited,
    ServerSample,
    event_from_record,
)
from specload.engine.runner import RunnerState
from specload.record.reader import RecordData
from specload.record.schema import SERVER_FIELDS
from specload.session.listener import SessionListener
from specload.sources.frame import LOG_TAIL, Frame, RunInfo
from specload.stats.levels import LevelSummary
from specload.stats.live import LiveStats, StatsSnapshot
from specload.watch.logwatch import LogTail

NS = 1_000_000_000
SLICE_S = 0.25  # token feed granularity, in record time (LiveStats buckets by the second)
if TYPE_CHECKING:
    from specload.session import SessionResult


class _RecordClock:
    """The record's clock for the replay's LiveStats: it reads the playback position."""

    def __init__(self, source: ReplaySource) -> None:
        self._source = source

    def now_ns(self) -> int:
        return self._source.t0_ns + int(self._source.position_s * NS)

    def wall_time(self) -> float:
        return float(self._source.position_s)


@dataclass(order=True)
class _Item:
    t_s: float
    order: int  # ties: in file order
    kind: str
    payload: object


class ReplayControls:
    """The replay's ``RunControl`` (and the runner-like reads its tests use): pause and step; nothing
    else moves a record."""

    held = False
    # the dashboard's load keys it serves: the others do nothing to a record, and are not shown
    keys = frozenset({"pause", "next_level"})

    def __init__(self, source: ReplaySource) -> None:
        self._source = source

    @property
    def requested(self) -> int:
        return self._source.concurrency

    def toggle_pause(self) -> None:
        self._source.toggle_pause()

    def next_level(self) -> None:
        self._source.next_level()

    def set_target(self, n: int, *, force: bool = False, rate: float | None = None) -> None:
        pass  # a record cannot be steered

    def toggle_hold(self) -> None:
        pass

    def marker(self, note: str) -> None:
        pass

    def find_max(self, start: float | None) -> None:
        pass

    def hold_best(self) -> None:
        pass

    def quit(self, sig: int | None = None) -> None:
        pass  # nothing to stop: the dashboard just leaves


class ReplaySource:
    def __init__(self, data: RecordData, *, speed: float = 1.0, clock: Clock = SYSTEM_CLOCK,
                 t0_ns: int = 10**12) -> None:
        if not speed > 0:
            raise ValueError("speed must be positive")
        hdr = data.run or {}
        self.url: str | None = hdr.get("target")
        self.model: str | None = hdr.get("model")
        self.api: str | None = hdr.get("api")
        self.t0_ns = t0_ns
        self.speed = speed
        self.paused = False
        self.position_s = 0.0
        self.concurrency = 0
        self.log_lines = LogTail()
        self.runner = ReplayControls(self)
        self.control = self.runner  # the RunControl the dashboard's keys use
        self._clock = clock
        self._last_real: int | None = None
        self._seq = 0
        self._stats = LiveStats(_RecordClock(self))
        self._items = self._timeline(data)
        self._next = 0
        self._level_starts = sorted(i.t_s for i in self._items if i.kind == "event"
                                    and isinstance(i.payload, dict) and i.payload.get("kind") == "level")
        self.end_s = max([i.t_s for i in self._items] + [float((data.end or {}).get("elapsed_s") or 0.0)])
        self._level_index = -1
        self._level_count = len(self._level_starts)
        self._tokens = _TokenCurve(data)
        self._fed_tokens_s = 0.0
        self._starts = np.array(sorted(r["start_s"] for r in data.requests if isinstance(r.get("start_s"), float | int)))
        ends = [(r["start_s"], r.get("end_s", r["start_s"])) for r in data.requests if isinstance(r.get("start_s"), float | int)]
        self._spans = np.array(ends, dtype=np.float64) if ends else np.zeros((0, 2))
        by_level: dict[int, list[float]] = {}
        for r in data.requests:
            if isinstance(r.get("level_index"), int) and isinstance(r.get("start_s"), float | int) and not r.get("warmup"):
                by_level.setdefault(r["level_index"], []).append(float(r["start_s"]))
        self._level_starts_s = {k: np.sort(np.array(v)) for k, v in by_level.items()}

    # ------------------------------------------------------------------ the timeline

    def _timeline(self, data: RecordData) -> list[_Item]:
        items: list[_Item] = []
        n = 0

        def add(t: object, kind: str, payload: object) -> None:
            nonlocal n
            if isinstance(t, int | float):
                items.append(_Item(float(t), n, kind, payload))
                n += 1

        level_end: dict[int, float] = {}
        for r in data.requests:
            end = r.get("end_s", r.get("start_s"))
            add(end, "request", r)
            idx = r.get("level_index")
            if isinstance(idx, int) and isinstance(end, int | float):
                level_end[idx] = max(level_end.get(idx, 0.0), float(end))
        for lv in data.levels:
            # a level line has no time: it was written when the level's last request ended
            add(level_end.get(lv.get("level_index", -1), 0.0), "level", lv)
        for ev in data.events:
            add(ev.get("t_s"), "event", ev)
        for s in data.servers:
            add(s.get("t_s"), "server", s)
        for c in data.crashes:
            add(c.get("t_s"), "crash", c)
        for c in data.clients:
            add(c.get("t_s"), "client", c)
        items.sort()
        return items

    # ------------------------------------------------------------------ controls

    def toggle_pause(self) -> None:
        self._advance()
        self.paused = not self.paused

    def next_level(self) -> None:
        """Jump to the start of the next level (what lies between is fed at once)."""
        self._advance()
        later = [t for t in self._level_starts if t > self.position_s + 1e-9]
        if later:
            self._feed_until(later[0])

    # ------------------------------------------------------------------ the data source

    def frame(self) -> Frame:
        """What the dashboard shows (``RunSource``): the record as of the playback position."""
        return Frame(
            info=RunInfo(t0_ns=self.t0_ns, on_crash="continue", slo=None, open_loop=False),
            stats=self.snapshot(), runner=self.runner_state(), state=self.state_label(), url=self.url,
            model=self.model, api=self.api, log=self.log_lines.tail(LOG_TAIL),
            search=None, searching=False,
        )

    async def run(self, listener: SessionListener) -> SessionResult | None:
        return None  # playback is pulled by the frames; nothing runs

    def snapshot(self) -> StatsSnapshot:
        self._advance()
        return self._stats.snapshot()

    def runner_state(self) -> RunnerState | None:
        in_flight = 0
        t = self.position_s
        if self._spans.size:
            in_flight = int(((self._spans[:, 0] <= t) & (self._spans[:, 1] > t)).sum())
        started = int(np.searchsorted(self._starts, t, side="right"))
        # the level's progress: its requests started so far, of those the record has for it
        starts = self._level_starts_s.get(self._level_index)
        done = float(np.searchsorted(starts, t, side="right")) if starts is not None else 0.0
        total = float(starts.size) if starts is not None and starts.size else None
        return RunnerState(
            state=self.state_label(), target=self.concurrency, in_flight=in_flight, level_index=self._level_index,
            level_number=self._level_index + 1 if self._level_index >= 0 else 0, level_count=self._level_count,
            level_concurrency=self.concurrency, level_done=done, level_total=total,
            level_unit="requests" if total else "", paused=self.paused, held=False, started=started,
        )

    def state_label(self) -> str:
        if self.position_s >= self.end_s:
            return "replay finished"
        if self.paused:
            return "replay paused"
        return f"replay ×{self.speed:g}"

    # ------------------------------------------------------------------ playback

    def _advance(self) -> None:
        now = self._clock.now_ns()
        last, self._last_real = self._last_real, now
        if last is None or self.paused:
            return
        self._feed_until(min(self.end_s, self.position_s + (now - last) / NS * self.speed))

    def _feed_until(self, t_s: float) -> None:
        items, stats = self._items, self._stats
        while True:
            # tokens in slices, so each second's bucket gets its own share
            nxt = items[self._next].t_s if self._next < len(items) else t_s
            stop = min(t_s, nxt, self._fed_tokens_s + SLICE_S)
            if stop > self._fed_tokens_s:
                self.position_s = stop
                n = self._tokens.between(self._fed_tokens_s, stop)
                if n:
                    stats.on_tokens(self.t0_ns + int(stop * NS), n)
                self._fed_tokens_s = stop
            if self._next < len(items) and items[self._next].t_s <= stop:
                self._apply(items[self._next])
                self._next += 1
                continue
            if stop >= t_s:
                break
        self.position_s = max(self.position_s, t_s)

    def _apply(self, item: _Item) -> None:
        ns = self.t0_ns + int(item.t_s * NS)
        p = item.payload
        assert isinstance(p, dict)
        if item.kind == "request":
            self._stats.on_record(_request(p, self.t0_ns))
        elif item.kind == "level":
            self._stats.on_level(LevelSummary.from_record(p))
        elif item.kind == "event":
            ev = event_from_record(ns, str(p.get("kind")), p.get("value"))
            self._stats.on_event(ev)
            match ev:
                case LevelStarted():
                    self._level_index, self.concurrency = ev.index, ev.concurrency
                    manual = " (set by key)" if ev.manual else ""
                    self._log(item.t_s, f"level {self._level_index + 1}: C={self.concurrency}{manual}")
                case ConcurrencyChanged():
                    self.concurrency = ev.target
                case Marker() | LoadControl() | HealthChanged() | ServerExited() | SearchProgress():
                    self._log(item.t_s, f"{ev.kind}: {ev.value}" if ev.value != "" else ev.kind)
        elif item.kind == "server":
            self._stats.on_server(ServerSample(ns, str(p.get("source", "")), **{
                k: p[k] for k in SERVER_FIELDS if isinstance(p.get(k), int | float)}))
        elif item.kind == "crash":
            c = CrashEvent(
                signature=str(p.get("signature")), exception_type=str(p.get("exception_type") or "?"),
                message=str(p.get("message") or ""), innermost_frame=p.get("innermost_frame"),
                processes=tuple(p.get("processes") or ()), count=int(p.get("count") or 1),
                first_seen_ns=self.t0_ns + int(float(p.get("first_seen_s", item.t_s)) * NS), last_seen_ns=ns,
                excerpt=str(p.get("excerpt") or ""), new=bool(p.get("new", True)))
            self._stats.on_crash(c)
            self._log(item.t_s, f"crash: {c.exception_type}: {c.message}")
        elif item.kind == "client":
            self._stats.on_client_load(p.get("cpu_pct"), p.get("loop_lag_ms"), bool(p.get("saturated")),
                                       bool(p.get("starved")))

    def _log(self, t_s: float, text: str) -> None:
        self._seq += 1
        m, s = divmod(int(t_s), 60)
        self.log_lines.append((self._seq, f"[replay {m:02d}:{s:02d}] {text}"))


def _request(r: dict, t0_ns: int) -> RequestRecord:
    def ns(ms: object) -> int | None:
        return int(ms * 1e6) if isinstance(ms, int | float) else None

    start = t0_ns + int(float(r.get("start_s", 0.0)) * NS)
    end = t0_ns + int(float(r.get("end_s", r.get("start_s", 0.0))) * NS)
    err = r.get("error") if isinstance(r.get("error"), dict) else None
    kind = None
    if not r.get("ok"):
        try:
            kind = ErrorKind((err or {}).get("kind", "malformed"))
        except ValueError:
            kind = ErrorKind.MALFORMED
    return RequestRecord(
        request_id=int(r.get("id", 0)), level=int(r.get("level", 0)), level_index=int(r.get("level_index", 0)),
        warmup=bool(r.get("warmup")), start_ns=start, end_ns=end, ttft_ns=ns(r.get("ttft_ms")),
        e2e_ns=ns(r.get("e2e_ms")), output_tokens=int(r.get("output_tokens") or 0),
        tokens_estimated=bool(r.get("tokens_estimated")), prompt_tokens=r.get("prompt_tokens"),
        chunks=int(r.get("chunks") or 0), error_kind=kind, error_detail=(err or {}).get("detail"),
    )


class _TokenCurve:
    """How many tokens the recorded requests had produced by each moment: the first at TTFT, the rest
    spread evenly to the last (or at the recorded chunk times, with ``--record-chunks``)."""

    def __init__(self, data: RecordData) -> None:
        t1, t2, rest = [], [], []
        exact_t: list[float] = []
        exact_n: list[float] = []
        for r in data.requests:
            if not r.get("ok") or r.get("warmup"):
                continue
            s, ttft, e2e = r.get("start_s"), r.get("ttft_ms"), r.get("e2e_ms")
            tok = r.get("output_tokens") or 0
            if not isinstance(s, int | float) or not isinstance(ttft, int | float) or not isinstance(e2e, int | float):
                continue
            chunks, per = r.get("chunk_ms"), r.get("chunk_tokens")
            if isinstance(chunks, list) and chunks:
                share = per if isinstance(per, list) and len(per) == len(chunks) else [tok / len(chunks)] * len(chunks)
                exact_t += [s + c / 1e3 for c in chunks]
                exact_n += [float(x) for x in share]
                continue
            t1.append(s + ttft / 1e3)
            t2.append(s + max(e2e, ttft) / 1e3)
            rest.append(max(0.0, float(tok) - 1.0))
        self.t1, self.t2, self.rest = np.array(t1), np.array(t2), np.array(rest)
        order = np.argsort(exact_t)
        self.exact_t = np.array(exact_t)[order]
        self.exact_cum = np.cumsum(np.array(exact_n)[order]) if exact_n else np.zeros(0)

    def upto(self, t: float) -> float:
        total = 0.0
        if self.t1.size:
            span = np.maximum(self.t2 - self.t1, 1e-9)
            frac = np.clip((t - self.t1) / span, 0.0, 1.0)
            total += float(((self.t1 <= t) + self.rest * frac).sum())
        if self.exact_t.size:
            i = int(np.searchsorted(self.exact_t, t, side="right"))
            total += float(self.exact_cum[i - 1]) if i else 0.0
        return total

    def between(self, a: float, b: float) -> float:
        return self.upto(b) - self.upto(a)
