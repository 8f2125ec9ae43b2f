"""``specload run`` as a user runs it: a real subprocess against a real simulator subprocess.

Covers the record (schema of every line, the report of it), Ctrl-C/SIGTERM, and bad input giving a
one-line error and a non-zero exit status (never a traceback).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from specload.record.reader import read_record
from specload.record.schema import END_KEYS, EVENT_KEYS, LEVEL_KEYS, REQUEST_KEYS
from tests import processes
from tests.integration.conftest import free_port, sim_process
from tests.processes import SPECLOAD, specload
from tests.waiting import holds, pid_gone, wait_until


def run(args: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return specload(*args, timeout=timeout, **kw)


@pytest.fixture
def sim_url():
    with sim_process("--ttft-ms", "10", "--itl-ms", "4", "--spec-tokens", "2", "--seed", "1") as url:
        yield url


def check_schema(path: Path) -> dict:
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert lines[0]["type"] == "run" and lines[0]["version"] == 1
    assert lines[-1]["type"] == "end"
    required = {"request": REQUEST_KEYS, "level": LEVEL_KEYS, "event": EVENT_KEYS, "end": END_KEYS}
    counts: dict[str, int] = {}
    for obj in lines:
        t = obj["type"]
        counts[t] = counts.get(t, 0) + 1
        for key in required.get(t, ()):
            assert key in obj, (t, key, obj)
        if t == "request":
            assert obj["error"] is None or {"kind", "detail"} <= set(obj["error"])
            assert isinstance(obj["start_s"], float)
    return counts


def test_headless_run_writes_a_complete_record_and_report_reprints_the_table(sim_url: str, tmp_path: Path) -> None:
    rec = tmp_path / "run.jsonl"
    p = run(["run", sim_url, "-c", "1,3", "-n", "6", "--max-tokens", "12", "--ignore-eos", "--record", str(rec),
             "--warmup-requests", "2"])
    assert p.returncode == 0, p.stderr
    # the per-level line, in the format of the per-level script
    assert "C=  1 | 6 requests | throughput:" in p.stderr and "ok: 6/6" in p.stderr
    assert "C=  3 | 6 requests" in p.stderr
    counts = check_schema(rec)
    assert counts["request"] == 14 and counts["level"] == 2
    data = read_record(str(rec))
    assert data.end["reason"] == "completed" and not data.truncated
    assert all(r["output_tokens"] == 12 and not r["tokens_estimated"] for r in data.requests)
    rep = run(["report", str(rec)])
    assert rep.returncode == 0, rep.stderr
    # the report's table has the same numbers as the run's final table
    for lv in data.levels:
        assert f"{lv['throughput_tok_s']:.1f}" in rep.stdout
        assert f"{lv['throughput_tok_s']:.1f}" in p.stdout
    # and the end line, in seconds to one decimal (the 2 warm-up requests are not counted)
    assert f"end: completed after {data.end['elapsed_s']:.1f} s, 12/12 ok" in rep.stdout, rep.stdout


def test_json_summary_on_stdout(sim_url: str) -> None:
    p = run(["run", sim_url, "-c", "2", "-n", "4", "--max-tokens", "8", "--json"])
    assert p.returncode == 0, p.stderr
    out = orjson.loads(p.stdout)
    assert out["levels"][0]["concurrency"] == 2 and out["levels"][0]["requests"] == 4
    assert out["ok"] == 4 and out["reason"] == "completed"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_records_in_flight_as_cancelled_and_closes_the_record(tmp_path: Path, sig: int) -> None:
    # SIGHUP: the terminal went away. The built-in simulator runs in a session of its own, so
    # only specload can stop it (it was left running before SIGHUP was handled).
    rec = tmp_path / "cut.jsonl"
    proc = processes.popen(
        SPECLOAD + ["run", "-c", "4", "-n", "100000", "--max-tokens", "500", "--ignore-eos", "--record", str(rec),
                    "--sim-args", "--ttft-ms 5 --itl-ms 20 --spec-tokens 0 --quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as from a terminal: a suite run under nohup passes SIGHUP ignored down, and specload keeps
        # an ignored SIGHUP ignored, as nohup asks
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    # the four requests in flight at the server (its /metrics, in the record's server lines): a signal
    # sent as soon as the level event was written once found none of them recorded (1 CI run of many)
    wait_until(lambda: holds(rec, b'"running":4.0'), what="the four requests in flight at the server")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err  # 130 SIGINT, 143 SIGTERM, 129 SIGHUP, as a shell reports them
    assert "Traceback" not in err
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "interrupted"
    cancelled = [r for r in data.requests if (r["error"] or {}).get("kind") == "cancelled"]
    assert len(cancelled) == 4
    sim_pid = int(re.search(r"started server \(pid (\d+)\)", err).group(1))
    wait_until(lambda: pid_gone(sim_pid), what="the built-in simulator to end with specload")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["not-a-url"], "bad URL"),
        (["http://127.0.0.1:99999"], "bad port"),
        (["-c", "0"], "at least 1"),
        (["-c", "a,b"], "not a whole number"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--metrics-interval", "0"], "--metrics-interval"),
        (["--metrics-interval", "nan"], "--metrics-interval"),
        (["--extra-body", "{bad"], "--extra-body"),
        (["--record", "/nonexistent-dir/x.jsonl"], "does not exist"),
        (["--record", "/tmp"], "directory"),
        (["--record", "/proc/specload.jsonl"], "not writable"),  # access() says yes to root here
        (["--dataset", "/nonexistent.jsonl"], "cannot read"),
        (["--dataset", "builtin:code"], "the built-in categories are chat, coding, math,"),
        (["--output-len", "dataset"], "--output-len dataset needs --dataset"),
        (["--trace", "/dev/zero"], "not a text file"),
        (["--trace", "/nonexistent.jsonl"], "cannot read"),
        (["--trace-speed", "3"], "apply to --trace FILE"),
        (["--dataset", "/dev/zero"], "not a text file"),
        (["--header", "NoColon"], "bad header"),
        (["--requests-per-level", "-3"], "at least 1"),
        (["http://[::1"], "bad URL"),
        (["--max-duration", "-5"], "--max-duration must be positive"),
        (["--max-requests", "0"], "--max-requests must be at least 1"),
        (["--sim-args", "--bogus"], "No such option '--bogus'"),
        (["--sim-args", "--ttft-ms -3"], "--ttft-ms"),
        (["--sim-args", "--help"], "specload sim --help"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args: list[str], needle: str) -> None:
    p = run(["run", *args], timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert needle in p.stderr
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_an_unknown_theme_is_one_line_before_the_dashboard_starts(tmp_path: Path) -> None:
    # the dashboard used to start and fall back with a toast; the name is checked before any load
    themes = tmp_path / "specload" / "themes"
    themes.mkdir(parents=True)
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    for name in ("nope", "broken"):
        p = run(["tui", "--no-record", "--theme", name], timeout=30, env=env)
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert f"unknown theme {name!r}: one of " in p.stderr and "specload-dark" in p.stderr
        assert "broken.toml" in p.stderr and "not a colour" in p.stderr  # why 'broken' is not there


def test_a_line_break_in_an_extra_argument_stays_on_the_error_line() -> None:
    # found by the option rules' property test: click quoted the extra argument as typed, line break and all
    p = run(["run", "--find-max", "nan", "a\r\nb: c"], timeout=30)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("specload: error: "), p.stderr
    assert "a\\r\\nb: c" in p.stderr


def test_the_builtin_set_tags_every_request_with_its_category(sim_url: str, tmp_path: Path) -> None:
    """--dataset builtin: the categories interleaved, each request line tagged, the start line and
    the record saying what was sent and how long the answers are (through worker processes too)."""
    rec = tmp_path / "run.jsonl"
    p = run(["run", sim_url, "-c", "4", "-n", "24", "--max-tokens", "12", "--dataset", "builtin",
             "--workers", "2", "--record", str(rec)], timeout=90)
    assert p.returncode == 0, p.stderr
    assert "prompts: builtin (8 categories, " in p.stderr
    assert "answers: natural stops (EOS), capped at 12 tokens (--max-tokens)" in p.stderr
    lines = [orjson.loads(x) for x in rec.read_bytes().splitlines()]
    prompts = lines[0]["prompts"]
    assert prompts["dataset"]["name"] == "builtin" and len(prompts["dataset"]["categories"]) == 8
    assert prompts["output"].startswith("natural stops") and lines[0]["ignore_eos"] is False
    reqs = [x for x in lines if x["type"] == "request"]
    assert len(reqs) == 24
    cats = [r["category"] for r in reqs]
    assert set(cats) == set(prompts["dataset"]["categories"])  # 24 requests: each category three times
    assert all(cats.count(c) == 3 for c in set(cats))


def test_a_trace_is_replayed_at_its_times_with_its_lengths_and_shared_blocks(tmp_path: Path) -> None:
    """--trace: each request at its timestamp / speed (never early, in order), its prompt as long as
    the trace says in the server's own count, its output length sent with ignore_eos, and the blocks
    the hash ids share served by the server's prefix cache."""
    rows = [{"timestamp": 100 * i, "input_length": 150 + 10 * i, "output_length": 5 + i,
             "hash_ids": [1, 2, 10 + i, 50 + i] if i % 2 else [1, 20 + i, 30 + i, 40 + i]} for i in range(8)]
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    rec = tmp_path / "run.jsonl"
    p = run(["run", "-c", "1,16", "--trace", str(trace), "--trace-speed", "2", "--trace-block-tokens", "64",
             "--sim-args", "--prefix-cache --ttft-ms 5 --itl-ms 2", "--record", str(rec)], timeout=90)
    assert p.returncode == 0, p.stderr
    assert "prompts: trace " in p.stderr and "8 requests over 0.7 s" in p.stderr
    lines = [orjson.loads(x) for x in rec.read_bytes().splitlines()]
    assert lines[0]["ignore_eos"] is True and lines[0]["prompts"]["trace"]["distinct_blocks"] == 22
    levels = [x for x in lines if x["type"] == "event" and x["kind"] == "level"]
    assert [lv["value"]["concurrency"] for lv in levels] == [16]  # one level, capped at the largest -c
    reqs = sorted((x for x in lines if x["type"] == "request"), key=lambda r: r["id"])
    assert len(reqs) == 8 and all(r["ok"] for r in reqs)
    assert [r["prompt_tokens"] for r in reqs] == [row["input_length"] for row in rows]
    assert [r["output_tokens"] for r in reqs] == [row["output_length"] for row in rows]
    # each at its time from the level's start, or later (a busy machine sends late, never early: the
    # first request's time is no reference, a late first one lets the next ones catch up)
    t0 = levels[0]["t_s"]
    for r, row in zip(reqs, rows, strict=True):
        assert r["start_s"] - t0 >= row["timestamp"] / 1000 / 2 - 0.002
    assert [r["start_s"] for r in reqs] == sorted(r["start_s"] for r in reqs)
    # blocks 1 and 2 (128 tokens) open every odd row, block 1 every even one: the cache serves them
    cached = [r.get("prompt_tokens_cached") or 0 for r in reqs]
    assert cached[0] == 0 and all(c >= 48 for c in cached[1:]) and all(c >= 112 for c in cached[3::2])


