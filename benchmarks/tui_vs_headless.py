"""Does the TUI disturb the measurement? The same load headless and with the dashboard running.

Starts the built-in simulator once (fixed TTFT and ITL, no speculative decoding, so the server side is
identical for both runs), then runs a fixed load twice, each in its own process:

* headless: ``specload run URL -c 64 -n 640 --max-tokens 100 --ignore-eos --record ...``
* TUI: this script re-invoked with ``--tui-child``: the real ``SpecloadApp`` with the engine where
  ``run_app`` puts it (a process of its own), driven by
  Textual's headless test driver at 160x48 (rendering and compositing happen; only the terminal write is skipped),
  quitting with 'q' once the load is done. While the load runs, the child works the UI as a user does
  (issue 11), over and over: opens the help (``?``) and closes it, resizes to 120x40 (the tabbed
  layout) and back, switches tabs (right, left), opens the ``c`` dialog and cancels it. ``--idle``
  leaves the UI alone (the dashboard only redraws at its 4 Hz).

It prints TTFT p50, TPOT p50 and throughput from the two records (through the same report code as
``specload report``), their ratios, the engine's loop lag (max and p99 of the record's per-second
``client`` lines: the worst wake-up delay of the loop the requests run on, each second), and each
process's CPU seconds per wall second. The TUI child's line gives the UI process's own CPU (all its
threads; not the engine's) per kind of action, its settling pause included, the median over the
actions taken, and with ``--idle`` its CPU a second while left alone. Numbers only: no asserts, since the figures depend on the machine.

Both children time every garbage collection (``gc.callbacks``; with the engine in a process of its own,
the TUI child's figures are the UI's alone and stop nothing of the engine's); from the first request on,
each run's line gives
their count, the worst pause (wall and CPU ms), the full collections, and the seconds whose loop lag a
collection explains. ``--variants`` compares the TUI process's settings
(``TuiProcess``: the GIL's switch interval, the GC's thresholds, the UI thread's nice value; "shipped"
is what ``run_app`` applies), each run once per round after a headless run, ``--rounds`` times with the order rotated;
the summary gives each one's means and its ratios to the headless runs of the same invocation.

    python benchmarks/tui_vs_headless.py [--concurrency 64] [--requests 640] [--max-tokens 100] [--idle]
    python benchmarks/tui_vs_headless.py --rounds 3 --variants shipped,process-plain
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RUN_TIMEOUT_S = 90  # a hung run is killed rather than waited for
GC_TAG = "bench-gc "  # the children's GC pause figures, one JSON line on stderr at exit
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


def timed_child(cmd: list[str]) -> tuple[float, float, int, list | None]:
    """Run a child to completion: (wall s, CPU s of the child, exit code, its GC pauses)."""
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
    gc_line = [ln for ln in proc.stderr.splitlines() if ln.startswith(GC_TAG)]
    return wall, cpu, proc.returncode, json.loads(gc_line[-1][len(GC_TAG):]) if gc_line else None


def summarize(record: str, pauses: list | None = None) -> dict:
    from specload.record.reader import read_record
    from specload.report.report import summaries_from_record

    data = read_record(record)
    gcf = gc_figures(pauses, data) if pauses is not None else {}
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
        # the first second holds the session's full collection before the first request (warmup.py)
        "loop_lag_max_after_1s_ms": max((c["loop_lag_ms"] for c in samples[1:]), default=None),
        "lag_samples": len(lags),
        # from the second second on: the share of seconds whose worst late wake-up was 2 ms or less,
        # and the mean of each second's worst minus its wait for a CPU (what the loop's own work, or
        # another thread of its process, kept it late; a busy machine's scheduling taken out)
        "loop_lag_le_2ms_share": (sum(c["loop_lag_ms"] <= 2 for c in samples[1:]) / len(samples[1:])
                                  if samples[1:] else None),
        "loop_lag_own_mean_ms": (sum(max(0.0, c["loop_lag_ms"] - (c.get("lag_cpu_wait_ms") or 0.0))
                                     for c in samples[1:]) / len(samples[1:]) if samples[1:] else None),
        # of the worst second's late wake-up, the time the loop's thread waited for a CPU (Linux): a
        # shared machine's noise, not specload's own work
        "worst_lag_cpu_wait_ms": worst.get("lag_cpu_wait_ms"),
        "gc": gcf,
    }


# ---------------------------------------------------------------------------------- GC pauses


class GcPauses:
    """Every collection in this process, timed through ``gc.callbacks``: a collection holds the GIL,
    so each pause stops every thread (the engine's loop included), whichever thread's allocation
    triggered it. Each pause is kept as (wall-clock start, generation, on the main thread (the UI in
    the TUI child, everything headless), ms, CPU ms of the collecting thread) and written to stderr at exit as one JSON line; the
    parent keeps those within the record's run and sets them beside its per-second loop lag."""

    def __init__(self) -> None:
        self.t0 = self.wall0 = self.cpu0 = 0.0
        self.pauses: list[tuple[float, int, bool, float, float]] = []
        self.main = threading.main_thread().ident

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.wall0, self.t0, self.cpu0 = time.time(), time.perf_counter(), time.thread_time()
        else:
            self.pauses.append((self.wall0, info["generation"], threading.get_ident() == self.main,
                                (time.perf_counter() - self.t0) * 1000, (time.thread_time() - self.cpu0) * 1000))

    def install(self) -> None:
        gc.callbacks.append(self)
        atexit.register(self.report)

    def report(self) -> None:
        # the end of the list: (time, -1, frozen objects, objects tracked) at exit
        tail = [(time.time(), -1, gc.get_freeze_count(), len(gc.get_objects()))]
        sys.stderr.write(GC_TAG + json.dumps(self.pauses + tail) + "\n")
        sys.stderr.flush()


def gc_figures(pauses: list, data) -> dict:
    """The collections within the run (the record's start to end) and how much of the engine's loop
    lag they explain: the seconds whose worst wake-up delay a pause in that second covers by half."""
    from datetime import datetime

    start = datetime.fromisoformat(data.run["started_at"]).timestamp()
    end = datetime.fromisoformat(data.end["ended_at"]).timestamp() if data.end else float("inf")
    # from the first request on: the session's own full collection right before the load
    # (specload/warmup.py, 14-60 ms depending on the heap) delays no request
    first = start + min((r["start_s"] for r in data.requests), default=0.0)
    inside = [p for p in pauses if first <= p[0] <= end and p[1] >= 0]
    ms = [p[3] for p in inside]
    explained = 0
    for c in data.clients:
        lag = c.get("loop_lag_ms")
        t1 = start + c["t_s"]
        worst = max((p[3] for p in inside if t1 - 1 <= p[0] <= t1), default=0.0)
        if lag and lag >= 2 and worst >= 0.5 * lag:
            explained += 1
    out: dict = {"n": len(ms), "total_ms": sum(ms), "max_ms": max(ms, default=0.0),
                 "max_cpu_ms": max((p[4] for p in inside if len(p) > 4), default=0.0),
                 "over_2ms": sum(1 for m in ms if m > 2), "off_main_thread": sum(1 for p in inside if not p[2]),
                 "lag_s_over_2ms": sum(1 for c in data.clients if (c.get("loop_lag_ms") or 0) >= 2),
                 "lag_s_explained": explained}
    for g in (0, 1, 2):
        gms = [p[3] for p in inside if p[1] == g]
        out[f"gen{g}"] = [len(gms), max(gms, default=0.0)]
    return out


# ---------------------------------------------------------------------------------- the TUI child


# the UI process's CPU ms (all its threads; the engine is a process of its own) for each kind of
# action, its settling pause included, and for the quarter seconds it was left alone
UI_CPU_MS: dict[str, list[float]] = {}


async def timed(name: str, coro, pilot, settle: float) -> None:
    c0 = time.process_time()
    await coro
    await pilot.pause(settle)
    UI_CPU_MS.setdefault(name, []).append((time.process_time() - c0) * 1000)


async def work_the_ui(app, pilot) -> int:
    """One round of what a user does while watching a run; the number of UI actions taken."""
    actions = 0

    async def act(name: str, coro, settle: float = 0.4) -> None:
        nonlocal actions
        await timed(name, coro, pilot, settle)
        actions += 1

    await act("help", pilot.press("question_mark"), 1.0)  # the help modal, left open for a second
    await act("close", pilot.press("escape"))
    await act("resize", pilot.resize_terminal(120, 40))  # the tabbed layout
    for key in ("right", "right", "right", "left"):
        await act("tab", pilot.press(key), 0.25)
    await act("dialog", pilot.press("c"), 0.6)  # the concurrency dialog, cancelled
    await act("close", pilot.press("escape"))
    await act("resize", pilot.resize_terminal(80, 24))
    await act("resize", pilot.resize_terminal(160, 48))
    return actions


def ui_cpu_line() -> str:
    """The UI's CPU per action kind (median ms, the ones taken) and left alone (ms a second)."""
    alone = UI_CPU_MS.pop("alone", [])
    parts = [f"{k} {statistics.median(v):.0f} (x{len(v)})" for k, v in UI_CPU_MS.items()]
    if alone:
        parts.append(f"left alone {statistics.fmean(alone) * 4:.0f} ms/s")
    return "UI CPU ms: " + ", ".join(parts) if parts else ""


async def drive_tui(argv: list[str], idle: bool = False, tuning: object = None) -> None:
    from specload.cli_run import build_config, tui_command
    from specload.ui.app import create_app

    params = dict(tui_command.make_context("tui", argv).params)
    params.pop("headless", None)
    params.pop("theme", None)
    cfg = build_config(params, ui=True)
    app = create_app(cfg, process=tuning)  # as run_app does
    app.after_start = tuning.after_start  # type: ignore[attr-defined]
    async with app.run_test(size=(160, 48)) as pilot:
        deadline = time.monotonic() + RUN_TIMEOUT_S - 10
        actions = 0
        # the TUI's session stays open after the plan (the user may set a concurrency), so the load is
        # done when the runner reports the plan finished with nothing in flight
        while app.result is None and time.monotonic() < deadline:
            rs = app.source.frame().runner
            if rs is not None and rs.state == "finished" and rs.in_flight == 0:
                break
            if rs is None:  # the dashboard starting: not the load's
                await pilot.pause(0.25)
            elif idle:
                await timed("alone", pilot.pause(0.25), pilot, 0)
            else:
                actions += await work_the_ui(app, pilot)
        sys.stderr.write(f"tui child: {actions} UI actions during the load; {ui_cpu_line()}\n")
        await pilot.press("q")
        while app.is_running and time.monotonic() < deadline + 5:
            await pilot.pause(0.1)


# what --variants compares: the TUI process's settings (TuiProcess: each a change from "shipped", what
# run_app applies)
VARIANTS: dict[str, dict] = {
    "shipped": {},
    "process-plain": {"gc_threshold": None, "switch_interval_s": None},
    "process-no-nice": {"ui_nice": 0},
    "ui-idle": {"ui_idle": True},
    "ui-nice": {"ui_idle": False},
    "ui-pin": {"ui_pin": True},
    "no-freeze": {"freeze_ui_heap": False},
}


def tui_child(argv: list[str]) -> None:
    import dataclasses

    from specload.ui.process import TUI_PROCESS
    from specload.warmup import install_loop

    idle = "--idle" in argv
    variant = next((a.split("=", 1)[1] for a in argv if a.startswith("--variant=")), None)
    argv = [a for a in argv if a != "--idle" and not a.startswith("--variant=")]
    tuning = dataclasses.replace(TUI_PROCESS, **VARIANTS[variant or "shipped"])
    tuning.apply()
    GcPauses().install()
    install_loop()  # as run_app does: the same event loop as the headless run
    asyncio.run(drive_tui(argv, idle, tuning))


def headless_child(argv: list[str]) -> None:
    GcPauses().install()
    from specload.cli import main

    sys.argv = ["specload", *argv]
    main()


# ---------------------------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--tui-child":
        tui_child(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--headless-child":
        headless_child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=640)
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--max-speed", action="store_true",
                    help="the ceiling: a max-speed simulator (use with --requests 1000 --max-tokens 500)")
    ap.add_argument("--idle", action="store_true", help="leave the TUI alone (no keys, no resize) during the load")
    ap.add_argument("--variants", default="shipped",
                    help=f"comma-separated TUI process settings to compare, each run once per round after a "
                         f"headless run (order rotated each round): {', '.join(VARIANTS)}")
    ap.add_argument("--rounds", type=int, default=1, help="repeat headless + every variant this many times")
    a = ap.parse_args()
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}: one of {', '.join(VARIANTS)}")

    sim, url = start_sim(a.max_speed)
    tmp = Path(tempfile.mkdtemp(prefix="specload-bench-"))
    runs: dict[str, list[dict]] = {"headless": [], **{v: [] for v in variants}}
    try:
        timing = "max speed" if a.max_speed else "ttft 50 ms, itl 20 ms"
        print(f"simulator {url}: {timing}, no speculation; load C={a.concurrency}, "
              f"{a.requests} requests x {a.max_tokens} tokens; load average {os.getloadavg()[0]:.2f}")
        for r in range(a.rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for name in ["headless", *order]:
                rec = str(tmp / f"{name}-{r}.jsonl")
                if name == "headless":
                    cmd = [sys.executable, __file__, "--headless-child", "run", *load_args(url, rec, a)]
                else:
                    cmd = [sys.executable, __file__, "--tui-child", *load_args(url, rec, a),
                           f"--variant={name}", *(["--idle"] if a.idle else [])]
                wall, cpu, rc, gcp = timed_child(cmd)
                if gcp is not None:  # every collection of the child, for a closer look
                    Path(rec + ".gc.json").write_text(json.dumps(gcp))
                fig = summarize(rec, gcp) if rc in (0, 130) else {"gc": {}}
                fig.update(wall=wall, cpu=cpu, rc=rc, load=os.getloadavg()[0])
                runs[name].append(fig)
                print(f"round {r + 1} {name:<16} " + one_line(fig), flush=True)
    finally:
        sim.terminate()
        try:
            sim.wait(5)
        except subprocess.TimeoutExpired:
            sim.kill()
    print_summary(runs, tmp)


def one_line(f: dict) -> str:
    if "ttft_p50_ms" not in f:
        return f"failed (exit {f['rc']})"
    g = f["gc"]

    def n(key: str, fmt: str) -> str:  # a figure a short run may not have (one loop-lag second): "-"
        v = f.get(key)
        return "-" if v is None else format(v, fmt)

    return (f"TTFT {f['ttft_p50_ms']:.2f} TPOT {f['tpot_p50_ms']:.2f} tok/s {f['throughput_tok_s']:.0f} | "
            f"lag max {n('loop_lag_max_ms', '.1f')} >1s {n('loop_lag_max_after_1s_ms', '.1f')} "
            f"mean {n('loop_lag_mean_ms', '.2f')} "
            f"(cpu wait {f['worst_lag_cpu_wait_ms']}) | gc n {g.get('n')} max {g.get('max_ms', 0):.1f} ms "
            f"(cpu {g.get('max_cpu_ms', 0):.1f}) "
            f"gen2 {g.get('gen2', [0])[0]} >2ms {g.get('over_2ms')} lag s>=2ms {g.get('lag_s_over_2ms')} "
            f"gc-explained {g.get('lag_s_explained')} | cpu {f['cpu'] / f['wall']:.0%} load {f['load']:.1f}")


def print_summary(runs: dict[str, list[dict]], tmp: Path) -> None:
    """Each variant's mean over its rounds; ratios against the mean of the headless runs. Lag: the
    engine loop's worst wake-up delay per second (max over the run, max from the second second on,
    mean, the share of seconds at 2 ms or less and the mean without the wait for a CPU, both from the
    second second on); GC: the collections from the first request on (count, worst pause wall and CPU ms, full
    collections, pauses over 2 ms)."""
    def mean(name: str, key: str) -> float:
        vals = [f[key] for f in runs[name] if f.get(key) is not None]
        return statistics.fmean(vals) if vals else 0.0

    def gmean(name: str, key: str) -> float:
        return statistics.fmean([f["gc"].get(key, 0) for f in runs[name] if f.get("gc")] or [0])

    head = {k: mean("headless", k) for k in ("ttft_p50_ms", "tpot_p50_ms", "throughput_tok_s")}
    print(f"\nmeans over rounds ({', '.join(f'{n}: {len(v)}' for n, v in runs.items())}); ratios to headless")
    print(f"{'':<18}{'TTFT':>7}{'TPOT':>7}{'tok/s':>7}{'lag max':>8}{'>1s':>6}{'mean':>7}{'<=2ms':>6}{'own':>6}"
          f"{'gc n':>6}{'max':>6}{'cpu':>6}{'gen2':>6}{'>2ms':>6}")
    for name in runs:
        ratios = [mean(name, k) / hv if hv else 0 for k, hv in head.items()]
        gen2 = statistics.fmean([f["gc"]["gen2"][0] for f in runs[name] if f.get("gc")] or [0])
        print(f"{name:<18}" + "".join(f"{x:>7.3f}" for x in ratios)
              + f"{mean(name, 'loop_lag_max_ms'):>8.1f}{mean(name, 'loop_lag_max_after_1s_ms'):>6.1f}"
              f"{mean(name, 'loop_lag_mean_ms'):>7.2f}{mean(name, 'loop_lag_le_2ms_share'):>6.0%}"
              f"{mean(name, 'loop_lag_own_mean_ms'):>6.2f}{gmean(name, 'n'):>6.0f}{gmean(name, 'max_ms'):>6.1f}"
              f"{gmean(name, 'max_cpu_ms'):>6.1f}{gen2:>6.1f}{gmean(name, 'over_2ms'):>6.1f}")
    print(f"records in {tmp}")


if __name__ == "__main__":
    main()
