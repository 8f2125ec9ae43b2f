"""Is it lossless? ``--check-outputs`` runs against the simulator over HTTP, compared by ``report A B``.

The simulator's temperature-0 text is a function of the prompt (``sim/greedy.py``), so a faster
configuration that is correct gives the baseline's answers, one with near-ties differs only at
near-ties, and one with a speculation bug differs where the model did not prefer its token. The
records are made in virtual time (``tests/virtual_runs.py``: the batch shapes, hence the near-tie
flips, are the same on every run of the test); the live check runs as ``specload run`` does, a real
subprocess against the built-in simulator, and reads its stderr, exit status and record.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specload.exitcode import ExitCode
from specload.record.reader import read_record
from specload.record.runs import load_run
from specload.report.lossless import compare_outputs
from specload.report.report import report_command
from tests import processes
from tests.virtual_runs import virtual_record

CHECK = {"check_outputs": True}
LEVELS = (1, 4)
N = 16


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The baseline without speculation, and configurations to compare with it (the same model:
    the same near-tie rate on both sides of a pair)."""
    tmp = tmp_path_factory.mktemp("lossless")
    runs = {
        "base": {"spec_tokens": 0},
        "spec": {"spec_tokens": 3, "accept_rate": 0.8},
        "bug": {"spec_tokens": 3, "accept_rate": 0.8, "spec_bug_rate": 0.1},
        "base_ties": {"spec_tokens": 0, "near_tie_rate": 0.05},
        "spec_ties": {"spec_tokens": 3, "accept_rate": 0.8, "near_tie_rate": 0.05},
        "no_logprobs": {"spec_tokens": 3, "accept_rate": 0.8, "logprobs": False},  # a server without them
    }
    return {name: virtual_record(tmp / f"{name}.jsonl", levels=LEVELS, n=N, seed=3, label=name,
                                 sim={"step_ms": 5, **sim}, fields=CHECK) for name, sim in runs.items()}


def _compare(records: dict[str, Path], a: str, b: str):  # -> OutputsComparison
    oc = compare_outputs(load_run(str(records[a])), load_run(str(records[b])))
    assert oc is not None
    return oc


def test_the_record_holds_answers_to_identified_prompts(records: dict[str, Path]) -> None:
    data = read_record(str(records["base"]))
    reqs = [r for r in data.requests if not r.get("warmup")]
    assert len(reqs) == N * len(LEVELS)
    # every level sends the same prompts in the same order, named without the run's nonce
    ids = [[r["prompt_id"] for r in reqs if r["level_index"] == i] for i in range(len(LEVELS))]
    assert ids[0] == [f"synthetic:s0:{i}" for i in range(N)] and sorted(ids[1]) == sorted(ids[0])
    assert data.run is not None and data.run["temperature"] == 0.0 and data.run["prompts"]["nonce"] == ""
    out = reqs[0]["output"]
    assert out["chars"] == len(out["text"]) > 0 and len(out["tokens"]) == out["token_count"] == 32
    assert len(out["margins"]) == len(out["logprobs"]) == 32 and all(m > 1.9 for m in out["margins"])
    # the cache was reset before each measured level, and the run said what it did
    resets = [e["value"] for e in data.events if e["kind"] == "cache_reset"]
    assert [r["level_index"] for r in resets] == [0, 1] and all(r["error"] is None for r in resets)
    (check,) = [e["value"] for e in data.events if e["kind"] == "check_outputs"]
    assert check["logprobs"] is True and check["reset"] == "vllm"
    # bounded: every request line with its answer stays small (32 tokens here)
    sizes = [len(json.dumps(r)) for r in reqs]
    assert max(sizes) < 4000


def test_logprobs_are_on_by_default_only_where_the_server_returns_them(records: dict[str, Path]) -> None:
    """The probe before the load asks for logprobs once: the simulator returns them (on, see above);
    a server that ignores the fields gets none asked for, and its answers compare by text."""
    data = read_record(str(records["no_logprobs"]))
    (check,) = [e["value"] for e in data.events if e["kind"] == "check_outputs"]
    assert check["logprobs"] is False and check["logprobs_returned"] is False
    reqs = [r for r in data.requests if not r.get("warmup")]
    assert reqs and all(r["output"]["text"] and r["output"].get("tokens") is None for r in reqs)
    oc = _compare(records, "base", "no_logprobs")
    assert oc.by == "text" and [lv.verdict for lv in oc.levels] == ["lossless", "lossless"]


def test_speculation_without_a_bug_is_lossless(records: dict[str, Path]) -> None:
    oc = _compare(records, "base", "spec")
    assert [lv.verdict for lv in oc.levels] == ["lossless", "lossless"]
    assert oc.overall.identical == oc.overall.compared == N * len(LEVELS) and oc.by == "token"
    assert all(lv.compared == 0 or lv.identical == lv.compared for lv in oc.noise)  # no near-ties: no noise