def test_unreachable_server_is_one_line_exit_1() -> None:
    p = run(["run", f"http://127.0.0.1:{free_port()}", "-c", "1", "-n", "1", "--no-health"], timeout=30)
    assert p.returncode == 1
    assert "cannot connect" in p.stderr and "Traceback" not in p.stderr


def test_report_of_a_record_cut_mid_write(sim_url: str, tmp_path: Path) -> None:
    rec = tmp_path / "run.jsonl"
    p = run(["run", sim_url, "-c", "2", "-n", "6", "--max-tokens", "8", "--record", str(rec)])
    assert p.returncode == 0, p.stderr
    raw = rec.read_bytes()
    # cut inside the last request line, before its level line: as a killed process leaves it
    lines = raw.splitlines(keepends=True)
    last_req = max(i for i, x in enumerate(lines) if b'"type":"request"' in x)
    cut = b"".join(lines[:last_req]) + lines[last_req][:40]
    rec.write_bytes(cut)
    data = read_record(str(rec))
    assert data.truncated and data.end is None
    assert len(data.requests) == 5
    rep = run(["report", str(rec)])
    assert rep.returncode == 0, rep.stderr
    assert "recomputed" in rep.stdout and "cut short" in rep.stdout


def test_report_of_a_missing_file_is_one_line() -> None:
    p = run(["report", "/nonexistent/x.jsonl"])
    assert p.returncode == 2 and "cannot read" in p.stderr and "Traceback" not in p.stderr


