"""Keys that arrive in one read of a real terminal, as ssh and auto-repeat deliver them.

The bytes are written to the pty in one write, so the app's input thread reads them together. Before
the fix, two arrow keys in one read on a terminal narrower than 130 columns locked the dashboard in
a loop at 100 % CPU with later keys ignored, and ``c 7 enter`` typed at once lost the 7.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specload.record.reader import read_record
from tests.tui_pty import TuiInPty

SIM = "--ttft-ms 5 --itl-ms 50 --spec-tokens 0 --quiet"
RIGHT, LEFT = b"\x1b[C", b"\x1b[D"


@pytest.mark.slow
def test_keys_in_one_read_of_a_real_terminal(tmp_path: Path) -> None:
    rec = tmp_path / "keys.jsonl"
    with TuiInPty(["-c", "2", "-d", "60", "--max-tokens", "100", "--ignore-eos", "--record", str(rec),
                   "--sim-args", SIM], rows=30, cols=100) as tui:
        tui.wait_for_load(rec)
        tui.send(RIGHT + RIGHT)
        tui.send(LEFT + LEFT + LEFT)
        tui.send(b"c7\r")  # the dashboard still answers, and the 7 reaches the dialog
        tui.wait_for_line(rec, b'"kind":"concurrency","value":7', "C=7 from 'c 7 enter' in one read")
        tui.send(b"c12\r+")
        tui.wait_for_line(rec, b'"kind":"concurrency","value":13', "C=13 from 'c 1 2 enter +' in one read")
        tui.send(b"q")
        assert tui.proc.wait(timeout=40) == 0
        data = read_record(str(rec))
        assert data.end is not None
        values = [e["value"] for e in data.events if e["kind"] == "concurrency"]
        assert values == [7, 12, 13]
