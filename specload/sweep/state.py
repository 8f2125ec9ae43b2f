"""``DIR/sweep.json``: what the sweep ran and how each attempt ended, rewritten whole after every change.

One document serves the running sweep, ``--resume`` and ``specload report DIR``: the plan (the
command line's words, so a resume parses the same options), the order of the runs (``schedule``:
one slot per configuration and repeat, each with its attempts: record, port, server pid, start-up
and stop times, how it ended and why), and, once computed, the result (``configs``, ``levels``,
``best_by_level``, ...: ``report/sweep.py``). It is written to a temporary file and renamed, so a
kill at any moment leaves the last complete version.

Resume keeps a slot whose outcome was decided: ``crashed`` and ``failed_to_start`` as they are,
``ok`` while its record is complete (its end line says completed); every other slot is run again,
in new record files (an interrupted attempt's file stays, named as its attempt). A plan holding a
secret (``--api-key`` in the launch command) is kept as given, since a resume must run it, in a file
only its owner can read; everything shown or reported masks it.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path
from typing import Any

import orjson

from specload.report.outputs import atomic_output
from specload.report.sweep import SWEEP_FILE as FILE
from specload.report.sweep import SWEEP_SCHEMA as SCHEMA
from specload.report.sweep import SweepReadError, read_sweep
from specload.secrets import command_secrets
from specload.sweep.plan import Config, PlanError, SweepPlan

FINAL = ("ok", "crashed", "failed_to_start")


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", name).strip("_")[:60] or "config"


class SweepState:
    def __init__(self, out_dir: Path, doc: dict[str, Any]) -> None:
        self.dir = out_dir
        self.doc = doc

    @property
    def path(self) -> Path:
        return self.dir / FILE

    @classmethod
    def new(cls, out_dir: Path, plan: SweepPlan, params: dict[str, Any], nonce: str) -> SweepState:
        """``params``: the command's values, from which a resume rebuilds the same run options."""
        doc = {
            "specload_sweep": SCHEMA, "id": nonce, "created_at": now_iso(), "updated_at": None,
            "complete": False, "params": params, "plan": plan.as_record(),
            "schedule": [{"index": s.index, "config": plan.configs[s.config].name, "repeat": s.repeat,
                          "status": "pending", "attempts": []} for s in plan.schedule()],
        }
        return cls(out_dir, doc)

    @classmethod
    def load(cls, out_dir: Path) -> SweepState:
        try:
            return cls(out_dir, read_sweep(out_dir))
        except SweepReadError as e:
            raise PlanError(str(e)) from None

    def plan(self) -> SweepPlan:
        p = self.doc["plan"]
        return SweepPlan(p["launch"], tuple(Config(c["name"], c["args"]) for c in p["configs"]), p["baseline"],
                         p["repeats"], p["retries"], p["url"])

    @property
    def slots(self) -> list[dict[str, Any]]:
        return self.doc["schedule"]

    def save(self) -> None:
        self.doc["updated_at"] = now_iso()
        data = orjson.dumps(self.doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        with atomic_output(self.path) as tmp:
            if self.private:
                os.chmod(tmp, 0o600)
            tmp.write_bytes(data + b"\n")

    @property
    def private(self) -> bool:
        """The plan as given holds a secret (a key in the launch command): a resume needs it as it was,
        so the file is kept readable by its owner only (everything shown or reported masks it)."""
        plan = self.doc.get("plan") or {}
        texts = [plan.get("launch"), *(c.get("args") for c in plan.get("configs") or [])]
        return any(command_secrets(t) for t in texts if isinstance(t, str))

    def record_path(self, slot: dict[str, Any]) -> str:
        """A new record file for the slot's next attempt, relative to the sweep's folder; never one that
        exists (an interrupted attempt's record stays as it was)."""
        plan = self.doc["plan"]
        number = next(i for i, c in enumerate(plan["configs"]) if c["name"] == slot["config"]) + 1
        stem = f"runs/{number:02d}-{_slug(slot['config'])}-r{slot['repeat'] + 1}"
        k = len(slot["attempts"]) + 1
        while (self.dir / f"{stem}-a{k}.jsonl").exists():
            k += 1
        return f"{stem}-a{k}.jsonl"

    def to_redo(self) -> list[dict[str, Any]]:
        """The slots a resume runs again: not decided, or ``ok`` with a record that is not complete."""
        from specload.record.reader import RecordReadError, read_record

        redo = []
        for slot in self.slots:
            if slot["status"] == "ok":
                last = slot["attempts"][-1] if slot["attempts"] else {}
                try:
                    end = read_record(str(self.dir / last.get("record", "-"))).end or {}
                except (RecordReadError, OSError):
                    end = {}
                if end.get("reason") == "completed":
                    continue
            elif slot["status"] in FINAL:
                continue
            redo.append(slot)
        return redo

    def unfinished(self) -> list[dict[str, Any]]:
        """Attempts of a sweep that was killed during them (no end recorded); those that had started
        their server name it (pid and start time). Their slots are marked interrupted."""
        for s in self.slots:
            if s["status"] == "running":
                s["status"] = "interrupted"
        return [a for s in self.slots for a in s["attempts"] if a.get("status") == "running"]


def check_out_dir(out: str, *, resume: bool) -> Path:
    """The sweep's folder: made for a new sweep (one that holds a sweep already is refused: resume it or
    name another), existing for a resume."""
    path = Path(out)
    if resume:
        if not path.is_dir():
            raise PlanError(f"--resume {out}: no such folder")
        return path
    if (path / FILE).exists():
        raise PlanError(f"{out} holds a sweep already: --resume {out} continues it, or name another --out")
    try:
        (path / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlanError(f"cannot make {out}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK):
        raise PlanError(f"{out} is not writable")
    return path