def test_near_ties_are_numerics_and_give_a_self_divergence_rate(records: dict[str, Path]) -> None:
    oc = _compare(records, "base_ties", "spec_ties")
    assert {lv.verdict for lv in oc.levels} == {"numerics"}
    assert oc.overall.divergent == 0 and oc.overall.near_tie > 0
    for lv in oc.levels:
        assert all(x.near_tie and x.margins_known for x in lv.examples)
    # the noise floor: the baseline's own answers at C=4 against its C=1 answers differ at near-ties
    (floor,) = oc.noise
    assert (floor.concurrency, floor.reference) == (4, 1)
    assert floor.compared == N and floor.near_tie > 0 and floor.divergent == 0 and floor.verdict == "numerics"


def test_a_speculation_bug_diverges(records: dict[str, Path]) -> None:
    oc = _compare(records, "base", "bug")
    assert "diverges" in {lv.verdict for lv in oc.levels} and oc.overall.verdict == "diverges"
    bad = [x for lv in oc.levels for x in lv.examples if not x.near_tie]
    assert bad and all(x.margin_b is not None and x.margin_b < -5 for x in bad)  # B's token: 6 nats down
    assert all(x.a != x.b and x.a and x.b for x in bad)


def test_report_shows_outputs_in_json_text_and_html(records: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(report_command, [str(records["base_ties"]), str(records["spec_ties"]), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    for lv in doc["levels"]:
        mine = lv["sides"]["spec_ties"]["outputs"]
        assert {"compared", "identical", "near_tie", "divergent", "verdict"} <= mine.keys()
        assert mine["compared"] == N and mine["verdict"] == "numerics"
        lo, hi = mine["identical_share"][1:]
        assert 0 <= lo <= mine["identical"] / N <= hi <= 1
    by_c = {lv["concurrency"]: lv["sides"]["base_ties"]["outputs"] for lv in doc["levels"]}
    assert by_c[1] == {"reference": True} and by_c[4]["near_tie"] > 0
    assert doc["outputs"]["spec_ties"]["overall"]["verdict"] == "numerics"

    html = tmp_path / "r.html"
    text = runner.invoke(report_command, [str(records["base"]), str(records["bug"]), "--html", str(html)])
    assert text.exit_code == 0, text.output
    assert "Is it lossless?" in text.output and "diverges" in text.output
    assert "divergent prompts, from the divergence on" in text.output and "NOT a near-tie" in text.output
    page = html.read_text()
    assert "Is it lossless? bug" in page and "Divergent prompts, from the divergence on" in page
    assert '<span class="verdict diverges">diverges</span>' in page
    # the levels pooled, as the text table's "all" row: every prompt compared, B's verdict, A's noise floor
    overall = compare_outputs(load_run(str(records["base"])), load_run(str(records["bug"]))).overall  # type: ignore[union-attr]
    (all_row,) = re.findall(r"<tr><td>all</td>(.*?)</tr>", page)
    cells = re.findall(r"<td>(.*?)</td>", all_row)
    assert cells[0] == str(N * len(LEVELS)) and cells[2:4] == [str(overall.near_tie), str(overall.divergent)]
    assert cells[5] == f"0.0% (0/{N})" and 'class="verdict diverges"' in cells[6]


def test_live_divergence_stops_a_headless_run(records: dict[str, Path], tmp_path: Path) -> None:
    """``specload run --baseline B --check-outputs`` as a user runs it: the built-in simulator with a
    speculation bug; the alert names the prompt, the position and both answers; the run stops
    (--on-divergence stop, headless's default) with exit status 7 and says so in its record."""
    def run(record: Path, *more: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "specload.cli", "run", "-c", "1", "-n", "12", "--api", "chat", "--ignore-eos",
               "--max-tokens", "32", "--check-outputs", "--baseline", str(records["base"]),
               "--record", str(record), "--max-duration", "60", *more,
               "--sim-args", "--step-ms 2 --quiet --spec-tokens 3 --accept-rate 0.9 --spec-bug-rate 0.5"]
        return processes.run(cmd, capture_output=True, text=True, timeout=120)

    rec = tmp_path / "live.jsonl"
    p = run(rec)
    assert p.returncode == ExitCode.DIVERGED, p.stderr
    lines = p.stderr.splitlines()
    (alert,) = [i for i, line in enumerate(lines) if "OUTPUT DIVERGES from the baseline at C=1" in line]
    assert "prompt synthetic:s0:" in lines[alert] and "token " in lines[alert] and "not a near-tie" in lines[alert]
    assert lines[alert + 1].startswith("specload:   baseline: …") and lines[alert + 2].startswith("specload:   this run: …")
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "diverged"
    (found,) = [e["value"] for e in data.events if e["kind"] == "divergence"]
    assert found["a"] != found["b"] and found["margin_b"] < -5 and found["prompt"].startswith("synthetic:s0:")
    assert len([r for r in data.requests if r["ok"]]) < 12  # stopped before the level's end

    # --on-divergence continue: the run goes to its end, and its exit status still says no
    cont = tmp_path / "cont.jsonl"
    p = run(cont, "--on-divergence", "continue")
    assert p.returncode == ExitCode.DIVERGED, p.stderr
    assert p.stderr.count("OUTPUT DIVERGES") == 1  # the level's first; the rest are counted
    assert "outputs at C=1 against the baseline:" in p.stderr and "divergent · diverges" in p.stderr
    data = read_record(str(cont))
    assert data.end is not None and data.end["reason"] == "completed"
    (tally,) = [e["value"] for e in data.events if e["kind"] == "outputs"]
    assert tally["compared"] == 12 and tally["divergent"] >= 2 and tally["verdict"] == "diverges"


def test_headless_status_line_shows_the_identical_share_as_answers_arrive(records: dict[str, Path]) -> None:
    """``specload run --baseline B --check-outputs`` on a terminal (a real pty): the status line
    rewritten during the level counts the answers compared so far, identical and divergent."""
    import os
    import pty
    import select
    import time

    cmd = [sys.executable, "-m", "specload.cli", "run", "-c", "1", "-n", "16", "--api", "chat", "--ignore-eos",
           "--max-tokens", "32", "--check-outputs", "--baseline", str(records["base"]), "--on-divergence", "continue",
           "--max-duration", "60", "--sim-args", "--step-ms 20 --quiet --spec-tokens 3 --accept-rate 0.9 "
           "--spec-bug-rate 0.2"]
    master, slave = pty.openpty()
    proc = processes.popen(cmd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed its end
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
    text = seen.decode(errors="replace")
    assert proc.returncode == ExitCode.DIVERGED, text
    statuses = [p for p in text.split("\r\x1b[K") if p.startswith("specload: ramping C=1")]
    counts = [(int(m[1]), int(m[2])) for s in statuses if (m := re.search(r" · out (\d+)/(\d+) same", s))]
    assert counts, statuses  # the share while the level ran, not only at its end
    assert all(0 <= same <= n < 16 for same, n in counts) and counts == sorted(counts, key=lambda c: c[1])
    assert any("DIVERGE" in s for s in statuses) or counts[-1][0] == counts[-1][1], statuses
    assert "outputs at C=1 against the baseline:" in text  # and the level's tally at its end


def test_multi_turn_answers_compare_turn_by_turn(tmp_path: Path) -> None:
    """--check-outputs --multi-turn: each turn is named by its conversation's row in the dataset and
    its number, and report A B pairs the turns. A turn's prompt is its whole history: after a turn
    that answered otherwise, the next is another prompt, not compared (not a false divergence)."""
    from specload.engine.datasets import load_dataset

    fields = {**CHECK, "dataset": "builtin:chat", "multi_turn": True}
    recs = {name: virtual_record(tmp_path / f"{name}.jsonl", levels=(2,), n=12, seed=3, label=name,
                                 sim={"step_ms": 5, **sim}, fields=fields)
            for name, sim in (("base", {"spec_tokens": 0}), ("spec", {"spec_tokens": 3, "accept_rate": 0.8}),
                              ("bug", {"spec_tokens": 3, "accept_rate": 0.8, "spec_bug_rate": 0.3}))}
    rows = load_dataset("builtin:chat").conversations
    reqs = [r for r in read_record(str(recs["base"])).requests if not r.get("warmup")]
    assert reqs and all(r["ok"] for r in reqs)
    for r in reqs:  # "builtin:chat:ROW:tTURN": the row holds that many user turns, the record says which
        name, row, turn = r["prompt_id"].rsplit(":", 2)
        assert name == "builtin:chat" and turn == f"t{r['turn']}" and len(rows[int(row)].turns) > 1
        assert r["turn"] <= len(rows[int(row)].turns) and r["output"]["text"]
    assert max(r["turn"] for r in reqs) > 1 and len({r["prompt_sha"] for r in reqs}) == len(reqs)

    oc = _compare(recs, "base", "spec")
    assert oc.overall.compared == len(reqs) and oc.overall.verdict == "lossless" and oc.overall.mismatched == 0
    bug = _compare(recs, "base", "bug")
    assert bug.overall.verdict == "diverges" and bug.overall.divergent > 0
    assert bug.overall.compared + bug.overall.mismatched == len(reqs) and bug.overall.mismatched > 0
    assert any("an earlier turn's answer" in n for n in bug.notes)
    ex = [x for lv in bug.levels for x in lv.examples]
    assert ex and all(re.fullmatch(r"builtin:chat:\d+:t\d+", x.prompt) for x in ex)
