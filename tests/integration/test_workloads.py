"""Workloads (issue 24) as a user runs them: ``specload run --dataset builtin`` against the built-in
simulator, whose acceptance and answer lengths follow each prompt's category (sim/model.py), and
what the record, ``report --by category``, ``report --json`` and comparisons make of it.

Real subprocesses and real HTTP on 127.0.0.1; every run bounded in requests and seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

SPECLOAD = [sys.executable, "-m", "specload.cli"]
FAST_SIM = "--step-ms 2 --prefill-per-token-ms 0.001 --spec-tokens 3 --accept-rate 0.7 --quiet"


def specload(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*SPECLOAD, *args], capture_output=True, text=True, timeout=timeout)


def lines(path: Path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def test_acceptance_per_category_from_the_requests_own_counts(tmp_path: Path) -> None:
    """The simulator's per-request acceptance (vLLM's metrics.speculative_decoding) is recorded per
    request, pooled per level beside the server's /metrics figure and per category, where code and
    extraction are accepted far more often than creative writing; answers end at their natural stop."""
    rec = tmp_path / "run.jsonl"
    p = specload("run", "-c", "8", "-n", "64", "--dataset", "builtin", "--max-tokens", "96", "--record", str(rec),
                 "--sim-args", FAST_SIM)
    assert p.returncode == 0, p.stderr
    assert "WARNING speculative decoding" not in p.stderr  # text people send, natural stops, chat
    data = lines(rec)
    reqs = [x for x in data if x["type"] == "request"]
    assert len(reqs) == 64 and all(r["ok"] for r in reqs)
    # an answer of one token (EOS at once) had no verify step, and no speculative counts
    assert all(r["spec_drafted"] == 3 * r["spec_verify_ct"] and 0 <= r["spec_accepted"] <= r["spec_drafted"]
               if r["output_tokens"] > 1 else "spec_drafted" not in r for r in reqs)
    assert sum(r["finish_reason"] == "stop" for r in reqs) > 16  # natural stops, not only the cap
    (level,) = [x for x in data if x["type"] == "level"]
    # the requests' pooled counts and the server's /metrics deltas over the level: the same tokens
    assert abs(level["request_accept_rate"] - level["accept_rate"]) < 0.03, level
    cats = level["categories"]
    assert set(cats) == {"chat", "coding", "math", "summarise", "extract", "translate", "rewrite", "creative"}
    assert all(c["requests"] == 8 for c in cats.values())
    assert cats["coding"]["accept_rate"] > cats["chat"]["accept_rate"] + 0.1
    assert cats["extract"]["accept_rate"] > cats["creative"]["accept_rate"] + 0.25
    assert sum(c["output_tokens"] for c in cats.values()) == level["output_tokens"]
    assert abs(sum(c["throughput_tok_s"] for c in cats.values()) - level["throughput_tok_s"]) < 1.0
    assert data[-1]["type"] == "end" and data[-1]["workload_warnings"] == []
    # report --by category prints them; report --json carries them per level
    p = specload("report", str(rec), "--by", "category")
    assert p.returncode == 0, p.stderr
    assert "by category" in p.stdout and "creative" in p.stdout and "all (server:" in p.stdout
    p = specload("report", str(rec), "--json")
    assert orjson.loads(p.stdout)["levels"][0]["categories"]["coding"]["requests"] == 8
    # another run with another --max-tokens: compared, it gets no verdict, per level or per category
    other = tmp_path / "other.jsonl"
    p = specload("run", "-c", "8", "-n", "32", "--dataset", "builtin", "--max-tokens", "48", "--record", str(other),
                 "--sim-args", FAST_SIM)
    assert p.returncode == 0, p.stderr
    p = specload("report", str(rec), str(other), "--json")
    doc = orjson.loads(p.stdout)
    (lv,) = doc["levels"]
    assert lv["headline"] == {"other": "unsound"}
    assert {m["verdict"] for side in lv["categories"].values() for m in side["other"].values()} == {"unsound"}
    assert any("max_tokens 96 vs 48" in n for n in doc["notes"])
    p = specload("report", str(rec), str(other))
    assert "unsound, no verdicts: the workloads differ: max_tokens 96 vs 48" in p.stdout


def test_llamacpp_timings_give_acceptance_per_request_and_synthetic_prompts_are_warned(tmp_path: Path) -> None:
    """As llama-server does, the simulator's llama.cpp flavour says each request's drafts in its
    timings (draft_n, draft_n_accepted); measured on shuffled words with ignore_eos, the run says what
    that workload is worth, in one line each, in the end line and in --json."""
    rec = tmp_path / "run.jsonl"
    p = specload("run", "-c", "2", "-n", "8", "--max-tokens", "32", "--ignore-eos", "--json", "--record", str(rec),
                 "--sim-args", f"--flavor llamacpp {FAST_SIM}")
    assert p.returncode == 0, p.stderr
    reqs = [x for x in lines(rec) if x["type"] == "request"]
    assert all(r["spec_drafted"] == r["server_timings"]["draft_n"] > 0 for r in reqs)
    assert all(r["spec_accepted"] == r["server_timings"]["draft_n_accepted"] for r in reqs)
    summary = orjson.loads(p.stdout)
    assert summary["levels"][0]["request_accept_rate"] > 0
    warned = summary["workload_warnings"]
    assert len(warned) == 2 and "synthetic prompts" in warned[0] and "ignore_eos" in warned[1]
    assert lines(rec)[-1]["workload_warnings"] == warned
    assert sum("WARNING speculative decoding" in line for line in p.stderr.splitlines()) == 2
