"""Client ceiling: specload headless vs the lean reference client, same max-speed server, same run.

    python benchmarks/ceiling.py [--requests 2000] [--max-tokens 500] [--concurrency 64] [--rounds 3]
                                 [--server bench|sim] [--server-procs 1] [--burst 16] [--extra '--workers 2']
    python benchmarks/ceiling.py --steady 1000,3000 [--burst 1] [--code before=PATH]

The server is ``benchmarks/bench_server.py`` (pre-rendered responses written in bursts of
``--burst`` events; ``--server-procs`` processes on one port with SO_REUSEPORT), so that the clients,
not the server, are the limit; ``--server sim`` uses ``specload sim --max-speed`` instead, which is
itself the limit for a lean client (kept for comparison). For each round it runs the reference
client (benchmarks/reference_client.py) and ``specload run`` as separate processes, alternating, and
prints for each: output tok/s, client CPU per streamed token (total process CPU including start-up,
and for specload also with the start-up of a 1-request run subtracted), and the server's CPU share
over the run (per serving process, in % of one core).

The ratio is honest only when the server was not the bottleneck: when any serving process used more
than ``--server-limit`` (80 %) of a core during a run, that run is marked and no ratio is reported.
It also prints the ratio of tokens per CPU-second (steady state), which swings less than the
throughput ratio when the machine is shared. Targets (issue #17): <= 2 us CPU per token, >= 60 % of
the reference's throughput.

``--steady SMALL,LARGE`` measures what the machine's load cannot blur much: each client's CPU
seconds (user + system, from ``getrusage``) of a LARGE-request run minus those of a SMALL-request
run, per token of the difference, so start-up, shutdown and imports cancel out and what is left is
the steady cost per streamed token. The runs are interleaved (every round runs each client at both
sizes, the order rotated), and the ratio reference / specload is reported per round and as the
median. ``--burst 1`` is a server that sends one token per event and one event per write, as a
real server without speculation does; the default (16 events per write) is the pre-rendered
ceiling. ``--code NAME=PATH`` adds another specload checkout (its ``.venv`` or this interpreter)
to the same rounds, as a baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import proc_cpu_s, run_child, simulator

HERE = Path(__file__).parent


@contextmanager
def bench_server(procs: int, burst: int, *more: str):
    """benchmarks/bench_server.py on a free loopback port (``more``: its other options, e.g. pacing);
    yields (url, [pids])."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "bench_server.py"), "--port", "0", "--procs", str(procs), "--burst", str(burst),
         *more],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"bench server did not start: {line!r}")
        url, _, pids = line.split("listening on ")[1].strip().partition(" pids ")
        yield url, [int(p) for p in pids.split()]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def sim_server():
    with simulator("--max-speed", "--spec-tokens", "0") as (url, sim):
        yield url, [sim.pid]


def specload_cmd(url: str, conc: int, n: int, max_tokens: int, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "specload.cli", "run", url, "-c", str(conc), "-n", str(n),
        "--max-tokens", str(max_tokens), "--ignore-eos", "--api", "completions", "--no-health",
        "--metrics-url", "off", "--json", "--no-record", *extra,
    ]


