"""Bounded reading of files from elsewhere (``specload/lines.py``): any bytes give the lines a split
gives, and a line or a file over its cap stops the reading with a one-line reason, never the whole
file in memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specload import lines
from specload.record.reader import RecordReadError, read_record

CAP = 8


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.sampled_from([b"a", b"\n", b"\r", b"\xff", b"{}", b"x" * 5]), max_size=40).map(b"".join))
def test_any_bytes_give_the_split_lines_or_the_first_long_one(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "f"
    p.write_bytes(data)
    parts = data.split(b"\n")
    want = [(i + 1, part, i < len(parts) - 1) for i, part in enumerate(parts)]
    if want and not want[-1][1]:
        want.pop()  # a file ending in a newline has no unended last line
    long = next((n for n, part, _ in want if len(part) > CAP), None)
    got = []
    try:
        for item in lines.iter_lines(str(p), CAP):
            got.append(item)
    except lines.TooLong as e:
        assert long is not None and str(e) == f"{p}: line {long} runs over {CAP} bytes without a line end"
        assert got == want[: long - 1]
    else:
        assert long is None and got == want


def test_a_device_without_line_ends_stops_at_the_cap() -> None:
    with pytest.raises(lines.TooLong, match="/dev/zero: line 1 runs over"):
        list(lines.iter_lines("/dev/zero", 1 << 16))
    with pytest.raises(lines.TooLong, match="/dev/zero is over"):
        lines.read_capped("/dev/zero", 1 << 16)


def test_a_file_over_its_size_cap_is_refused_before_reading(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_bytes(b"{}" + b" " * 5000)
    assert lines.read_capped(str(p), 5002) == p.read_bytes()
    with pytest.raises(lines.TooLong, match=r"big.json is over 5001 bytes \(5002 bytes\): too large to read"):
        lines.read_capped(str(p), 5001)


def test_a_record_with_a_line_over_the_cap_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 1000)
    p = tmp_path / "r.jsonl"
    p.write_bytes(b'{"type":"run"}\n\n{"type":"event","t_s":1,"kind":"x","value":"' + b"a" * 2000 + b'"}\n')
    with pytest.raises(RecordReadError, match=r"r.jsonl: line 3 runs over 1000 bytes without a line end \(a corrupted record"):
        read_record(str(p))


def test_a_path_object_is_read_as_its_name_is(tmp_path: Path) -> None:
    # the record reader is public API: read_record(Path(...)) is how tests and scripts call it
    p = tmp_path / "r"
    p.write_bytes(b"a\nbb")
    assert list(lines.iter_lines(p)) == list(lines.iter_lines(str(p))) == [(1, b"a", True), (2, b"bb", False)]
    p.write_bytes(b"x" * 20)
    with pytest.raises(lines.TooLong, match=f"^{p}: line 1 "):
        list(lines.iter_lines(p, CAP))
