"""The server's own figures per level, end to end: speculative acceptance and generation throughput
from the simulator's /metrics over each level's span, in the record's level line, the headless level
line, the final table and --json; equal to the simulator's exact totals for a level that is all of
its load."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import orjson
import pytest

from specload.record.reader import read_record
from specload.session import Session
from tests import processes
from tests.conftest import make_config


async def test_a_levels_acceptance_is_the_servers_over_that_level(sim, tmp_path) -> None:
    server = await sim(ttft_ms=5, itl_ms=8, spec_tokens=4, accept_rate=0.6, max_batch=8)
    rec = tmp_path / "r.jsonl"
    cfg = make_config(server.url, concurrency=(4,), requests_per_level=12, drain=True, max_tokens=60,
                      health=False, metrics_interval_s=0.2, path=str(rec))
    result = await asyncio.wait_for(Session(cfg).run(), 60)
    assert result.reason == "completed"
    st = server.stats
    (level,) = read_record(str(rec)).levels
    assert level["server_source"] == "metrics"
    # the level is the whole load here, so its acceptance is the server's exact total
    assert level["accept_len"] == pytest.approx(1 + st.accepted_tokens / st.drafts, rel=0.02)
    assert level["accept_rate"] == pytest.approx(st.accepted_tokens / st.draft_tokens, rel=0.02)
    # per position: the chance that a draft of that position was accepted (falling, as drafts chain)
    pos = level["accept_per_pos"]
    assert len(pos) == 4 and pos[0] == pytest.approx(0.6, abs=0.1) and pos[0] > pos[1] > pos[2] > pos[3]
    # the server's throughput over the level's span, next to specload's
    assert level["server_gen_tok_s"] == pytest.approx(level["throughput_tok_s"], rel=0.25)
    assert result.levels[0].accept_len == level["accept_len"]  # the same figure on screen and in the record


def test_headless_prints_acceptance_and_server_throughput_everywhere(tmp_path) -> None:
    sim = processes.popen(
        [sys.executable, "-m", "specload.sim", "--port", "0", "--ttft-ms", "5", "--itl-ms", "5", "--spec-tokens", "3",
         "--accept-rate", "0.7", "--quiet", "--seed", "2"], stdout=subprocess.PIPE, text=True,
    )
    try:
        url = sim.stdout.readline().split("listening on ")[1].strip()
        args = [sys.executable, "-m", "specload.cli", "run", url, "-c", "2", "-n", "8", "--max-tokens", "40",
                "--ignore-eos", "--api", "chat", "--metrics-interval", "0.2", "--record", str(tmp_path / "r.jsonl")]
        table = processes.run(args, capture_output=True, text=True, timeout=60)
        as_json = processes.run([*args, "--json"], capture_output=True, text=True, timeout=60)
    finally:
        sim.terminate()
        sim.wait(10)
    assert table.returncode == 0 and as_json.returncode == 0, table.stderr + as_json.stderr
    level_line = next(x for x in table.stderr.splitlines() if x.startswith("C=  2"))
    assert "accept len/rate: " in level_line and " | server: " in level_line and "req/s:" in level_line
    header = next(x for x in table.stdout.splitlines() if "tok/s" in x)
    assert "srv tok/s" in header and "accept" in header and "ITL/gap ms" in header
    (lv,) = orjson.loads(as_json.stdout)["levels"]
    assert 1.5 < lv["accept_len"] < 4 and 0.3 < lv["accept_rate"] < 0.9 and lv["server_gen_tok_s"] > 0
    for key in ("peak_tok_s", "peak_concurrency", "ttft_ms_std", "tpot_ms_avg", "gap_ms_p50", "itl_ms_avg",
                "input_tokens", "prompt_tokens_avg", "prompt_tokens_requested_avg", "req_s"):
        assert lv[key] is not None, key
    # the report of the record shows the same, and --wide the rest
    report = processes.run([sys.executable, "-m", "specload.cli", "report", "--wide", str(tmp_path / "r.jsonl")],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "400"})  # room for every header on one line
    assert report.returncode == 0 and "accept per pos" in report.stdout and "peak tok/s" in report.stdout
