"""The terminal goes away under a running TUI (ssh dropped, tmux killed): a real pty is closed.

The TUI must quit as 'q' does: the record gets its end line and the built-in simulator, which runs in a
session of its own out of the hangup's reach, is stopped. Before SIGHUP was handled the process died on
the spot, the simulator kept running and the record had no end line; Textual alone, with the signal
caught, spun on the dead tty and never exited.
"""

from __future__ import annotations

from pathlib import Path

from specload.record.reader import read_record
from tests.tui_pty import TuiInPty


def test_closing_the_terminal_stops_the_simulator_and_closes_the_record(tmp_path: Path) -> None:
    rec = tmp_path / "hup.jsonl"
    with TuiInPty(["-c", "2", "-d", "60", "--max-tokens", "200", "--ignore-eos", "--record", str(rec),
                   "--sim-args", "--ttft-ms 5 --itl-ms 20 --spec-tokens 0 --quiet"]) as tui:
        tui.wait_for_load(rec)
        assert tui.sims, "no built-in simulator among the TUI's children"
        tui.close_terminal()
        tui.proc.wait(timeout=40)
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "interrupted"
        assert any((r["error"] or {}).get("kind") == "cancelled" for r in data.requests)
        tui.wait_sims_gone()
