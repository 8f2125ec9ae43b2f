"""``report`` of files from several sources (specload records and ``vllm bench serve`` results): short,
distinct side names, one line when they share no level, the right words about repeats, and the
capacity under --slo of each side. Read from ``../shared/fixtures/peer-results``."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from specload.report.report import report_command

_SHARED = Path(os.environ.get("SPECLOAD_SHARED") or Path(__file__).resolve().parents[3] / "shared")
PEER = _SHARED / "fixtures" / "peer-results"
pytestmark = pytest.mark.skipif(not PEER.is_dir(), reason=f"peer result fixtures not found at {PEER}")
BENCH = PEER / "vllm-bench-serve"
CPU = PEER / "vllm-0.32-cpu-2"


def report(*args: object) -> str:
    r = CliRunner().invoke(report_command, [str(a) for a in args], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    return r.output


def test_three_files_a_side_are_named_by_their_tool_and_not_called_one_run_per_side() -> None:
    ours = [BENCH / f"specload-spec-ngram-c{c}.jsonl" for c in (1, 4, 16)]
    theirs = [BENCH / f"vllm-bench-spec-ngram-c{c}.json" for c in (1, 4, 16)]
    out = report(*ours, "--vs", *theirs)
    head = out.splitlines()[0]
    # the tool each side was made with, not its file names joined with "+"
    assert "baseline specload (3 files, no level repeated)" in head and "vllm bench serve (3 files" in head
    assert "+" not in head and "one run per side" not in out and "no level repeated on a side" in out
    assert "(3 runs)" not in out
    for c in (1, 4, 16):
        assert f"C={c} │" in out or f"C={c} " in out


def test_files_that_share_no_concurrency_say_so_in_one_line() -> None:
    out = report(CPU / "spl_r1_c1.jsonl", CPU / "vllm_r1_c4.json")
    lines = [ln for ln in out.splitlines() if "nothing to compare" in ln]
    assert len(lines) == 1 and "share no concurrency level" in lines[0]
    assert "spl_r1_c1 ran C=1" in lines[0] and "vllm_r1_c4 ran C=4" in lines[0]
    assert "┃" not in out  # no empty tables after it


def test_report_a_b_with_objectives_compares_their_capacity() -> None:
    ours = [BENCH / f"specload-spec-ngram-c{c}.jsonl" for c in (1, 4, 16)]
    theirs = [BENCH / f"vllm-bench-spec-ngram-c{c}.json" for c in (1, 4, 16)]
    slo = "tpot_p50<=3ms"  # vLLM's client counts TPOT otherwise: the two sides part here
    out = report(*ours, "--vs", *theirs, "--slo", slo)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("max C under SLO")]
    doc = orjson.loads(report(*ours, "--vs", *theirs, "--slo", slo, "--json"))["capacity"]
    assert doc["slo"] == slo and set(doc["sides"]) == {"specload", "vllm bench serve"}
    for label, side in doc["sides"].items():
        assert [c for c, _ in side["levels"]] == [1, 4, 16]
        assert f"{label}={side['max_concurrency'] if side['max_concurrency'] is not None else 'none'}" in line
        verdicts = dict(side["levels"])
        best = side["max_concurrency"]
        # the highest level met with none below it missed
        expect = None
        for c in (1, 4, 16):
            if verdicts[c] == "missed":
                break
            if verdicts[c] == "met":
                expect = c
        assert best == expect
    assert len({side["max_concurrency"] for side in doc["sides"].values()}) == 2
