"""The TUI keeps its result (issue 11): a two-minute ramp once left nothing behind after 'q'.

Without --record the dashboard records to specload-DATE-TIME.jsonl in the current directory (--no-record:
none); on quit it prints the level table a headless run prints, how the run ended and where the record
is. A real process on a real pty, as a person runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specload.cli_run import default_record
from specload.formatting import latency
from specload.record.reader import read_record
from tests.conftest import make_config
from tests.tui_pty import TuiInPty
from tests.waiting import wait_until

SIM = "--ttft-ms 5 --itl-ms 5 --spec-tokens 0 --quiet"


def _record_in(folder: Path) -> Path:
    found = wait_until(lambda: [p for p in folder.glob("specload-*.jsonl") if b'"type":"level"' in p.read_bytes()],
                       what="a record with a level in the current directory")
    return found[0]  # type: ignore[index]


def test_quit_prints_the_table_and_where_the_default_record_is(tmp_path: Path) -> None:
    with TuiInPty(["-c", "1", "-n", "4", "--max-tokens", "8", "--sim-args", SIM], cwd=tmp_path, cols=160) as tui:
        rec = _record_in(tmp_path)
        assert re.fullmatch(r"specload-\d{8}-\d{6}\.jsonl", rec.name)
        tui.send(b"q")
        assert tui.wait_exit() == 0
    # what is left on the terminal once the dashboard's alternate screen is gone
    after = bytes(tui.output).rsplit(b"\x1b[?1049l", 1)[-1]
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", after).decode(errors="replace")
    assert "TTFT p50/90/95/99 ms" in text and "tok/s" in text  # the level table, as headless prints it
    assert f"record: {rec.name}" in text and "end: completed" in text
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "completed" and len(data.levels) == 1


def test_the_default_record_is_named_by_time_and_skipped_on_request(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = make_config(None)
    named, note = default_record(cfg, False, now=0.0)
    assert named.record.path is not None and named.record.path.startswith("specload-19") and named.record.path in note
    again, _ = default_record(cfg, False, now=0.0)  # the same second: a file of its own
    assert again.record.path == named.record.path.replace(".jsonl", "-2.jsonl")
    assert default_record(cfg, True) == (cfg, None)
    given = make_config(None, path=str(tmp_path / "mine.jsonl"))
    assert default_record(given, False) == (given, None)
    (tmp_path / "ro").mkdir()
    monkeypatch.chdir(tmp_path / "ro")
    (tmp_path / "ro").chmod(0o500)
    try:
        kept, note = default_record(cfg, False)
        import os

        if os.access(".", os.W_OK):  # root writes anywhere: nothing to check
            return
        assert kept.record.path is None and note is not None and note.startswith("no record:")
    finally:
        (tmp_path / "ro").chmod(0o700)


@pytest.mark.parametrize("cols", [80, 120])
def test_a_narrower_terminal_gets_the_table_fitted_to_it(tmp_path: Path, cols: int) -> None:
    """At 120 columns the quit summary once lost its C column, at 80 TTFT and TPOT: now it is the
    level table wrapped to the terminal's width, every figure whole."""
    with TuiInPty(["-c", "1", "-n", "3", "--max-tokens", "8", "--sim-args", SIM], cwd=tmp_path, cols=cols,
                  rows=24 if cols == 80 else 40) as tui:
        rec = _record_in(tmp_path)
        tui.send(b"q")
        assert tui.wait_exit() == 0
    after = bytes(tui.output).rsplit(b"\x1b[?1049l", 1)[-1]
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", after).decode(errors="replace").replace("\r\n", "\n")
    assert "end: completed" in text and "…" not in text
    assert all(len(line) <= cols for line in text.splitlines()), text
    (level,) = read_record(str(rec)).levels
    # C, throughput and ok lead the first part; TTFT and TPOT are there with all their percentiles
    assert re.search(rf"^1 │\s+{level['throughput_tok_s']:.1f} │", text, re.M), text
    assert "TTFT" in text and "TPOT" in text and "3/3" in text
    p = [level[f"ttft_ms_p{q}"] for q in (50, 90, 95, 99)]
    assert "/".join(latency(v) for v in p) in text


def test_a_quit_before_the_load_leaves_a_default_record_that_says_so(tmp_path: Path) -> None:
    # a server that never answers: q while specload still waits for it. The default record was left
    # empty (then removed, "record: none"); a run that asked for a record now always leaves one
    # saying how it ended (issue 22: a quit or a signal during calibration left none while
    # "record: PATH" was printed)
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)  # accepts, never answers
    try:
        with TuiInPty([f"http://127.0.0.1:{s.getsockname()[1]}", "-c", "1"], cwd=tmp_path, cols=160) as tui:
            wait_until(lambda: list(tmp_path.glob("specload-*.jsonl")), what="the default record file")
            tui.send(b"q")
            tui.wait_exit()
    finally:
        s.close()
    after = bytes(tui.output).rsplit(b"\x1b[?1049l", 1)[-1].decode(errors="replace")
    (path,) = tmp_path.glob("specload-*.jsonl")
    assert f"end: interrupted\r\nrecord: {path.name}" in after, after
    data = read_record(str(path))
    assert data.end is not None and data.end["reason"] == "interrupted" and data.requests == []


def test_an_unreachable_server_ends_the_tui_at_once_with_exit_1_and_the_reason(tmp_path: Path) -> None:
    # issue 22: the header said "■ finished", the app waited for q, and the exit status was 0
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    rec = tmp_path / "r.jsonl"
    with TuiInPty([f"http://127.0.0.1:{port}", "-c", "1", "--record", str(rec)], cwd=tmp_path, cols=160) as tui:
        assert tui.wait_exit(timeout=40) == 1  # by itself: no key is sent
    after = bytes(tui.output).rsplit(b"\x1b[?1049l", 1)[-1].decode(errors="replace")
    assert f"specload: error: cannot connect to http://127.0.0.1:{port}" in after, after
    assert "Traceback" not in after
    data = read_record(str(rec))
    assert data.end is not None and data.end["reason"] == "stopped" and data.requests == []


def test_quit_repeats_the_workload_warnings_and_the_crashes(tmp_path: Path) -> None:
    """The dashboard shows both as toasts, gone in seconds: after 'q' the terminal keeps them under the
    table, as a headless run prints them (speculation measured on synthetic prompts; the simulator's
    SGLang crash in the second level)."""
    sim = "--ttft-ms 5 --itl-ms 5 --crash-after 6"
    with TuiInPty(["-c", "1,2", "-n", "4", "--max-tokens", "8", "--sim-args", sim], cwd=tmp_path, cols=160) as tui:
        wait_until(lambda: [p for p in tmp_path.glob("specload-*.jsonl") if b'"type":"crash"' in p.read_bytes()],
                   what="the crash in the record")
        tui.send(b"q")
        assert tui.wait_exit() == 3
    after = bytes(tui.output).rsplit(b"\x1b[?1049l", 1)[-1]
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", after).decode(errors="replace").replace("\r\n", "\n")
    assert "⚠ workload: speculative decoding measured on synthetic prompts" in text
    assert "crash AttributeError: 'EAGLEWorkerV2' object has no attribute 'draft_model_runner' (x1)" in text
    assert text.index("⚠ workload") < text.index("end: crashed")
