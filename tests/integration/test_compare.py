"""``specload report A B``: comparisons of records made by specload sessions against the built-in
simulator.

Most records are made in virtual time (``tests/virtual_runs.py``: the simulator and the session in
one process, the clock jumping to the next timer), so their timings are the simulator's seeded schedule
and the verdicts cannot depend on how busy the machine is. One record is made by ``specload run`` in
real time, for the run options (``--label``, the command line) and the CLI as a user meets it. How
often a verdict is wrong over many seeds is what ``benchmarks/compare_calibration.py`` measures.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
import pytest

from tests.processes import specload
from tests.virtual_runs import virtual_record

# one worker runs this module: its fixture is set up once (xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("compare")


SIM = {"step_ms": 8.0, "spec_tokens": 3, "accept_rate": 0.7}


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("compare")
    steady = {**SIM, "accept_spread": 0.0}  # every request the same acceptance rate: low per-request spread
    out = {
        "base": virtual_record(d / "base.jsonl", label="base", seed=1, n=20, sim=SIM),
        "same": virtual_record(d / "same.jsonl", label="same", seed=1, n=20, sim=SIM),  # the seed too
        "fast": virtual_record(d / "fast.jsonl", label="fast", seed=2, n=20, sim={**SIM, "step_ms": 4.0}),
        "fast2": virtual_record(d / "fast2.jsonl", label="fast", seed=3, n=20, sim={**SIM, "step_ms": 4.0}),
        "tiny": virtual_record(d / "tiny.jsonl", label="tiny", seed=4, levels=(1,), n=5, sim=SIM),
        "seed5": virtual_record(d / "seed5.jsonl", label="seed5", seed=5, levels=(4,), n=64, sim=steady),
        "seed6": virtual_record(d / "seed6.jsonl", label="seed6", seed=6, levels=(4,), n=64, sim=steady),
    }
    cli = d / "cli.jsonl"
    p = specload("run", "-c", "1,2", "-n", "4", "--max-tokens", "8", "--ignore-eos", "--label", "cli-run",
                 "--record", str(cli), "--sim-args", "--ttft-ms 5 --itl-ms 2 --seed 1 --quiet")
    assert p.returncode == 0, p.stderr
    out["cli"] = cli
    return out


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
    tpot = metric(doc, "C=1", "fast", "tpot_p50")
    assert tpot["verdict"] == "better" and tpot["ratio"] < 0.6
    # the baseline's own figures carry no ratio or verdict
    b = metric(doc, "C=1", "base", "throughput")
    assert b["ratio"] is None and b["verdict"] is None and b["value"] > 0
    assert any("run-to-run variation is not accounted for" in n for n in doc["notes"])


def test_identical_settings_get_no_difference(records: dict[str, Path]) -> None:
    # the same settings and seed: the same schedule, a ratio of exactly 1
    doc = report_json(records["base"], records["same"])
    for level in ("C=1", "C=4"):
        lv = next(x for x in doc["levels"] if x["key"] == level)
        assert lv["headline"] == {"same": "no_difference"}
        assert metric(doc, level, "same", "throughput")["ratio"] == 1.0
    # different seeds (acceptance draws, step and prefill noise): a real difference of nothing, measured
    # with 57 steady-state requests a side, which resolve well below the 2% threshold
    doc = report_json(records["seed5"], records["seed6"])
    m = metric(doc, "C=4", "seed6", "throughput")
    assert m["verdict"] == "no_difference", m
    assert m["ratio_ci_low"] < 1.0 < m["ratio_ci_high"] and m["n"] >= 50


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
    names = {"throughput", "per_request_tok_s", *(f"{m}_p{q}" for m in ("ttft", "tpot", "e2e") for q in (50, 90, 95, 99)),
             "error_rate", "accept_len", "tok_per_j", "gpu_power_w",
             "request_accept_rate"}  # the sim gives per-request counts
    for lv in doc["levels"]:
        assert set(lv["sides"]) == {"base", "fast", "same"}
        for side in lv["sides"].values():
            assert set(side["metrics"]) == names
            for name, m in side["metrics"].items():
                assert keys <= set(m), (name, m)
                assert m["verdict"] in (None, "better", "worse", "no_difference", "insufficient", "unsound")
                assert m["primary"] == (name == "throughput")
    run = doc["sides"][0]["runs"][0]
    assert run["request_shape"]["max_tokens"] == 32 and run["command"].startswith("virtual run")
    p = specload("report", str(records["base"]), str(records["fast"]), "--csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    from specload.report.compare import CSV_COLUMNS

    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 2 * 2 * len(names)  # levels x sides x metrics
    fast_tp = [r for r in rows if r["side"] == "fast" and r["metric"] == "throughput"]
    assert [r["verdict"] for r in fast_tp] == ["better", "better"]
    assert all(float(r["ratio_ci_low"]) > 1 for r in fast_tp)


def test_a_run_label_and_command_are_kept_in_the_record(records: dict[str, Path]) -> None:
    doc = report_json(records["cli"], records["base"])
    run = doc["sides"][0]["runs"][0]
    assert doc["baseline"] == "cli-run" and run["label"] == "cli-run"
    assert run["command"].startswith("specload run -c 1,2") and "--label cli-run" in run["command"]
    # different request shapes make every level's comparison unsound, and the report says why
    assert any("max_tokens 8 vs 32" in f["detail"] for f in doc["shape_flags"])


def test_the_terminal_table_and_bad_input(records: dict[str, Path]) -> None:
    p = specload("report", str(records["base"]), str(records["fast"]), "--primary", "tpot_p50", "--min-effect", "5")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "TPOT p50" in out and "verdict (±5%)" in out and "better" in out
    assert "run-to-run variation is not accounted for" in out
    assert "secondary: fast / base" in out
    # a single file is the level table as before
    single = specload("report", str(records["base"]))
    assert single.returncode == 0 and "TTFT p50/90/95/99 ms" in single.stdout
    for args, msg in (
        ([records["base"], records["base"]], "nothing to compare"),
        ([records["base"], "/nonexistent/x.jsonl"], "cannot read"),
        ([records["base"], records["fast"], "--min-effect", "150"], "--min-effect"),
        ([records["base"], records["fast"], "--json", "--csv"], "only one of"),
    ):
        bad = specload("report", *map(str, args))
        assert bad.returncode == 2 and msg in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
