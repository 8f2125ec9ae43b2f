"""The preflight: what a config cannot check on its own is checked once, and --schedule-from's plan is
resolved once, for a config built in code as for the command line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from specload.config import ConfigError, RunConfig
from specload.preflight import preflight

NESTED: object = 1
for _ in range(300):
    NESTED = {"a": NESTED}  # deeper than JSON writers go


def _record(path: Path, levels: list[tuple[float, int]], end_s: float) -> Path:
    lines = [{"type": "run", "version": 1, "target": "http://127.0.0.1:9", "api": "chat", "drain": False}]
    lines += [{"type": "event", "t_s": t, "kind": "level", "value": {"index": i, "concurrency": c}}
              for i, (t, c) in enumerate(levels)]
    lines.append({"type": "end", "reason": "completed", "elapsed_s": end_s, "requests": 0, "ok": 0,
                  "ended_at": "2026-01-01T00:00:00"})
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return path


def test_a_schedule_is_read_once_and_its_plan_kept(tmp_path: Path) -> None:
    rec = _record(tmp_path / "orig.jsonl", [(0.0, 2), (1.5, 6)], end_s=4.0)
    cfg = RunConfig.of("http://127.0.0.1:9", schedule_from=str(rec), max_requests=50)
    with pytest.raises(RuntimeError, match="preflight"):
        cfg.plan  # noqa: B018 - not read yet: no silent ramp in its place
    ready = preflight(cfg)
    rec.unlink()  # read once: nothing reads the file again
    for c in (ready, dataclasses.replace(ready, seed=3), preflight(ready)):
        assert [(lv.concurrency, lv.duration_s) for lv in c.plan.levels] == [(2, 1.5), (6, 2.5)]
        assert c.plan.max_requests == 50 and c.plan.drain_between_levels is False
    assert ready.describe()["levels"][1] == {"concurrency": 6, "requests": None, "duration_s": 2.5}
    assert "schedule" not in ready.describe()


@pytest.mark.parametrize(("fields", "message"), [
    ({"schedule_from": "MISSING"}, "cannot read"),
    ({"baseline": "MISSING"}, "cannot read"),
    ({"path": "/nonexistent-dir/run.jsonl"}, "/nonexistent-dir"),
    ({"dataset": "MISSING"}, "MISSING"),
    ({"extra_body": (("a", NESTED),)}, "--extra-body"),
    ({"url": None, "sim_args": ("--no-such-option",)}, "--sim-args"),
    ({"gpu_metrics": "dcgm:localhost"}, "--gpu-metrics dcgm:URL needs an http"),
])
def test_checks_that_need_the_disk_or_another_layer_are_the_preflights(tmp_path: Path, fields: dict,
                                                                         message: str) -> None:
    fields = {k: str(tmp_path / v) if v == "MISSING" else v for k, v in fields.items()}
    cfg = RunConfig.of(**{"url": "http://127.0.0.1:9", **fields})  # the config alone does not look
    with pytest.raises(ConfigError, match=message) as e:
        preflight(cfg)
    assert "\n" not in str(e.value)


def test_a_schedule_without_levels_is_a_usage_error(tmp_path: Path) -> None:
    rec = _record(tmp_path / "cut.jsonl", [], end_s=0.5)
    with pytest.raises(ConfigError, match="no level events to replay"):
        preflight(RunConfig.of("http://127.0.0.1:9", schedule_from=str(rec)))
