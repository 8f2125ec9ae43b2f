"""Many streams: C=10000 held open from one machine, one process and ``--workers 2``.

    python benchmarks/many_streams.py [--concurrency 10000] [--requests 20000] [--max-tokens 50]
                                      [--itl-ms 100:200] [--ramp-up 10] [--workers 1,2] [--frames]

The server is ``benchmarks/bench_server.py --burst 1 --itl-ms A:B`` (one token per event and per
write, paced as a real server without speculation, every stream on one timer heap: not the limit).
Each variant runs ``specload run URL -c C -n N --ramp-up S --record R`` (what ships) and reports:

- requests ok / lost (any error kind), and whether the record is complete (one request line per
  request started, the end line, its counts matching);
- the peak RSS of specload's process tree (the main process and its workers, summed, sampled every
  0.2 s from /proc) and the memory per stream (RSS with C streams open minus RSS before the load, / C);
- the engine's loop lag at steady state (the record's per-second ``client`` lines, worst wake-up
  delay of each second, from the end of the ramp + 2 s to the last request's start: all C open), its
  p50 / p99 / max, and the share of it spent waiting for a CPU (another process's doing);
- the limit this machine sets: file descriptors (the soft limit against C plus a few per process),
  memory (MemAvailable / memory per stream), CPU (streams per core at the CPU specload used).

``--reference`` also runs the lean reference client (``benchmarks/reference_client.py``: raw asyncio
streams, counting events, same loop lag probe) on the same load, first: the floor any Python asyncio
client meets here, in CPU per token and loop lag, against which specload's figures are read.

``--frames`` also runs the load in this process with the dashboard's frame built every 0.25 s on the
engine's loop, as the engine process of ``specload tui`` does (``sources.local.session_frame``), and
reports the frame's build time and its pickled size (what crosses the pipe to the UI).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ceiling import bench_server


def tree_rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` and its descendants, summed (kB)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return total


class RssSampler:
    def __init__(self, pid: int) -> None:
        self.pid, self.samples = pid, []  # (t, kB)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(0.2):
            self.samples.append((time.monotonic() - t0, tree_rss_kb(self.pid)))

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 1024


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))] if s else float("nan")


def run_variant(url: str, a: argparse.Namespace, workers: int, tmp: Path) -> dict:
    rec = tmp / f"w{workers}.jsonl"
    cmd = [sys.executable, "-m", "specload.cli", "run", url, "-c", str(a.concurrency), "-n", str(a.requests),
           "--max-tokens", str(a.max_tokens), "--ignore-eos", "--api", "completions", "--ramp-up", str(a.ramp_up),
           "--record", str(rec), "--metrics-url", "off", "--gpu-metrics", "off", "--prompt-tokens", "16"]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    load0 = os.getloadavg()[0]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = RssSampler(p.pid)
    _, err = p.communicate(timeout=1800)
    sampler.stop()
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the run and its workers (waited for by it)
    cpu_s = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    if p.returncode not in (0, 1):
        raise SystemExit(f"specload exited {p.returncode}: {err[-800:]}")
    lines = [json.loads(line) for line in rec.open()]
    reqs = [r for r in lines if r.get("type") == "request" and not r.get("warmup")]
    end = next((r for r in lines if r.get("type") == "end"), None)
    clients = [c for c in lines if c.get("type") == "client"]
    ok = sum(1 for r in reqs if r["ok"])
    kinds: dict[str, int] = {}
    for r in reqs:
        if not r["ok"]:
            kinds[r["error"]["kind"]] = kinds.get(r["error"]["kind"], 0) + 1
    ids = {r["id"] for r in reqs}
    complete = (end is not None and len(ids) == len(reqs) == a.requests and end.get("requests") == len(reqs)
                and end.get("ok") == ok)
    # steady state: all C open, from the ramp's end (+2 s) to the last request's start
    level_t = next((e["t_s"] for e in lines if e.get("type") == "event" and e.get("kind") == "level"), 0.0)
    t_lo = level_t + a.ramp_up + 2.0
    t_hi = max(r["start_s"] for r in reqs)
    steady = [c for c in clients if t_lo <= c["t_s"] <= t_hi]
    lags = [c["loop_lag_ms"] for c in steady if c.get("loop_lag_ms") is not None]
    waits = [c["lag_cpu_wait_ms"] for c in steady if c.get("lag_cpu_wait_ms") is not None]
    cpus = [c["cpu_pct"] for c in steady if c.get("cpu_pct") is not None]
    peak_kb = max(kb for _, kb in sampler.samples)
    base = [kb for t, kb in sampler.samples if t < 1.0] or [sampler.samples[0][1]]
    # RSS while all C are open: the samples in the steady window (the sampler's clock starts with the
    # process, the record's a little after: the window is taken 1 s narrower on each side)
    rec_t0 = wall - (end["elapsed_s"] if end else wall)
    open_kb = [kb for t, kb in sampler.samples if t_lo + 1 <= t - rec_t0 <= t_hi - 1] or [peak_kb]
    per_stream_kb = (statistics.median(open_kb) - min(base)) / a.concurrency
    tokens = sum(r["output_tokens"] or 0 for r in reqs)
    return {
        "workers": workers, "wall_s": wall, "load": load0, "ok": ok, "requests": len(reqs), "errors": kinds,
        "complete": complete, "peak_mb": peak_kb / 1024, "per_stream_kb": per_stream_kb,
        "lag_p50": pct(lags, 50), "lag_p99": pct(lags, 99), "lag_max": max(lags, default=float("nan")),
        "wait_p99": pct(waits, 99), "cpu_s": cpu_s, "us_per_token": cpu_s / max(tokens, 1) * 1e6, "cpu": statistics.median(cpus) if cpus else float("nan"),
        "steady_s": len(steady), "ttft_p50": pct([r["ttft_ms"] for r in reqs if r["ttft_ms"] is not None], 50),
        "stderr": [line for line in err.splitlines() if "server down" in line or "Traceback" in line][:3],
    }


def run_reference(url: str, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(Path(__file__).parent / "reference_client.py"), url, "--concurrency",
           str(a.concurrency), "--requests", str(a.requests), "--max-tokens", str(a.max_tokens),
           "--ramp-up", str(a.ramp_up)]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True).stdout
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = json.loads(out)
    r["cpu_s"] = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime  # user + system, as for specload
    r["us_per_token"] = r["cpu_s"] / max(r["events"], 1) * 1e6
    return r


async def frames_in_process(url: str, a: argparse.Namespace) -> tuple[list[float], list[int]]:
    """The load on this loop with the engine process's frame built every 0.25 s; build times (ms) and
    pickled sizes (bytes)."""
    from specload.config import RunConfig
    from specload.session import Session
    from specload.sources.local import run_info, session_frame

    cfg = RunConfig.of(url, concurrency=(a.concurrency,), requests_per_level=a.requests, max_tokens=a.max_tokens,
                       ignore_eos=True, api="completions", ramp_up_s=a.ramp_up, metrics_url="off",
                       gpu_metrics="off", prompt_tokens=16)
    session = Session(cfg)
    task = asyncio.ensure_future(session.run())
    times, sizes = [], []
    while not task.done():
        await asyncio.sleep(0.25)
        if session.runner is None or session.runner.in_flight < a.concurrency * 0.9:
            continue
        t = time.perf_counter()
        frame = session_frame(session, run_info(cfg, 0, "pause"))
        times.append((time.perf_counter() - t) * 1e3)
        sizes.append(len(pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)))
    await task
    return times, sizes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--itl-ms", default="100:200")
    ap.add_argument("--ramp-up", type=float, default=10.0)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--frames", action="store_true")
    ap.add_argument("--reference", action="store_true", help="also run the lean reference client (first)")
    a = ap.parse_args()
    soft_fd = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(f"C={a.concurrency}, {a.requests} requests x {a.max_tokens} tokens, {a.itl_ms} ms between tokens, "
          f"--ramp-up {a.ramp_up:g}; {os.cpu_count()} CPUs, MemAvailable {mem_available_mb():.0f} MB, "
          f"ulimit -n {soft_fd}", flush=True)
    with bench_server(1, 1, "--itl-ms", a.itl_ms, "--backlog", "8192") as (url, _pids), \
            tempfile.TemporaryDirectory() as tmp:
        lo, _, hi = a.itl_ms.partition(":")
        tok_s_per_stream = 2000 / (float(lo) + float(hi or lo))
        if a.reference:
            r = run_reference(url, a)
            lags = r["lag_ms"]
            print(f"\nreference client ({r['wall_s']:.0f} s): {r['requests']} requests ({r['failed']} failed), "
                  f"{r['events']} events; "
                  f"loop lag at steady state ({len(lags)} s): p50 {pct(lags, 50):.1f} ms, p99 {pct(lags, 99):.1f} ms; "
                  f"{r['cpu_s']:.0f} CPU s in all, {r['us_per_token']:.1f} us per event received; "
                  f"CPU ~{1e6 / (r['us_per_token'] * tok_s_per_stream):,.0f} streams per core at this pace",
                  flush=True)
        for w in (int(x) for x in a.workers.split(",")):
            r = run_variant(url, a, w, Path(tmp))
            # what a stream at this pace costs, whether or not the client got the CPU it needed: its
            # CPU per token (the whole run, start-up and connection set-up included) x tokens per second
            streams_per_core = 1e6 / (r["us_per_token"] * tok_s_per_stream)
            print(f"\n--workers {w} (load average {r['load']:.1f} at the start, {r['wall_s']:.0f} s):\n"
                  f"  requests ok {r['ok']}/{r['requests']}, lost or failed {r['requests'] - r['ok']} "
                  f"{r['errors'] or ''}; record complete: {r['complete']}\n"
                  f"  RSS peak {r['peak_mb']:.0f} MB (target <= 1536); {r['per_stream_kb']:.1f} kB per open stream\n"
                  f"  loop lag at steady state ({r['steady_s']} s): p50 {r['lag_p50']:.1f} ms, p99 {r['lag_p99']:.1f} "
                  f"ms (target < 20), max {r['lag_max']:.1f} ms; of the p99, waiting for a CPU {r['wait_p99']:.1f} ms\n"
                  f"  client CPU {r['cpu']:.0f}% of a core (median second); {r['cpu_s']:.0f} CPU s in all, "
                  f"{r['us_per_token']:.1f} us per token received; TTFT p50 {r['ttft_p50']:.0f} ms\n"
                  f"  limits here: fds {soft_fd} per process (C={a.concurrency} needs ~{a.concurrency + 50}); memory "
                  f"~{mem_available_mb() * 1024 / max(r['per_stream_kb'], 1e-3):,.0f} streams in MemAvailable; "
                  f"CPU ~{streams_per_core:,.0f} streams per core at this pace (its CPU per token)", flush=True)
            for line in r["stderr"]:
                print(f"  stderr: {line}")
        if a.frames:
            times, sizes = asyncio.run(frames_in_process(url, a))
            if times:
                print(f"\nframes with C={a.concurrency} open ({len(times)}): build p50 {pct(times, 50):.2f} ms, "
                      f"p99 {pct(times, 99):.2f} ms, max {max(times):.2f}; pickled {statistics.median(sizes) / 1024:.0f} kB")


if __name__ == "__main__":
    main()
