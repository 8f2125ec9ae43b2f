"""Does the TUI disturb the measurement? The same load headless and with the dashboard running.

Starts the built-in simulator once (fixed TTFT and ITL, no speculative decoding, so the server side is
identical for both runs), then runs a fixed load twice, each in its own process:

* headless: ``specload run URL -c 64 -n 640 --max-tokens 100 --ignore-eos --record ...``
* TUI: this script re-invoked with ``--tui-child``: the real ``SpecloadApp`` driven by Textual's
  headless test driver at 160x48 (rendering and compositing happen; only the terminal write is skipped),
  quitting with 'q' once the load is done. While the load runs, the child works the UI as a user does
  (issue 11), over and over: opens the help (``?``) and closes it, resizes to 120x40 (the tabbed
  layout) and back, switches tabs (right, left), opens the ``c`` dialog and cancels it. ``--idle``
  leaves the UI alone (the dashboard only redraws at its 4 Hz).

It prints TTFT p50, TPOT p50 and throughput from the two records (through the same report code as
``specload report``), their ratios, the engine's loop lag (max and p99 of the record's per-second
``client`` lines: the worst wake-up delay of the loop the requests run on, each second), and each
process's CPU seconds per wall second. Numbers only: no asserts, since the figures depend on the machine.

    python benchmarks/tui_vs_headless.py [--concurrency 64] [--requests 640] [--max-tokens 100] [--idle]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN_TIMEOUT_S = 90  # a hung run is killed rather than waited for
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def start_sim(max_speed: bool = False) -> tuple[subprocess.Popen, str]:
    timing = ["--max-speed"] if max_speed else ["--itl-ms", "20", "--ttft-ms", "50"]
    cmd = [sys.executable, "-m", "specload.sim", "--port", "0", *timing,
           "--spec-tokens", "0", "--max-batch", "256", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = LISTENING.search(line)
    if not m:
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, m.group(1)


def load_args(url: str, record: str, a: argparse.Namespace) -> list[str]:
    return [url, "-c", str(a.concurrency), "-n", str(a.requests), "--max-requests", str(a.requests),
            "--max-tokens", str(a.max_tokens), "--ignore-eos", "--record", record]


def timed_child(cmd: list[str]) -> tuple[float, float, int]:
    """Run a child to completion: (wall s, CPU s of the child, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 130):
        sys.stderr.write(proc.stderr[-2000:])
    elif "UI actions" in proc.stderr:
        sys.stdout.write(proc.stderr[proc.stderr.index("tui child"):].splitlines()[0] + "\n")
    return wall, cpu, proc.returncode


def summarize(record: str) -> dict:
    from specload.record.reader import read_record
    from specload.record.report import summaries_from_record

    data = read_record(record)
    levels, _ = summaries_from_record(data)
    lv = levels[0]
    samples = [c for c in data.clients if c.get("loop_lag_ms") is not None]
    lags = sorted(c["loop_lag_ms"] for c in samples)
    worst = max(samples, key=lambda c: c["loop_lag_ms"], default={})
    return {
        "requests": lv.requests,
        "ok": lv.ok,
        "ttft_p50_ms": lv.ttft_ms_p50,
        "tpot_p50_ms": lv.tpot_ms_p50,
        "throughput_tok_s": lv.throughput_tok_s,
        "loop_lag_max_ms": max(lags) if lags else None,
        "loop_lag_p99_ms": lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else None,
        "loop_lag_mean_ms": sum(lags) / len(lags) if lags else None,
        "lag_samples": len(lags),
        # of the worst second's late wake-up, the time the loop's thread waited for a CPU (Linux): a
        # shared machine's noise, not specload's own work
        "worst_lag_cpu_wait_ms": worst.get("lag_cpu_wait_ms"),
    }


# ---------------------------------------------------------------------------------- the TUI child


async def work_the_ui(app, pilot) -> int:
    """One round of what a user does while watching a run; the number of UI actions taken."""
    actions = 0

    async def act(coro, settle: float = 0.4) -> None:
        nonlocal actions
        await coro
        actions += 1
        await pilot.pause(settle)

    await act(pilot.press("question_mark"), 1.0)  # the help modal, left open for a second
    await act(pilot.press("escape"))
    await act(pilot.resize_terminal(120, 40))  # the tabbed layout
    for key in ("right", "right", "right", "left"):
        await act(pilot.press(key), 0.25)
    await act(pilot.press("c"), 0.6)  # the concurrency dialog, cancelled
    await act(pilot.press("escape"))
    await act(pilot.resize_terminal(80, 24))
    await act(pilot.resize_terminal(160, 48))
    return actions


