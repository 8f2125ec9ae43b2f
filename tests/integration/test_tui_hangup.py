"""The terminal goes away under a running TUI (ssh dropped, tmux killed): a real pty is closed.

The TUI must quit as 'q' does: the record gets its end line and the built-in simulator, which runs in a
session of its own out of the hangup's reach, is stopped. Before SIGHUP was handled the process died on
the spot, the simulator kept running and the record had no end line; Textual alone, with the signal
caught, spun on the dead tty and never exited.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_terminal_closed_while_the_app_paints_a_crash(tmp_path: Path) -> None:
    # The orphans found after 'tmux kill-server': the simulator crashed, the load paused, the app kept
    # painting. Textual's writer thread died on the dead tty, its queue filled and the main thread
    # blocked in Queue.put for good (no signal handler, no teardown, 35 % CPU from the input thread
    # spinning on end-of-file, the simulator alive, no end line). Now the run ends as 'q' does.
    rec = tmp_path / "crash-hup.jsonl"
    with TuiInPty(["-c", "2,4", "-d", "30", "--max-tokens", "50", "--record", str(rec),
                   "--sim-args", "--crash-after 20 --ttft-ms 5 --itl-ms 5 --spec-tokens 0"]) as tui:
        tui.wait_for_load(rec)
        tui.wait_for_line(rec, b'"type":"crash"', "the simulator's crash in the record", timeout=60)
        tui.close_terminal()
        assert tui.proc.wait(timeout=40) == 129
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "interrupted"
        assert data.crashes
        tui.wait_sims_gone()
