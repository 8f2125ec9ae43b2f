"""Signals to a running TUI on a real pty, and SIGKILL of specload with the built-in simulator.

SIGINT and SIGTERM do what 'q' does: no new requests, in-flight ones recorded as cancelled, the
record closed with its end line, the launched (here: built-in) simulator stopped; the exit status
is 128 + the signal (130, 143), as for headless runs. Before, SIGTERM killed the TUI on the spot
(no end line, requests missing, the simulator left running) and SIGINT exited 0 without an end line
or froze. SIGKILL cannot be caught: the simulator watches specload and leaves on its own.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from specload.record.reader import read_record
from tests.tui_pty import TuiInPty

SIM = "--ttft-ms 5 --itl-ms 20 --spec-tokens 0 --quiet"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_quit_the_tui_as_q_does(tmp_path: Path, sig: int, code: int) -> None:
    rec = tmp_path / "sig.jsonl"
    with TuiInPty(["-c", "3", "-d", "60", "--max-tokens", "400", "--ignore-eos", "--record", str(rec),
                   "--sim-args", SIM]) as tui:
        tui.wait_for_load(rec)
        assert tui.sims, "no built-in simulator among the TUI's children"
        tui.proc.send_signal(sig)
        assert tui.proc.wait(timeout=40) == code
        data = read_record(str(rec))
        assert data.end is not None and data.end["reason"] == "interrupted"
        cancelled = [r for r in data.requests if (r["error"] or {}).get("kind") == "cancelled"]
        assert len(cancelled) == 3  # the three in flight, each recorded once
        assert data.end["requests"] == len([r for r in data.requests if not r["warmup"]])
        tui.wait_sims_gone()


@pytest.mark.parametrize("mode", ["tui", "run"])
def test_the_builtin_simulator_does_not_outlive_a_sigkilled_specload(tmp_path: Path, mode: str) -> None:
    rec = tmp_path / "kill.jsonl"
    args = ["-c", "2", "-d", "60", "--max-tokens", "400", "--ignore-eos", "--record", str(rec), "--sim-args", SIM]
    if mode == "run":
        args.insert(0, "--headless")
    with TuiInPty(args) as tui:
        tui.wait_for_load(rec)
        assert tui.sims, "no built-in simulator among specload's children"
        tui.proc.send_signal(signal.SIGKILL)
        tui.proc.wait(timeout=10)
        tui.wait_sims_gone()
