"""TTFT against a server that closes the connection after every stream (issue 15's figure).

    python benchmarks/close_after_stream.py [--runs 5] [--requests 40] [--concurrency 4]
                                            [--code before=/tmp/old-checkout ...]

``specload run`` (headless, as users run it) at C=4 with 40 requests against the simulator in
close-after-stream mode (llama-server's habit: it announces keep-alive and closes the socket after
each response, so a pooling client meets stale connections) with pinned timing. The simulator puts
its own TTFT of each request in the response (llama.cpp's ``timings.prompt_ms``: from the request's
arrival to its first token), so each request's excess is client TTFT - server TTFT: loopback, HTTP,
parsing, plus anything that kept specload from reading. Per run it prints the worst and median
excess, the worst among requests that met a stale connection and among those that did not, the
stale connections met (``retries``) and the time they cost (``retry_ms``, absent in older records),
and when specload switched to a new connection per request (the ``fresh_connections`` event).
A control row (``keepalive``, skipped with ``--no-control``) runs this checkout against the same
simulator without close-after-stream: what new connections add, and what is there without them.

``--code LABEL=PATH`` runs the same load with another checkout of specload (``git worktree add
/tmp/old COMMIT``; its package is put first on PYTHONPATH); the runs of all checkouts alternate, so
a machine shared with other work weighs on each alike. The simulator is this checkout's in every
case. The load average is printed with each run: read the figures beside it. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import simulator

REPO = Path(__file__).resolve().parents[1]
SIM_ARGS = ("--close-after-stream", "--usage-in-last-chunk", "--ttft-ms", "20", "--itl-ms", "5", "--spec-tokens", "0")


def one_run(code: Path, c: int, n: int, max_tokens: int, sim_args: tuple[str, ...] = SIM_ARGS) -> dict:
    """One headless run with the checkout at ``code``; its figures from the record."""
    with simulator(*sim_args) as (url, _proc), tempfile.TemporaryDirectory() as tmp:
        rec = os.path.join(tmp, "run.jsonl")
        env = {**os.environ, "PYTHONPATH": str(code)}
        load = os.getloadavg()[0]
        p = subprocess.run(
            [sys.executable, "-m", "specload.cli", "run", url, "-c", str(c), "-n", str(n), "--max-tokens",
             str(max_tokens), "--ignore-eos", "--api", "chat", "--prompt", "hello", "--no-health",
             "--metrics-url", "off", "--record", rec],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp,
        )
        if p.returncode:
            raise SystemExit(f"{code}: exit {p.returncode}: {p.stderr[-800:]}")
        excess: list[tuple[float, int]] = []  # (client TTFT - server TTFT ms, retries)
        retry_ms: list[float] = []
        switched_s = None
        lag = wait = 0.0
        with open(rec) as f:
            for line in f:
                r = json.loads(line)
                t = r.get("type")
                if t == "request" and r["ok"] and r.get("server_timings") and not r.get("warmup"):
                    excess.append((r["ttft_ms"] - r["server_timings"]["prompt_ms"], r["retries"]))
                    if r["retries"] and "retry_ms" in r:
                        retry_ms.append(r["retry_ms"])
                elif t == "event" and r["kind"] == "fresh_connections" and switched_s is None:
                    switched_s = r["t_s"]
                elif t == "client" and (r.get("loop_lag_ms") or 0) > lag:
                    lag, wait = r["loop_lag_ms"], r.get("lag_cpu_wait_ms") or 0.0
        return {"excess": excess, "retry_ms": retry_ms, "switched_s": switched_s, "lag": lag, "wait": wait,
                "load": load}


def _worst(xs: list[float]) -> str:
    return f"{max(xs):6.2f}" if xs else "     -"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--code", action="append", default=[], metavar="LABEL=PATH",
                    help="another checkout to run the same load with (repeatable)")
    ap.add_argument("--no-control", action="store_true", help="skip the run against a keep-alive server")
    a = ap.parse_args()
    codes = [(label, Path(path).resolve(), SIM_ARGS) for label, _, path in (x.partition("=") for x in a.code)]
    codes.append(("this", REPO, SIM_ARGS))
    if not a.no_control:
        codes.append(("keepalive", REPO, tuple(x for x in SIM_ARGS if x != "--close-after-stream")))
    print(f"TTFT excess over the server's own TTFT (ms), C={a.concurrency}, {a.requests} requests, "
          f"simulator {' '.join(SIM_ARGS)}; machine shared: see the load average")
    worst: dict[str, list[float]] = {label: [] for label, _, _ in codes}
    medians: dict[str, list[float]] = {label: [] for label, _, _ in codes}
    stale_met: dict[str, list[int]] = {label: [] for label, _, _ in codes}
    for i in range(a.runs):
        for label, code, sim_args in codes:
            r = one_run(code, a.concurrency, a.requests, a.max_tokens, sim_args)
            ex = r["excess"]
            all_ms = [e for e, _ in ex]
            stale = [e for e, k in ex if k]
            clean = [e for e, k in ex if not k]
            worst[label].append(max(all_ms))
            medians[label].append(statistics.median(all_ms))
            stale_met[label].append(len(stale))
            lost = (f"{sum(r['retry_ms']):.2f} ms lost" if r["retry_ms"] else
                    "retry_ms not recorded" if stale else "none lost")
            switch = f"new connections from {r['switched_s']:.2f} s" if r["switched_s"] is not None else "no switch"
            print(f"  run {i + 1} {label:>9}: worst {max(all_ms):6.2f}  median {statistics.median(all_ms):5.2f}  "
                  f"worst stale-met {_worst(stale)}  worst other {_worst(clean)}  | "
                  f"{len(stale)} of {len(ex)} met a stale connection ({lost}); {switch}; "
                  f"worst loop lag {r['lag']:.1f} ms ({r['wait']:.1f} waiting for a CPU); load {r['load']:.1f}")
    for label, xs in worst.items():
        print(f"  {label:>9}: worst over runs {max(xs):.2f} ms; median of the runs' worst {statistics.median(xs):.2f} "
              f"ms; median of the runs' medians {statistics.median(medians[label]):.2f} ms; stale connections met "
              f"per run {statistics.median(stale_met[label]):g} (median)")


if __name__ == "__main__":
    main()
