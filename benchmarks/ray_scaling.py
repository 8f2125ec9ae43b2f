"""Load from 1 and 2 Ray actors (and 1 and 2 worker processes) against the max-speed bench server.

    python benchmarks/ray_scaling.py [--requests 1000] [--max-tokens 500] [--concurrency 64] [--rounds 2]

Each configuration runs ``specload run`` as a subprocess against ``benchmarks/bench_server.py``
(``--ray local`` starts a Ray instance on 127.0.0.1 for the run and stops it after; its start-up is
outside the level's wall time, which the throughput is measured over). Prints the level's
throughput per configuration (median of the rounds), the scaling from 1 to 2, the bench server's CPU
share, the load average before and after (the figures mean little on a machine busy with other work)
and the wall time of the whole command (Ray's start and stop included). On a 2-core machine the server needs part of
a core at these rates, so a second load worker competes with it for the other: what limits the
scaling is printed next to it. Needs the ``ray`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import run_child
from ceiling import ServerCPU, bench_server

CONFIGS = {
    "1 process": [],
    "2 processes": ["--workers", "2"],
    "1 Ray actor": ["--ray", "local", "--workers", "1"],
    "2 Ray actors": ["--ray", "local", "--workers", "2"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict]] = {k: [] for k in CONFIGS}
    with bench_server(1, 16) as (url, pids):
        for r in range(a.rounds):
            for name, extra in CONFIGS.items():
                srv = ServerCPU(pids)
                res, wall, cpu = run_child([
                    sys.executable, "-m", "specload.cli", "run", url, "-c", str(a.concurrency),
                    "-n", str(a.requests), "--max-tokens", str(a.max_tokens), "--ignore-eos", "--api", "completions",
                    "--no-health", "--metrics-url", "off", "--json", "--no-record", *extra], timeout=600)
                if res.returncode != 0:
                    raise SystemExit(f"{name} failed: {res.stderr[-1500:]}")
                lv = json.loads(res.stdout)["levels"][0]
                results[name].append({"tok_s": lv["throughput_tok_s"], "wall_s": lv["wall_s"],
                                      "server": max(srv.shares(lv["wall_s"])), "cpu_s": cpu, "run_s": wall})
                # (the CPU of worker processes is counted, that of Ray actors is not: they are
                # children of Ray's raylet, not of specload)
                print(f"round {r + 1} {name:13s}: {lv['throughput_tok_s']:>9,.0f} tok/s, level {lv['wall_s']:.2f} s, "
                      f"server {results[name][-1]['server']:.0%} of a core, whole command {wall:.1f} s",
                      flush=True)
    med = statistics.median
    tok = {k: med(x["tok_s"] for x in v) for k, v in results.items()}
    print()
    print(f"setup: C={a.concurrency}, {a.requests} requests x {a.max_tokens} tokens, bench server (burst 16), "
          f"{a.rounds} rounds, medians; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
          f"on {os.cpu_count()} CPUs")
    for k in CONFIGS:
        print(f"{k:13s}: {tok[k]:>9,.0f} tok/s   server {med(x['server'] for x in results[k]):.0%} of a core")
    print(f"scaling 1 -> 2: processes x{tok['2 processes'] / tok['1 process']:.2f}, "
          f"Ray actors x{tok['2 Ray actors'] / tok['1 Ray actor']:.2f}")


if __name__ == "__main__":
    main()
