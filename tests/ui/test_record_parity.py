"""One composition root: the TUI and headless mode write the same record for the same input.

Both runs use the same simulator (pinned timing, seeded), the same options and the same session
code; only timings differ. The test compares the records' structure: line types in order (the
periodic server/client samples and the requests aside), the keys of every line type, the run
header's configuration, the requests of each level, and what each level contains.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from specload.cli_run import build_config, run_command
from specload.session import Session
from tests.ui.conftest import live_app, wait_for

ARGS = ("-c", "2,3", "-n", "6", "--max-tokens", "8", "--ignore-eos", "--drain", "--seed", "3",
        "--warmup-requests", "2", "--on-crash", "stop", "--on-divergence", "stop")


def lines(path: Path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def _config(run: dict) -> dict:
    # the record paths differ, the rest of the configuration may not
    config = {k: v for k, v in run.items() if k not in ("started_at", "target", "path")}
    # each run's prompts get a nonce of their own (no prefix-cache hits across runs): not a difference
    config["prompts"] = {k: v for k, v in config.get("prompts", {}).items() if k != "nonce"}
    return config


def structure(recs: list[dict]) -> dict:
    periodic = {"server", "client"}
    events = [(r["kind"], r["value"]) for r in recs if r["type"] == "event" and r["kind"] != "health"]
    started = {r["value"]["index"]: i for i, r in enumerate(recs) if r["type"] == "event" and r["kind"] == "level"}
    return {
        # the order of every line but the requests and the level summaries: a summary waits for the
        # server's last /metrics scrape, so the next level may start (its event, its first requests)
        # before it or after it, a matter of timing (on a busy machine the TUI's came first); the
        # summaries keep their own order ("levels"), each after its level's start; the requests are
        # compared as a set, per level, below
        "types": [r["type"] for r in recs if r["type"] not in (*periodic, "request", "level") and
                  not (r["type"] == "event" and r["kind"] == "health")],
        "summaries_after_their_start": all(started[r["level_index"]] < i for i, r in enumerate(recs)
                                           if r["type"] == "level"),
        "keys": {r["type"]: sorted(r) for r in recs if r["type"] not in ("event", *periodic)},
        # a periodic line's keys when there is one: whether a short run had its first second is timing
        "periodic": {r["type"]: sorted(r) for r in recs if r["type"] in periodic},
        "events": events,
        "config": _config(recs[0]),
        "levels": [(r["concurrency"], r["requests"], r["ok"], r["output_tokens"]) for r in recs if r["type"] == "level"],
        "requests": sorted((r["level_index"], r["warmup"], r["output_tokens"], r["ok"]) for r in recs
                           if r["type"] == "request"),
        "end": {k: v for k, v in recs[-1].items() if k not in ("elapsed_s", "ended_at")},
    }


async def test_tui_and_headless_write_the_same_record(sim, tmp_path) -> None:
    server = await sim(ttft_ms=3, itl_ms=3, spec_tokens=0)
    head, tui = tmp_path / "headless.jsonl", tmp_path / "tui.jsonl"

    params = dict(run_command.make_context("run", [server.url, *ARGS, "--record", str(head)]).params)
    result = await asyncio.wait_for(Session(build_config(params, ui=False)).run(), 60)
    assert result.reason == "completed"

    app = live_app(server.url, *ARGS, "--record", str(tui))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: (rs := app.source.frame().runner) is not None and rs.state == "finished",
                       "the ramp to finish", timeout=30)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to exit")

    h, t = structure(lines(head)), structure(lines(tui))
    for kind in set(h["periodic"]) & set(t["periodic"]):
        assert h["periodic"][kind] == t["periodic"][kind], kind
    del h["periodic"], t["periodic"]
    # the headless run ends by itself; the TUI stays open until the user quits, and its record says
    # what had happened by then: the ramp completed (it said "interrupted" before, issue 11)
    assert h["end"]["reason"] == t["end"]["reason"] == "completed"
    assert h == t
