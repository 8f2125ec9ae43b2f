"""Stalls on specload's own event loop: the worst TTFT excess over the server's own figure, and the
callbacks that held the loop during the load.

    python benchmarks/loop_stalls.py [--runs 5] [--requests 40] [--concurrency 4]

Part 1 (the figure of issue 15): ``specload run`` (headless, uvloop, as users run it) at C=4 against
the simulator in close-after-stream mode (llama-server's habit) with pinned timing. The simulator
puts its own TTFT of each request in the response (llama.cpp's ``timings.prompt_ms``, from the
request's arrival to its first token), so each request's excess is client TTFT - server TTFT: the
loopback, HTTP and parsing share, plus anything that kept specload from reading. Prints, per run,
the worst and median excess and where (seconds into the run) the worst one started.

Part 2: the same load in this process on the standard library loop with the slow-callback probe
(``specload.stats.slow_callbacks``): every callback over 2 ms during the load, with its own time
(wall minus the time the thread waited for a CPU) and where it ran. Callbacks slow only by
run-queue wait are counted apart: on a shared machine they are the machine, not specload.

Run it before and after a change in the same session (the machine is shared; absolute numbers swing).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from _common import simulator

SIM_ARGS = ("--close-after-stream", "--usage-in-last-chunk", "--ttft-ms", "20", "--itl-ms", "5", "--spec-tokens", "0")


def excess_run(c: int, n: int, max_tokens: int) -> tuple[list[tuple[float, float, int]], float, float]:
    """(client TTFT - server TTFT in ms, start_s, retries) per successful request of one run, and the
    run's worst loop lag and the run-queue wait of it (ms, from the record's client lines): a large
    excess with a large wait is the machine, not specload."""
    with simulator(*SIM_ARGS) as (url, _proc), tempfile.TemporaryDirectory() as tmp:
        rec = os.path.join(tmp, "run.jsonl")
        p = subprocess.run(
            [sys.executable, "-m", "specload.cli", "run", url, "-c", str(c), "-n", str(n), "--max-tokens",
             str(max_tokens), "--ignore-eos", "--api", "chat", "--record", rec],
            capture_output=True, text=True, timeout=300,
        )
        if p.returncode:
            raise SystemExit(p.stderr[-800:])
        out = []
        lag = wait = 0.0
        with open(rec) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") == "request" and r["ok"] and r.get("server_timings"):
                    out.append((r["ttft_ms"] - r["server_timings"]["prompt_ms"], r["start_s"], r["retries"]))
                elif r.get("type") == "client" and (r.get("loop_lag_ms") or 0) > lag:
                    lag, wait = r["loop_lag_ms"], r.get("lag_cpu_wait_ms") or 0.0
        return out, lag, wait


async def _probe_run(url: str, c: int, n: int, max_tokens: int, rec: str):
    from specload.config import RunConfig
    from specload.session import Session
    from specload.stats.slow_callbacks import SlowCallbackProbe

    cfg = RunConfig.of(url, api="chat", concurrency=(c,), requests_per_level=n, drain=True, max_tokens=max_tokens,
                       ignore_eos=True, path=rec)
    session = Session(cfg)
    gc_pauses: list[tuple[int, float]] = []
    gc_t0 = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        elif probe.active:
            gc_pauses.append((info["generation"], (time.perf_counter() - gc_t0[0]) * 1e3))

    gc.callbacks.append(on_gc)
    loop = asyncio.get_running_loop()
    loop.slow_callback_duration = 0.002
    with SlowCallbackProbe(threshold_ms=2.0) as probe:
        probe.active = False
        task = asyncio.ensure_future(session.run())
        while session.runner is None or session.runner.started == 0:
            if task.done():
                break
            await asyncio.sleep(0.001)
        probe.active = True  # from the first request sent
        t0 = time.perf_counter()
        while not task.done() and session.runner is not None and session.runner.state not in ("finished", "stopped"):
            await asyncio.sleep(0.001)
        probe.active = False
        load_s = time.perf_counter() - t0
        await task
    gc.callbacks.remove(on_gc)
    return probe, load_s, gc_pauses


def probe_run(c: int, n: int, max_tokens: int) -> None:
    with simulator(*SIM_ARGS) as (url, _proc), tempfile.TemporaryDirectory() as tmp:
        probe, load_s, gc_pauses = asyncio.run(_probe_run(url, c, n, max_tokens, os.path.join(tmp, "run.jsonl")))
    blocking, starved = probe.blocking(), probe.starved()
    print(f"  {probe.callbacks} callbacks in {load_s:.2f} s of load; over 2 ms: {len(blocking)} blocking, "
          f"{len(starved)} slow only by waiting for a CPU")
    for gen in (0, 1, 2):
        ms = [d for g, d in gc_pauses if g == gen]
        if ms:
            print(f"    garbage collections of generation {gen}: {len(ms)}, longest {max(ms):.2f} ms")
    for s in blocking:
        print(f"    BLOCKING own {s.own_ms:6.2f} ms (cpu {s.cpu_ms:6.2f}, wait {s.wait_ms}) {s.what}")
    for s in starved[:5]:
        print(f"    starved  own {s.own_ms:6.2f} ms wall {s.wall_ms:6.2f} ms {s.what}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--probe-requests", type=int, default=200, help="requests of part 2 (0: skip it)")
    a = ap.parse_args()
    print(f"TTFT excess over the server's own TTFT, C={a.concurrency}, {a.requests} requests, "
          f"simulator {' '.join(SIM_ARGS)}")
    worst_all = []
    for i in range(a.runs):
        ex, lag, wait = excess_run(a.concurrency, a.requests, a.max_tokens)
        ex.sort(reverse=True)
        worst = ex[0]
        worst_all.append(worst[0])
        clean = [e for e in ex if e[2] == 0]
        print(f"  run {i + 1}: worst {worst[0]:6.2f} ms (started at {worst[1]:.2f} s, retries {worst[2]}), "
              f"worst without a retry {clean[0][0] if clean else float('nan'):6.2f} ms, "
              f"median {statistics.median(e[0] for e in ex):5.2f} ms, n={len(ex)}; "
              f"worst loop lag {lag:.1f} ms ({wait:.1f} ms of it waiting for a CPU)")
    if worst_all:
        print(f"  worst over runs {max(worst_all):.2f} ms; median of the runs' worst "
              f"{statistics.median(worst_all):.2f} ms")
    if a.probe_requests:
        print(f"callbacks over 2 ms during the load (stdlib loop, in process, {a.probe_requests} requests):")
        probe_run(a.concurrency, a.probe_requests, a.max_tokens)


if __name__ == "__main__":
    main()