def test_core_never_imports_textual() -> None:
    code = (
        "import sys\n"
        "import specload.session, specload.headless, specload.cli_run, specload.engine.runner\n"
        "import specload.sim.server, specload.watch.detector, specload.watch.logline, specload.watch.scan_cli\n"
        "import specload.report.report\n"
        "from specload.cli import cli\n"
        "for name in ('run', 'report', 'sim', 'scan-log'):\n"
        "    cli.get_command(None, name)\n"
        "assert 'textual' not in sys.modules, [m for m in sys.modules if m.startswith('textual')]\n"
        "print('ok')\n"
    )
    p = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_many_streams_against_the_uvloop_simulator_all_succeed(sim_url: str) -> None:
    # the simulator subprocess runs on uvloop; its pinned scheduler once failed under load there
    p = run(["run", sim_url, "-c", "16", "-n", "128", "--max-tokens", "64", "--ignore-eos", "--json"])
    assert p.returncode == 0, p.stderr
    out = orjson.loads(p.stdout)
    assert out["ok"] == 128 and out["errors"] == {}


def test_a_run_where_every_request_fails_exits_5(tmp_path: Path) -> None:
    p = run(["run", "-c", "2", "-n", "4", "--sim-args", "--fail-rate 1 --quiet --ttft-ms 1 --itl-ms 1"])
    assert p.returncode == 5, p.stderr
    assert "every request failed" in p.stderr


