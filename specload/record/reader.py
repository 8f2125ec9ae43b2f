"""Reading records back: tolerant of a record cut short by a killed process.

A last line without its newline, or one that is not valid JSON, is dropped and reported as
``truncated``; every complete line before it is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson


class RecordReadError(Exception):
    pass


@dataclass
class RecordData:
    run: dict | None = None
    requests: list[dict] = field(default_factory=list)
    levels: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    crashes: list[dict] = field(default_factory=list)
    servers: list[dict] = field(default_factory=list)
    clients: list[dict] = field(default_factory=list)
    end: dict | None = None
    truncated: bool = False
    bad_lines: int = 0


def iter_lines(path: str):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RecordReadError(f"cannot read {path}: {e.strerror}") from None
    lines = data.split(b"\n")
    complete = lines[:-1]
    tail = lines[-1]
    for raw in complete:
        if raw.strip():
            yield raw, True
    if tail.strip():
        yield tail, False


def read_record(path: str) -> RecordData:
    rec = RecordData()
    buckets = {
        "request": rec.requests,
        "level": rec.levels,
        "event": rec.events,
        "crash": rec.crashes,
        "server": rec.servers,
        "client": rec.clients,
    }
    for raw, complete in iter_lines(path):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            if complete:
                rec.bad_lines += 1
            else:
                rec.truncated = True
            continue
        if not isinstance(obj, dict):
            rec.bad_lines += 1
            continue
        t = obj.get("type")
        if t == "run":
            rec.run = obj
        elif t == "end":
            rec.end = obj
        elif t in buckets:
            buckets[t].append(obj)
        else:
            rec.bad_lines += 1
    if rec.run is None:
        raise RecordReadError(f"{path} is not a specload record (no run header)")
    if rec.end is None:
        rec.truncated = True
    return rec
