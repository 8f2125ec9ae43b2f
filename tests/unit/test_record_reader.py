"""The record reader and ``report`` on hostile files: any line, any value, never a traceback.

A record may be cut short, hand-edited, corrupted or two records joined together. Each line is
checked against its type's schema before use; these tests feed the reader arbitrary lines
(hypothesis) and the cases that used to end in a traceback.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specload.record.reader import RecordReadError, line_problem, read_record
from specload.report.report import report_command, summaries_from_record

HEADER = b'{"type":"run","version":1,"target":"http://127.0.0.1:1","model":"m","api":"chat"}\n'
GOOD_REQUEST = {"type": "request", "id": 1, "level": 2, "level_index": 0, "warmup": False, "ok": True,
                "start_s": 0.5, "end_s": 1.5, "ttft_ms": 20.0, "tpot_ms": 5.0, "e2e_ms": 1000.0, "itl_ms_p50": 5.0,
                "output_tokens": 100, "tokens_estimated": False, "prompt_tokens": 10, "chunks": 50,
                "finish_reason": "length", "retries": 0, "error": None}


def _report(path: Path) -> tuple[int, str]:
    r = CliRunner().invoke(report_command, [str(path)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.output


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"request","level_index":0,"start_s":"x","ok":true}',
        b'{"type":"request","level_index":0}',
        b'{"type":"request","level_index":[1],"start_s":1,"ok":true}',
        b'{"type":"request","level_index":0,"start_s":1,"ok":true,"output_tokens":1234567890123456789012345678901}',
        b'{"type":"request","level_index":0,"start_s":1e300,"ok":true}',
        b'{"type":"request","level_index":0,"start_s":1,"ok":false,"error":"x"}',
        b'{"type":"request","level_index":0,"start_s":1,"ok":true,"retries":1,"retry_ms":"x"}',
        b'{"type":"level","level_index":0,"concurrency":"a"}',
        b'{"type":"crash","signature":[1],"t_s":1}',
        b'{"type":"end","reason":"completed","elapsed_s":"x"}',
        b'{"type":"mystery"}',
        b"[1,2]",
    ],
)
def test_a_schema_invalid_line_is_skipped_and_counted(tmp_path: Path, line: bytes) -> None:
    f = tmp_path / "r.jsonl"
    f.write_bytes(HEADER + orjson.dumps(GOOD_REQUEST) + b"\n" + line + b"\n")
    data = read_record(str(f))
    assert data.bad_lines == 1 and "line 3" in data.problems[0]
    assert len(data.requests) == 1
    code, out = _report(f)
    assert code == 0 and "1 line skipped" in out


def test_two_records_joined_are_refused_with_their_lines(tmp_path: Path) -> None:
    level = b'{"type":"level","level_index":0,"concurrency":1,"requests":1,"ok":1,"wall_s":1,"throughput_tok_s":1,"per_request_tok_s":1}\n'
    f = tmp_path / "two.jsonl"
    f.write_bytes(HEADER + level + HEADER + level)
    with pytest.raises(RecordReadError, match="holds 2 records .*lines 1, 3"):
        read_record(str(f))
    code, out = _report(f)
    assert code == 2


def test_server_text_in_a_record_is_not_markup(tmp_path: Path) -> None:
    crash = {"type": "crash", "t_s": 1.0, "signature": "s", "exception_type": "[/]Err", "message": "[bold]x[/b] [/]",
             "innermost_frame": None, "processes": [], "count": 1, "new": True, "excerpt": ""}
    f = tmp_path / "c.jsonl"
    f.write_bytes(HEADER + orjson.dumps(crash) + b"\n")
    code, out = _report(f)
    assert code == 0 and "[bold]x[/b] [/]" in out


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
KEYS = sorted(set(GOOD_REQUEST) | {"concurrency", "requests", "wall_s", "throughput_tok_s", "per_request_tok_s",
                                  "errors", "t_s", "kind", "value", "signature", "message", "reason", "source"})
LINE_TYPES = ["request", "level", "event", "crash", "server", "client", "end", "run", "other"]


@st.composite
def record_lines(draw) -> bytes:
    t = draw(st.sampled_from(LINE_TYPES))
    obj: dict = dict(GOOD_REQUEST) if t == "request" and draw(st.booleans()) else {}
    obj["type"] = t
    for k in draw(st.lists(st.sampled_from(KEYS), max_size=8)):
        obj[k] = draw(JSON_VALUES)
    try:
        raw = orjson.dumps(obj)
    except TypeError:  # an integer past 64 bits: written as text, as another program might
        raw = repr(obj).encode()
    if draw(st.integers(0, 9)) == 0:  # now and then a line that is not JSON at all
        raw = draw(st.binary(max_size=30)).replace(b"\n", b"")
    return raw


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(record_lines(), max_size=12), cut=st.booleans())
def test_any_lines_read_and_report_without_a_traceback(tmp_path: Path, lines: list[bytes], cut: bool) -> None:
    f = tmp_path / "h.jsonl"
    body = HEADER + b"".join(line + b"\n" for line in lines)
    f.write_bytes(body[:-1] if cut else body)
    try:
        data = read_record(str(f))
    except RecordReadError:
        return  # two run headers, or none: refused in one line
    for obj in data.requests + data.levels + data.crashes + data.events + data.servers + data.clients:
        assert line_problem(obj) is None
    summaries_from_record(data)
    code, _ = _report(f)
    assert code == 0


def test_a_request_line_with_its_retry_time_is_read(tmp_path: Path) -> None:
    f = tmp_path / "r.jsonl"
    f.write_bytes(HEADER + orjson.dumps({**GOOD_REQUEST, "retries": 1, "retry_ms": 0.412}) + b"\n")
    data = read_record(str(f))
    assert data.bad_lines == 0 and data.requests[0]["retry_ms"] == 0.412


def test_a_record_whose_writer_died_is_ended_after_its_last_whole_line(tmp_path: Path) -> None:
    # issue 22: the TUI's engine process SIGKILLed left its record without an end line; the UI ends
    # it (writer.end_abandoned), cutting the line the kill tore, and ends a record once only
    from specload.clock import FakeClock
    from specload.record.writer import end_abandoned

    path = tmp_path / "r.jsonl"
    torn = orjson.dumps(GOOD_REQUEST)[:40]
    path.write_bytes(HEADER + orjson.dumps(GOOD_REQUEST) + b"\n" + torn)
    clock = FakeClock()
    t0 = clock.now_ns()
    clock.advance(3.0)
    assert end_abandoned(str(path), t0_ns=t0, message="the engine process was killed by SIGKILL", clock=clock)
    data = read_record(str(path))
    assert data.bad_lines == 0 and len(data.requests) == 1
    assert [(e["kind"], e["value"], e["t_s"]) for e in data.events] == [
        ("error", "the engine process was killed by SIGKILL", 3.0)]
    assert data.end is not None and data.end["reason"] == "error" and data.end["elapsed_s"] == 3.0
    before = path.read_bytes()
    assert not end_abandoned(str(path), t0_ns=t0, message="again", clock=clock)  # it has its end already
    assert path.read_bytes() == before
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert not end_abandoned(str(empty), t0_ns=0, message="x") and empty.read_bytes() == b""
    assert not end_abandoned(str(tmp_path / "missing.jsonl"), t0_ns=0, message="x")
