"""The concurrency schedule of a recorded run, as a plan to run again (``specload run --schedule-from``).

An interactive exploration in the TUI (levels, concurrency set by key, pauses, holds, next) becomes a
repeatable headless run against another server: each level of the record becomes a level of the plan
with the same concurrency, the same *active* time (pauses excluded; a drained level's time is until
its last request started, not until it drained) and its pauses at the same moments, plus the
original's warm-up, drain mode and open-loop rate. Holds and "next" need no replaying: they only
decided how long a level lasted, which the durations carry. The replayed levels keep the original's
``manual`` flag, so the two records' level and concurrency events match and compare level by level.
"""

from __future__ import annotations

from specload.plan import LevelSpec, LoadPlan
from specload.record.reader import RecordData

MIN_LEVEL_S = 0.05  # a level the original ended at once still starts (and is still a level)


class ScheduleError(ValueError):
    """A record whose schedule cannot be replayed; the message is one line."""


def schedule_from_record(data: RecordData, *, max_requests: int | None = None,
                         max_duration_s: float | None = None) -> LoadPlan:
    hdr = data.run or {}
    levels = [(ev["t_s"], ev["value"]) for ev in data.events
              if ev.get("kind") == "level" and isinstance(ev.get("value"), dict)
              and isinstance(ev["value"].get("concurrency"), int) and isinstance(ev.get("t_s"), (int, float))]
    if not levels:
        raise ScheduleError("the record has no level events to replay (it was cut short before its first level)")
    last_start: dict[int, float] = {}
    last_end = 0.0
    for r in data.requests:
        idx, s = r.get("level_index"), r.get("start_s")
        if isinstance(idx, int) and isinstance(s, (int, float)):
            last_start[idx] = max(last_start.get(idx, s), s)
        e = r.get("end_s")
        if isinstance(e, (int, float)):
            last_end = max(last_end, e)
    run_end = (data.end or {}).get("elapsed_s")
    if not isinstance(run_end, (int, float)):
        run_end = last_end
    # "drain" since options are declared once; "drain_between_levels" in older records
    drain = bool(hdr.get("drain", hdr.get("drain_between_levels", True)))
    pauses = _pause_intervals(data, run_end)
    specs = []
    for i, (t0, v) in enumerate(levels):
        t_next = levels[i + 1][0] if i + 1 < len(levels) else run_end
        idx = v.get("index", i)
        # a drained level stopped sending at its last start; the wait for its requests is not its time
        t1 = min(t_next, last_start[idx] + 1e-3) if drain and idx in last_start else t_next
        inside = [(max(a, t0), min(b, t1)) for a, b in pauses if b > t0 and a < t1]
        paused = sum(b - a for a, b in inside)
        active = max(MIN_LEVEL_S, (t1 - t0) - paused)
        # each pause at the active time before it
        offsets = []
        before = 0.0
        cursor = t0
        for a, b in inside:
            before += a - cursor
            offsets.append((round(before, 6), round(b - a, 6)))
            cursor = b
        specs.append(LevelSpec(
            v["concurrency"], None, round(active, 6),
            rate=v.get("rate"), repeat=int(v.get("repeat") or 0), manual=bool(v.get("manual")),
            pauses=tuple(offsets),
        ))
    rate = hdr.get("rate")
    return LoadPlan(
        levels=tuple(specs),
        warmup_requests=int(hdr.get("warmup_requests") or 0),
        drain_between_levels=drain,
        rate=rate if isinstance(rate, (int, float)) and rate > 0 else None,
        burstiness=float(hdr.get("burstiness") or 1.0),
        max_requests=max_requests,
        max_duration_s=max_duration_s,
    )


def _pause_intervals(data: RecordData, run_end: float) -> list[tuple[float, float]]:
    out = []
    since: float | None = None
    for ev in data.events:
        kind, t = ev.get("kind"), ev.get("t_s")
        if not isinstance(t, (int, float)):
            continue
        if kind == "pause" and since is None:
            since = t
        elif kind == "resume" and since is not None:
            out.append((since, t))
            since = None
    if since is not None:
        out.append((since, run_end))
    return out