async def drive_tui(argv: list[str], idle: bool = False) -> None:
    from specload.cli_run import build_config, tui_command
    from specload.ui.app import create_app

    params = dict(tui_command.make_context("tui", argv).params)
    params.pop("headless", None)
    params.pop("theme", None)
    cfg = build_config(params, ui=True)
    try:  # as run_app does (older trees, measured for a before/after, have no such option)
        from specload.session.engine_thread import UI_NICE

        app = create_app(cfg, ui_nice=UI_NICE)
    except ImportError:
        app = create_app(cfg)
    async with app.run_test(size=(160, 48)) as pilot:
        deadline = time.monotonic() + RUN_TIMEOUT_S - 10
        actions = 0
        # the TUI's session stays open after the plan (the user may set a concurrency), so the load is
        # done when the runner reports the plan finished with nothing in flight
        while app.result is None and time.monotonic() < deadline:
            rs = app.source.frame().runner
            if rs is not None and rs.state == "finished" and rs.in_flight == 0:
                break
            if idle or rs is None:
                await pilot.pause(0.25)
            else:
                actions += await work_the_ui(app, pilot)
        sys.stderr.write(f"tui child: {actions} UI actions during the load\n")
        await pilot.press("q")
        while app.is_running and time.monotonic() < deadline + 5:
            await pilot.pause(0.1)


def tui_child(argv: list[str]) -> None:
    from specload.headless import _install_loop

    idle = "--idle" in argv
    argv = [a for a in argv if a != "--idle"]
    _install_loop()  # as run_app does: the same event loop as the headless run
    asyncio.run(drive_tui(argv, idle))


# ---------------------------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--tui-child":
        tui_child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=640)
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--max-speed", action="store_true",
                    help="the ceiling: a max-speed simulator (use with --requests 1000 --max-tokens 500)")
    ap.add_argument("--idle", action="store_true", help="leave the TUI alone (no keys, no resize) during the load")
    a = ap.parse_args()

    sim, url = start_sim(a.max_speed)
    tmp = Path(tempfile.mkdtemp(prefix="specload-bench-"))
    try:
        head_rec, tui_rec = str(tmp / "headless.jsonl"), str(tmp / "tui.jsonl")
        specload = [sys.executable, "-c", "from specload.cli import main; main()"]
        timing = "max speed" if a.max_speed else "ttft 50 ms, itl 20 ms"
        print(f"simulator {url}: {timing}, no speculation; load C={a.concurrency}, "
              f"{a.requests} requests x {a.max_tokens} tokens")
        h_wall, h_cpu, h_rc = timed_child([*specload, "run", *load_args(url, head_rec, a)])
        t_wall, t_cpu, t_rc = timed_child([sys.executable, __file__, "--tui-child", *load_args(url, tui_rec, a),
                                           *(["--idle"] if a.idle else [])])
        h, t = summarize(head_rec), summarize(tui_rec)
    finally:
        sim.terminate()
        try:
            sim.wait(5)
        except subprocess.TimeoutExpired:
            sim.kill()

    def row(name: str, key: str, fmt: str = "{:.2f}") -> None:
        hv, tv = h[key], t[key]
        ratio = f"{tv / hv:.3f}" if hv and tv is not None else "-"
        print(f"{name:<22}{fmt.format(hv):>12}{fmt.format(tv):>12}{ratio:>10}")

    print(f"{'':<22}{'headless':>12}{'tui':>12}{'tui/head':>10}")
    row("requests ok", "ok", "{:d}")
    row("TTFT p50 ms", "ttft_p50_ms")
    row("TPOT p50 ms", "tpot_p50_ms")
    row("throughput tok/s", "throughput_tok_s", "{:.1f}")
    print(f"engine loop lag (per-second worst wake-up; {h['lag_samples']} and {t['lag_samples']} seconds)")
    row("  max ms", "loop_lag_max_ms")
    row("  p99 ms", "loop_lag_p99_ms")
    row("  mean ms", "loop_lag_mean_ms")
    if h["worst_lag_cpu_wait_ms"] is not None and t["worst_lag_cpu_wait_ms"] is not None:
        row("  max: CPU wait ms", "worst_lag_cpu_wait_ms")
    print(f"{'wall s':<22}{h_wall:>12.1f}{t_wall:>12.1f}")
    print(f"{'CPU s (process)':<22}{h_cpu:>12.2f}{t_cpu:>12.2f}{t_cpu / h_cpu if h_cpu else 0:>10.2f}")
    print(f"{'CPU share of a core':<22}{h_cpu / h_wall:>11.1%}{t_cpu / t_wall:>12.1%}")
    print(f"exit codes: headless {h_rc}, tui {t_rc}; records in {tmp}")


if __name__ == "__main__":
    main()