class ServerCPU:
    """CPU seconds of the serving processes over one client run, as shares of one core."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.cpu0 = [proc_cpu_s(p) for p in pids]
        self.t0 = time.perf_counter()

    def shares(self, wall_s: float | None = None) -> list[float]:
        # over the client's measured wall time when it reports one (the server idles during the
        # client's start-up, so this is the conservative share), else since construction
        wall = wall_s or (time.perf_counter() - self.t0)
        return [(proc_cpu_s(p) - c0) / wall for p, c0 in zip(self.pids, self.cpu0, strict=True)]


def _fmt_shares(shares: list[float]) -> str:
    return "+".join(f"{s:.0%}" for s in shares)


def reference_cmd(url: str, conc: int, n: int, max_tokens: int) -> list[str]:
    return [sys.executable, str(HERE / "reference_client.py"), url, "--concurrency", str(conc),
            "--requests", str(n), "--max-tokens", str(max_tokens)]


def steady(url: str, pids: list[int], a: argparse.Namespace, extra: list[str]) -> None:
    """``--steady``: CPU per token of the LARGE run minus the SMALL run, every client, interleaved."""
    small, large = (int(x) for x in a.steady.split(","))
    clients: dict[str, Callable[[int], list[str]]] = {
        "reference": lambda n: reference_cmd(url, a.concurrency, n, a.max_tokens),
        "specload": lambda n: specload_cmd(url, a.concurrency, n, a.max_tokens, extra),
    }
    for spec in a.code:
        name, _, path = spec.partition("=")
        root = Path(path).resolve()
        py = root / ".venv" / "bin" / "python"
        py_s = str(py) if py.exists() else sys.executable
        # -P: `python -m` puts the working directory first on sys.path, before PYTHONPATH, so run
        # from a checkout every --code client ran that checkout's code, not its own
        clients[name] = (lambda n, py_s=py_s, root=root: [
            "env", f"PYTHONPATH={root}", *[py_s, "-P", *specload_cmd(url, a.concurrency, n, a.max_tokens, extra)[1:]]])
    names = list(clients)
    per: dict[str, list[float]] = {k: [] for k in names}
    shares: list[float] = []
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        cpu: dict[tuple[str, int], float] = {}
        for n in ((small, large) if r % 2 == 0 else (large, small)):
            for name in order:
                srv = ServerCPU(pids)
                res, wall, c = run_child(clients[name](n), timeout=1800)
                if res.returncode != 0:
                    raise SystemExit(f"{name} failed: {res.stderr[-800:]}")
                cpu[name, n] = c
                shares.append(max(srv.shares(wall)))
        tokens = (large - small) * a.max_tokens
        for name in names:
            per[name].append((cpu[name, large] - cpu[name, small]) / tokens * 1e6)
        print(f"round {r + 1} (load average {os.getloadavg()[0]:.1f}): " + ", ".join(
            f"{name} {per[name][-1]:.3f} us/token" for name in names)
            + " | reference/specload " + f"{per['reference'][-1] / per['specload'][-1]:.2f}", flush=True)
    med = statistics.median
    print(f"\nsetup: C={a.concurrency}, {small} and {large} requests x {a.max_tokens} tokens, bench server "
          f"x{a.server_procs}, burst {a.burst} events per write{f', paced {a.itl_ms} ms' if a.itl_ms else ''}, {a.rounds} rounds, medians; "
          f"specload options: {' '.join(extra) or '(none)'}; server's busiest share of a core over a run "
          f"(its wall time, start-up included): at most {max(shares):.0%}")
    for name in names:
        print(f"{name:>10}: {med(per[name]):.3f} us CPU per token in the steady state "
              f"(rounds {', '.join(f'{x:.3f}' for x in per[name])})")
    ratios = [ref / spl for ref, spl in zip(per["reference"], per["specload"], strict=True)]
    print(f"reference / specload CPU per token: median {med(ratios):.2f} (rounds "
          f"{', '.join(f'{x:.2f}' for x in ratios)}; target >= 0.85)")
    for name in names[2:]:
        rs = [ref / other for ref, other in zip(per["reference"], per[name], strict=True)]
        print(f"reference / {name}: median {med(rs):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server", choices=("bench", "sim"), default="bench")
    ap.add_argument("--server-procs", type=int, default=1)
    ap.add_argument("--burst", type=int, default=16, help="bench server: SSE events per write")
    ap.add_argument("--server-limit", type=float, default=0.8,
                    help="a serving process above this share of a core makes the run's ratio invalid")
    ap.add_argument("--extra", default="", help="extra specload options, e.g. '--workers 2'")
    ap.add_argument("--itl-ms", default=None, metavar="A[:B]",
                    help="bench server: pace every stream at one write per A to B ms (a real server's pace)")
    ap.add_argument("--steady", default=None, metavar="SMALL,LARGE",
                    help="CPU per token of a LARGE-request run minus a SMALL one, per client, interleaved")
    ap.add_argument("--code", action="append", default=[], metavar="NAME=PATH",
                    help="with --steady: another specload checkout in the same rounds (a baseline)")
    a = ap.parse_args()
    extra = a.extra.split()
    paced = ("--itl-ms", a.itl_ms) if a.itl_ms else ()
    server = bench_server(a.server_procs, a.burst, *paced) if a.server == "bench" else sim_server()
    with server as (url, pids):
        if a.steady:
            steady(url, pids, a, extra)
            return
        # start-up cost of specload itself: a 1-request, 1-token run
        res, wall, startup_cpu = run_child(specload_cmd(url, 1, 1, 1, extra))
        if res.returncode != 0:
            raise SystemExit(f"specload failed: {res.stderr[-800:]}")
        ref, spl = [], []
        for r in range(a.rounds):
            srv = ServerCPU(pids)
            res, wall, cpu = run_child(reference_cmd(url, a.concurrency, a.requests, a.max_tokens))
            out = json.loads(res.stdout)
            # the reference counts every `data:` event (the finish chunk and [DONE] too): tokens are
            # what was asked for, the same count specload reads from the usage chunk
            tokens = a.requests * a.max_tokens
            ref.append({"tok_s": tokens / out["wall_s"], "cpu_us": cpu / tokens * 1e6,
                        "cpu_us_run": out["cpu_s"] / tokens * 1e6, "server": srv.shares(out["wall_s"])})
            srv = ServerCPU(pids)
            res, wall, cpu = run_child(specload_cmd(url, a.concurrency, a.requests, a.max_tokens, extra))
            if res.returncode != 0:
                raise SystemExit(f"specload failed: {res.stderr[-800:]}")
            out = json.loads(res.stdout)
            lv = out["levels"][0]
            tokens = lv["output_tokens"]
            spl.append({
                "tok_s": lv["throughput_tok_s"],
                "cpu_us": cpu / tokens * 1e6,
                "cpu_us_run": (cpu - startup_cpu) / tokens * 1e6,
                "ttft_p50_ms": lv["ttft_ms_p50"],
                "saturated": out.get("client_saturated_levels"),
                "server": srv.shares(lv["wall_s"]),
            })
            print(f"round {r + 1}: reference {ref[-1]['tok_s']:,.0f} tok/s {ref[-1]['cpu_us']:.2f} us/tok "
                  f"(server {_fmt_shares(ref[-1]['server'])} of a core) | "
                  f"specload {spl[-1]['tok_s']:,.0f} tok/s {spl[-1]['cpu_us']:.2f} us/tok "
                  f"({spl[-1]['cpu_us_run']:.2f} without start-up; server {_fmt_shares(spl[-1]['server'])}), "
                  f"TTFT p50 {spl[-1]['ttft_p50_ms']:.1f} ms, saturation flagged at C={spl[-1]['saturated']}",
                  flush=True)
    med = statistics.median
    ref_tok, spl_tok = med(x["tok_s"] for x in ref), med(x["tok_s"] for x in spl)
    worst_ref = max(max(x["server"]) for x in ref)
    worst_spl = max(max(x["server"]) for x in spl)
    print()
    what = (f"bench server x{a.server_procs} (burst {a.burst})" if a.server == "bench"
            else "specload sim --max-speed")
    print(f"setup: C={a.concurrency}, {a.requests} requests x {a.max_tokens} tokens, {what}, "
          f"{a.rounds} rounds, medians; specload options: {' '.join(extra) or '(none)'}")
    print(f"reference client : {ref_tok:>10,.0f} tok/s   {med(x['cpu_us'] for x in ref):.2f} us CPU/token "
          f"({med(x['cpu_us_run'] for x in ref):.2f} in its load loop)")
    print(f"specload headless: {spl_tok:>10,.0f} tok/s   {med(x['cpu_us'] for x in spl):.2f} us CPU/token "
          f"({med(x['cpu_us_run'] for x in spl):.2f} without the {startup_cpu:.2f} s start-up)")
    print(f"server CPU share, busiest serving process, worst round: reference runs {worst_ref:.0%}, "
          f"specload runs {worst_spl:.0%} of a core (limit {a.server_limit:.0%})")
    if worst_ref > a.server_limit or worst_spl > a.server_limit:
        print(f"specload / reference throughput: NOT REPORTED: the server used more than {a.server_limit:.0%} "
              f"of a core, so it and not the client may have been the limit "
              f"(try --server bench, --server-procs 2 or a larger --burst)")
        sys.exit(3)
    print(f"specload / reference throughput: {spl_tok / ref_tok:.0%}   (target >= 60 %)")
    # On a shared 2-core machine neither client may get a whole core, so the throughput ratio
    # swings between rounds; tokens per CPU-second (steady state) is the steadier comparison.
    eff = med(x["cpu_us_run"] for x in ref) / med(x["cpu_us_run"] for x in spl)
    print(f"specload / reference tokens per CPU-second (steady state): {eff:.0%}")


if __name__ == "__main__":
    main()