def test_tui_headless_is_the_same_as_run(sim_url: str) -> None:
    p = run(["tui", "--headless", sim_url, "-c", "2", "-n", "4", "--max-tokens", "8", "--json"])
    assert p.returncode == 0, p.stderr
    assert orjson.loads(p.stdout)["levels"][0]["requests"] == 4


@pytest.mark.slow
def test_a_terminal_gets_a_status_line_a_pipe_does_not(sim_url: str) -> None:
    """stderr on a terminal (a real pty): a status line rewritten in place during the level and
    erased before the level line; stderr on a pipe: plain lines only."""
    import pty
    import select

    args = ["run", sim_url, "-c", "2", "-d", "2.5", "--max-tokens", "40", "--ignore-eos"]
    master, slave = pty.openpty()
    proc = processes.popen(SPECLOAD + args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    # at least one status line while the 2.5 s level ran, with the live figures
    statuses = [part for part in text.split("\r\x1b[K") if part.startswith("specload: ramping C=2")]
    assert statuses, text
    assert all("level 1/1" in s and "tok/s" in s and " ok" in s for s in statuses), statuses
    # the level line starts on a line of its own: one the status was erased from, or a fresh one
    # after a warning that erased it first
    assert re.search(r"(\r\x1b\[K|\r\n)C=  2 \|", text), text
    last = text.split("\r\x1b[K")[-1]  # what is left on screen after the last erase
    assert last == "" or last.endswith("\n"), repr(text[-300:])  # a whole line, not a status
    assert b"\x1b" not in out  # the final table on stdout (a pipe) has no control codes

    piped = run(args)
    assert piped.returncode == 0
    assert "\x1b" not in piped.stderr and "\r" not in piped.stderr


def _table_lines_fit(text: str, width: int) -> None:
    assert "…" not in text, text  # never an ellipsised number or C
    assert all(len(line) <= width for line in text.splitlines()), max(text.splitlines(), key=len)


def test_tables_in_a_pipe_are_fitted_to_columns_never_cut(sim_url: str, tmp_path: Path) -> None:
    """``--baseline`` and ``--slo`` made the table wider than the fixed 160 columns of a pipe, and C
    printed as ``…``: now a pipe honours COLUMNS and a table too wide wraps into parts, whole."""
    base, run_b = tmp_path / "base.jsonl", tmp_path / "b.jsonl"
    args = [sim_url, "-c", "1,2", "-n", "6", "--max-tokens", "12"]
    assert run(["run", *args, "--record", str(base)]).returncode == 0
    p = run(["run", *args, "--slo", "ttft_p99<=2s", "--baseline", str(base), "--record", str(run_b)],
            env={**os.environ, "COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    table = p.stdout.split("\nrecord:")[0]
    _table_lines_fit(table, 80)
    data = read_record(str(run_b))
    for lv in data.levels:  # every level's C, throughput and verdict, whole
        assert re.search(rf"^\s*{lv['concurrency']} │\s+{lv['throughput_tok_s']:.1f} │", table, re.M), table
    assert "verdict" in table and "baseline" in table and "good %" in table
    for width in (80, 120, 160):
        rep = run(["report", str(run_b)], env={**os.environ, "COLUMNS": str(width)})
        assert rep.returncode == 0, rep.stderr
        _table_lines_fit(rep.stdout, width)
        assert all(f"{lv['throughput_tok_s']:.1f}" in rep.stdout for lv in data.levels)
    cmp = run(["report", str(base), str(run_b)], env={**os.environ, "COLUMNS": "80"})
    assert cmp.returncode == 0, cmp.stderr
    _table_lines_fit(cmp.stdout, 80)
    assert "C=1" in cmp.stdout and "C=2" in cmp.stdout and "verdict" in cmp.stdout


def test_a_headless_run_records_by_default(sim_url: str, tmp_path: Path) -> None:
    """As the dashboard does: without --record a run records to specload-DATE-TIME.jsonl in the current
    directory (a long sweep is never lost), and says so; --no-record records nothing; a run that
    never starts leaves no empty file behind."""
    args = ["run", sim_url, "-c", "1,2", "-n", "4", "--max-tokens", "8"]
    p = run(args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (rec,) = tmp_path.glob("specload-*.jsonl")
    assert re.fullmatch(r"specload-\d{8}-\d{6}\.jsonl", rec.name)
    assert f"recording to {rec.name}" in p.stderr and f"record: {rec.name}" in p.stdout
    data = read_record(str(rec))
    assert [lv["concurrency"] for lv in data.levels] == [1, 2] and data.end["reason"] == "completed"
    rec.unlink()
    quiet = run([*args, "--no-record"], cwd=tmp_path)
    assert quiet.returncode == 0 and "recording to" not in quiet.stderr
    assert not list(tmp_path.glob("*.jsonl"))
    both = run([*args, "--no-record", "--record", "x.jsonl"], cwd=tmp_path)
    assert both.returncode == 2 and "--no-record and --record" in both.stderr
    gone = run(["run", f"http://127.0.0.1:{free_port()}", "-c", "1", "-n", "1"], cwd=tmp_path)
    assert gone.returncode == 1, gone.stderr
    assert not [f for f in tmp_path.iterdir() if f.stat().st_size == 0]  # nothing empty left
