"""``specload sweep`` as a user runs it: a real subprocess launching simulator configurations as
servers (speculation on and off, one crashing after N requests, one that fails to start, one slow to
become ready whose health says 200 while it loads and whose speculation has a bug that
``--check-outputs`` catches), then ``report DIR``; and a sweep killed, resumed,
interrupted with SIGINT and resumed again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specload.record.reader import read_record
from specload.watch.command import process_start_time
from tests.fake_nvidia_smi import install as install_smi
from tests.integration.real_server_util import require_real_server, server_binary, server_model, wait_until

SIM = (f"{sys.executable} -m specload.sim --port {{port}} --ttft-ms 5 --itl-ms 4 --accept-spread 0 --seed 3 "
       "{args}")
SPECLOAD = [sys.executable, "-m", "specload.cli"]


def _state(out: Path) -> dict:
    try:
        return json.loads((out / "sweep.json").read_text())
    except (OSError, ValueError):
        return {}


def _pids(out: Path) -> list[int]:
    return [a["server_pid"] for s in _state(out).get("schedule", []) for a in s["attempts"] if a.get("server_pid")]


def _kill_leftovers(out: Path) -> None:
    for pid in _pids(out):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_sweep_of_simulator_configurations(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    install_smi(bindir)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    args = [*SPECLOAD, "sweep", "--launch", SIM,
            "--config", "off=--spec-tokens 0", "--config", "on=--spec-tokens 3",
            "--config", "crashy=--spec-tokens 3 --crash-after 12", "--config", "nostart=--fail-start",
            "--config", "slow=--spec-tokens 3 --start-delay 2 --health-while-loading --spec-bug-rate 0.5",
            "-c", "1,4", "-n", "16", "--max-tokens", "16", "--ignore-eos", "--gpu-metrics", "nvidia-smi",
            "--slo", "tpot_p50<=3.5ms", "--check-outputs",
            "--out", str(out), "--json"]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=400, env=env)
    finally:
        _kill_leftovers(out)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 3, proc.stderr[-3000:]  # ran to its end; a configuration crashed
    doc = json.loads(proc.stdout)
    assert doc == _state(out) and doc["complete"]
    c = {x["name"]: x for x in doc["configs"]}
    assert {n: x["status"] for n, x in c.items()} == {
        "off": "ok", "on": "ok", "crashy": "crashed", "nostart": "failed_to_start", "slow": "ok"}

    # a crash mid-run: its root cause, retried once, then crashed; the sweep went on
    crash = c["crashy"]["crash"]
    assert crash["exception_type"] == "AttributeError" and "EAGLEWorkerV2" in crash["error"]
    assert crash["ranks"] == ["TP0"] and crash["at_concurrency"] == 1 and "eagle_worker_v2.py" in crash["excerpt"]
    assert [a["status"] for r in c["crashy"]["runs"] for a in r["attempts"]] == ["crashed", "crashed"]
    # one that never started: the load's traceback on two ranks, the exit status, the log's last lines
    cause = c["nostart"]["crash"]
    assert cause["kind"] == "failed_to_start" and cause["exception_type"] == "torch.OutOfMemoryError"
    assert cause["ranks"] == ["TP0", "TP1"] and cause["exit"] == "exited with code 1"
    assert any("Received sigquit" in line for line in cause["log_tail"])
    assert c["nostart"]["startup_s"] is None and len(c["nostart"]["runs"][0]["attempts"]) == 2

    # the slow one: health said 200 while it loaded; ready meant a request answered, so not one
    # request of its load failed and its API was found on the ready server
    assert c["slow"]["startup_s"] >= 2.0 and c["off"]["startup_s"] > 0  # its load alone takes 2 s
    slow = read_record(str(out / c["slow"]["runs"][0]["record"]))
    assert slow.run["api"] == "chat"
    assert all(lv["ok"] == lv["requests"] for lv in slow.levels)
    probes = [p for e in slow.events if e["kind"] == "probe" for p in e["value"]["requests"]]
    assert probes[-1]["status"] == 200 and probes[-1]["ready_check"]

    # the same workload for every configuration: one prompt nonce, one seed
    records = [read_record(str(out / c[n]["runs"][0]["record"])) for n in ("off", "on", "slow")]
    assert len({r.run["prompts"]["nonce"] for r in records}) == 1 and len({r.run["seed"] for r in records}) == 1

    # speculation on against off: the settings imply about 2.5x fewer decode steps at C=1
    level1 = next(lv for lv in doc["levels"] if lv["concurrency"] == 1)
    on = level1["sides"]["on"]["metrics"]["throughput"]
    # (unsound: the machine's other work starved specload's client during the level, so no verdict)
    assert on["verdict"] in ("better", "unsound") and on["ratio"] > 1.4, on
    better = [n for n in ("on", "slow") if level1["sides"][n]["metrics"]["throughput"]["verdict"] == "better"]
    assert doc["best_by_level"]["1"]["config"] in (better or ["off"]) and doc["schedule_text"]
    differs = {d["key"]: (d["baseline"], d["value"]) for d in c["on"]["differs"]}
    assert differs["/get_server_info.speculative_algorithm"] == (None, "EAGLE3")
    assert not any("port" in k for k in differs)

    # --check-outputs passed through: speculation done right is lossless, the buggy one is caught
    outputs = {n: [lv["sides"][n]["outputs"]["verdict"] for lv in doc["levels"]] for n in ("on", "slow")}
    assert outputs == {"on": ["lossless", "lossless"], "slow": ["diverges", "diverges"]}, outputs

    # capacity under --slo: off's 4 ms steps miss a 3.5 ms TPOT at C=1; speculation's ~1.7 ms meet it
    assert c["off"]["capacity"]["value"] is None and c["off"]["capacity"]["how"] == "ramp"
    assert c["on"]["capacity"]["value"] in (1, 4) and c["crashy"]["capacity"] is None

    # every server it started is gone, its GPU memory read before and after each run (nvidia-smi double)
    assert all(process_start_time(pid) is None for pid in _pids(out))
    assert not any(a.get("notes") for r in doc["configs"] for run in r["runs"] for a in run["attempts"])

    table = subprocess.run([*SPECLOAD, "report", str(out), "--html", str(tmp_path / "sw.html")], capture_output=True,
                           text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "best by level" in table.stdout and "failed_to_start" in table.stdout and "OutOfMemoryError" in table.stdout
    assert "capacity (ramp): off none met" in table.stdout and "diverges" in table.stdout
    page = (tmp_path / "sw.html").read_text()
    assert "Configurations" in page and "torch.OutOfMemoryError" in page and doc["schedule_text"] in page


def _run(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*SPECLOAD, "sweep", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _running(out: Path, index: int) -> int | None:
    slots = _state(out).get("schedule") or []
    if len(slots) <= index or slots[index]["status"] != "running":
        return None
    att = slots[index]["attempts"][-1]
    return att.get("server_pid") if att.get("status") == "running" else None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sweep_resumes_after_a_kill_and_a_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    plan = tmp_path / "plan.toml"  # the plan file and its grid: configurations spec-tokens=0 and spec-tokens=3
    plan.write_text(f"launch = {json.dumps(SIM)}\nrepeats = 2\n[grid]\nspec-tokens = [0, 3]\n[run]\n"
                    "concurrency = [1]\nrequests-per-level = 10\nmax-tokens = 16\nignore-eos = true\n")
    try:
        first = _run(out, str(plan), "--out", str(out))
        pid = wait_until(lambda: _running(out, 1), 120, "the second run's server")
        first.kill()  # SIGKILL: nothing is cleaned up, its server stays
        first.wait(10)
        assert isinstance(pid, int) and process_start_time(pid) is not None
        kept = out / _state(out)["schedule"][0]["attempts"][-1]["record"]
        kept_mtime = kept.stat().st_mtime_ns

        second = _run(out, "--resume", str(out))
        pid2 = wait_until(lambda: _running(out, 2), 120, "the resumed sweep's third run")
        assert process_start_time(pid) is None  # the killed sweep's server was stopped first
        second.send_signal(signal.SIGINT)  # Ctrl-C: the server it started is stopped, the folder resumable
        _, err = second.communicate(timeout=60)
        assert second.returncode == 130, err
        assert "--resume" in err and "Traceback" not in err
        assert process_start_time(pid2) is None
        assert _state(out)["schedule"][2]["status"] == "interrupted"

        third = _run(out, "--resume", str(out), "--json")
        stdout, err = third.communicate(timeout=200)
    finally:
        _kill_leftovers(out)
    assert third.returncode == 0, err[-3000:]
    doc = json.loads(stdout)
    slots = doc["schedule"]
    off, on = "spec-tokens=0", "spec-tokens=3"
    assert [(s["config"], s["status"]) for s in slots] == [(off, "ok"), (on, "ok"), (on, "ok"), (off, "ok")]
    assert doc["plan"]["configs"][1]["args"] == "--spec-tokens 3"
    assert kept.stat().st_mtime_ns == kept_mtime and slots[0]["attempts"][-1]["record"] == str(kept.relative_to(out))
    assert [a["status"] for a in slots[1]["attempts"]] == ["interrupted", "ok"]
    assert [a["status"] for a in slots[2]["attempts"]] == ["interrupted", "ok"]
    assert len({a["record"] for s in slots for a in s["attempts"]}) == 6  # no record written over
    assert doc["run_to_run"]["accounted"]  # two runs a side: run-to-run variation from the repeats
    assert all(len([r for r in x["runs"] if r["status"] == "ok"]) == 2 for x in doc["configs"])


def test_a_busy_fixed_port_is_waited_for_then_reported(tmp_path: Path) -> None:
    import socket

    out = tmp_path / "sw"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        proc = subprocess.run([*SPECLOAD, "sweep", "--launch", f"{sys.executable} -m specload.sim --port {port} {{args}}",
                               "--url", f"http://127.0.0.1:{port}", "--config", "a=--api-key sk-Secret9876",
                               "--port-wait", "0.6", "--out", str(out), "--json"], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 3, proc.stderr
    # the plan's secret: kept for a resume in a file only its owner reads, masked wherever it is shown
    assert "sk-Secret9876" not in proc.stdout + proc.stderr and "--api-key ***" in proc.stdout
    assert "sk-Secret9876" in (out / "sweep.json").read_text() and (out / "sweep.json").stat().st_mode & 0o077 == 0
    assert time.monotonic() - t0 >= 1.2  # two attempts, each waited for the port
    (cfg,) = json.loads(proc.stdout)["configs"]
    assert cfg["status"] == "failed_to_start" and f"port {port} is in use" in cfg["crash"]["message"]
    assert "still in use before the start: waiting up to 0.6 s" in proc.stderr


@pytest.mark.real_server
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sweep_of_the_real_llama_server(tmp_path: Path) -> None:
    """Two configurations of the real llama-server: 2 slots, and 4 slots with its n-gram speculation."""
    require_real_server()
    out = tmp_path / "sw"
    launch = (f"{server_binary()} -m {server_model()} -a tiny --host 127.0.0.1 --port {{port}} -c 32768 -t 1 "
              "--metrics --slots --log-timestamps --log-prefix {args}")
    try:
        proc = subprocess.run([*SPECLOAD, "sweep", "--launch", launch, "--config", "np2=-np 2",
                               "--config", "np4-spec=-np 4 --spec-type ngram-mod", "-c", "1,4", "-n", "24",
                               "--max-tokens", "64", "--api", "chat", "--out", str(out), "--json"],
                              capture_output=True, text=True, timeout=280)
    finally:
        _kill_leftovers(out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    c = {x["name"]: x for x in doc["configs"]}
    assert c["np2"]["status"] == c["np4-spec"]["status"] == "ok"
    assert 0 < c["np2"]["startup_s"] < 30 and 0 < c["np4-spec"]["startup_s"] < 30
    # what llama-server says of itself: /props, its slots differing
    assert c["np2"]["server_info"]["/props.total_slots"] == 2
    assert {"key": "/props.total_slots", "baseline": 2, "value": 4} in c["np4-spec"]["differs"]
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for lv in doc["levels"]:
        m = lv["sides"]["np4-spec"]["metrics"]["throughput"]
        assert m["ratio"] > 0 and m["verdict"] in ("better", "worse", "no_difference", "insufficient", "unsound")
    for name in c:
        record = read_record(str(out / c[name]["runs"][0]["record"]))
        assert all(lv["ok"] == lv["requests"] for lv in record.levels)
    assert all(process_start_time(pid) is None for pid in _pids(out))
