"""``specload report A B``: comparisons of records these tests make with ``specload run`` against the
built-in simulator (real subprocesses, real HTTP on 127.0.0.1).

The simulator's timing is pinned (``--ttft-ms/--itl-ms``: an absolute schedule, so a busy machine
delays deliveries by a millisecond or two but cannot stretch a run), while acceptance stays random
(3 draft tokens, each request its own acceptance rate). "Identical settings" share the seed too: a
pair with different seeds has, by design, a 5% chance of a false verdict per level, which a test
cannot tolerate; how often that happens is what ``benchmarks/compare_calibration.py`` measures.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

SPECLOAD = [sys.executable, "-m", "specload.cli"]
PINNED = "--ttft-ms 15 --itl-ms {itl} --spec-tokens 3 --accept-rate 0.7 --seed {seed} --quiet"


def specload(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([*SPECLOAD, *args], capture_output=True, text=True, timeout=timeout)


def make_run(path: Path, label: str, *, itl: float = 8, seed: int = 1, levels: str = "1,4", n: int = 16) -> Path:
    p = specload("run", "-c", levels, "-n", str(n), "--max-tokens", "32", "--ignore-eos", "--label", label,
                 "--record", str(path), "--sim-args", PINNED.format(itl=itl, seed=seed))
    assert p.returncode == 0, p.stderr
    return path


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("compare")
    return {
        "base": make_run(d / "base.jsonl", "base"),
        "same": make_run(d / "same.jsonl", "same"),  # identical settings, seed included
        "fast": make_run(d / "fast.jsonl", "fast", itl=4, seed=2),  # decode steps twice as fast
        "fast2": make_run(d / "fast2.jsonl", "fast", itl=4, seed=3),  # a repeat of fast
        "tiny": make_run(d / "tiny.jsonl", "tiny", levels="1", n=5),
    }


def report_json(*args: str) -> dict:
    p = specload("report", *map(str, args), "--json")
    assert p.returncode == 0, p.stderr
    return orjson.loads(p.stdout)


def metric(doc: dict, level: str, side: str, name: str) -> dict:
    lv = next(x for x in doc["levels"] if x["key"] == level)
    return lv["sides"][side]["metrics"][name]


def test_a_clearly_faster_configuration_is_better(records: dict[str, Path]) -> None:
    doc = report_json(records["base"], records["fast"])
    assert doc["baseline"] == "base" and doc["primary"] == "throughput" and doc["min_effect"] == 0.02
    for level in ("C=1", "C=4"):
        m = metric(doc, level, "fast", "throughput")
        assert m["verdict"] == "better", m
        assert m["ratio"] > 1.3 and m["ratio_ci_low"] > 1.0
        assert m["ci_low"] < m["value"] < m["ci_high"]
        # latencies: lower is better, so a shorter TPOT is "better" too
        assert metric(doc, level, "fast", "tpot_p50")["verdict"] == "better"
        assert metric(doc, level, "fast", "tpot_p50")["ratio"] < 0.8
    # the baseline's own figures carry no ratio or verdict
    b = metric(doc, "C=1", "base", "throughput")
    assert b["ratio"] is None and b["verdict"] is None and b["value"] > 0
    assert any("run-to-run variation is not accounted for" in n for n in doc["notes"])


def test_identical_settings_get_no_difference(records: dict[str, Path]) -> None:
    doc = report_json(records["base"], records["same"])
    for level in ("C=1", "C=4"):
        lv = next(x for x in doc["levels"] if x["key"] == level)
        assert lv["headline"] == {"same": "no_difference"}, lv["sides"]["same"]["metrics"]["throughput"]
        assert abs(metric(doc, level, "same", "throughput")["ratio"] - 1) < 0.02


def test_a_five_request_level_is_insufficient(records: dict[str, Path]) -> None:
    doc = report_json(records["base"], records["tiny"])
    m = metric(doc, "C=1", "tiny", "throughput")
    assert m["verdict"] == "insufficient" and "at least 8" in m["note"]
    assert m["value"] > 0  # the figure is shown, with no interval
    assert m["ci_low"] is None and m["ratio_ci_low"] is None
    # the level only one side ran is there, without a verdict
    c4 = next(x for x in doc["levels"] if x["key"] == "C=4")
    assert "tiny" not in c4["sides"] and c4["headline"] == {}


def test_repeats_per_side_account_for_run_to_run_variation(records: dict[str, Path]) -> None:
    # labels that repeat make one side; --vs does the same for files
    by_label = report_json(records["base"], records["same"], "--vs", records["fast"], records["fast2"])
    assert [s["label"] for s in by_label["sides"]] == ["base+same", "fast"]
    assert by_label["run_to_run"]["accounted"] is True and not by_label["notes"]
    m = metric(by_label, "C=1", "fast", "throughput")
    assert len(m["runs"]) == 2 and m["verdict"] == "better"
    grouped = report_json(records["base"], records["fast"], records["fast2"])
    assert [s["label"] for s in grouped["sides"]] == ["base", "fast"]
    assert len(grouped["sides"][1]["runs"]) == 2
    # --baseline picks the side compared against
    rev = report_json(records["base"], records["fast"], "--baseline", records["fast"])
    assert rev["baseline"] == "fast" and metric(rev, "C=1", "base", "throughput")["verdict"] == "worse"


def test_json_and_csv_shapes(records: dict[str, Path]) -> None:
    doc = report_json(records["base"], records["fast"], records["same"])
    keys = {"value", "ci_low", "ci_high", "ratio", "ratio_ci_low", "ratio_ci_high", "verdict"}
    names = {"throughput", "per_request_tok_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50",
             "e2e_p99", "error_rate", "accept_len"}
    for lv in doc["levels"]:
        assert set(lv["sides"]) == {"base", "fast", "same"}
        for side in lv["sides"].values():
            assert set(side["metrics"]) == names
            for name, m in side["metrics"].items():
                assert keys <= set(m), (name, m)
                assert m["verdict"] in (None, "better", "worse", "no_difference", "insufficient")
                assert m["primary"] == (name == "throughput")
    run = doc["sides"][0]["runs"][0]
    assert run["request_shape"]["max_tokens"] == 32 and run["command"].startswith("specload run")
    p = specload("report", str(records["base"]), str(records["fast"]), "--csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    from specload.record.compare import CSV_COLUMNS

    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 2 * 2 * len(names)  # levels x sides x metrics
    fast_tp = [r for r in rows if r["side"] == "fast" and r["metric"] == "throughput"]
    assert [r["verdict"] for r in fast_tp] == ["better", "better"]
    assert all(float(r["ratio_ci_low"]) > 1 for r in fast_tp)


def test_the_terminal_table_and_bad_input(records: dict[str, Path]) -> None:
    p = specload("report", str(records["base"]), str(records["fast"]), "--primary", "tpot_p50", "--min-effect", "5")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "TPOT p50" in out and "verdict (±5%)" in out and "better" in out
    assert "run-to-run variation is not accounted for" in out
    assert "secondary: fast / base" in out
    # a single file is the level table as before
    single = specload("report", str(records["base"]))
    assert single.returncode == 0 and "TTFT p50/p99 ms" in single.stdout
    for args, msg in (
        ([records["base"], records["base"]], "nothing to compare"),
        ([records["base"], "/nonexistent/x.jsonl"], "cannot read"),
        ([records["base"], records["fast"], "--min-effect", "150"], "--min-effect"),
        ([records["base"], records["fast"], "--json", "--csv"], "only one of"),
    ):
        bad = specload("report", *map(str, args))
        assert bad.returncode == 2 and msg in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
