"""Client ceiling: specload headless vs the lean reference client, same max-speed server, same run.

    python benchmarks/ceiling.py [--requests 1000] [--max-tokens 500] [--concurrency 64] [--rounds 3]

The simulator runs in max-speed mode (no sleeps, 16 SSE events per write, one token per event), so
the client is the bottleneck. For each round it runs the reference client (benchmarks/
reference_client.py) and ``specload run`` as separate processes, alternating, and prints for each:
output tok/s, client CPU per streamed token (total process CPU including start-up, and with
start-up subtracted using a 1-request run), and specload's throughput as a share of the
reference's. It also reports the simulator's own CPU, to show it is not the limit.
Targets (issue #6): <= 6 us CPU per token, >= 60 % of the reference's throughput.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import proc_cpu_s, run_child, simulator  # noqa: E402

HERE = Path(__file__).parent


def specload_cmd(url: str, conc: int, n: int, max_tokens: int, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "specload.cli", "run", url, "-c", str(conc), "-n", str(n),
        "--max-tokens", str(max_tokens), "--ignore-eos", "--api", "completions", "--no-health",
        "--metrics-url", "off", "--json", *extra,
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra", default="", help="extra specload options, e.g. '--workers 2'")
    a = ap.parse_args()
    extra = a.extra.split()
    with simulator("--max-speed", "--spec-tokens", "0") as (url, sim):
        # start-up cost of specload itself: a 1-request, 1-token run
        res, wall, cpu = run_child(specload_cmd(url, 1, 1, 1, extra))
        startup_cpu = cpu
        ref, spl = [], []
        for r in range(a.rounds):
            sim_cpu0 = proc_cpu_s(sim.pid)
            res, wall, cpu = run_child([
                sys.executable, str(HERE / "reference_client.py"), url, "--concurrency", str(a.concurrency),
                "--requests", str(a.requests), "--max-tokens", str(a.max_tokens)])
            out = json.loads(res.stdout)
            ref.append({"tok_s": out["events_per_s"], "cpu_us": cpu / out["events"] * 1e6,
                        "sim_cpu_share": (proc_cpu_s(sim.pid) - sim_cpu0) / out["wall_s"]})
            sim_cpu0 = proc_cpu_s(sim.pid)
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
                "sim_cpu_share": (proc_cpu_s(sim.pid) - sim_cpu0) / lv["wall_s"],
            })
            print(f"round {r + 1}: reference {ref[-1]['tok_s']:,.0f} tok/s {ref[-1]['cpu_us']:.2f} us/tok | "
                  f"specload {spl[-1]['tok_s']:,.0f} tok/s {spl[-1]['cpu_us']:.2f} us/tok "
                  f"({spl[-1]['cpu_us_run']:.2f} without start-up), TTFT p50 {spl[-1]['ttft_p50_ms']:.1f} ms, "
                  f"saturation flagged at C={spl[-1]['saturated']}", flush=True)
    med = statistics.median
    ref_tok, spl_tok = med(x["tok_s"] for x in ref), med(x["tok_s"] for x in spl)
    print()
    print(f"setup: C={a.concurrency}, {a.requests} requests x {a.max_tokens} tokens, max-speed simulator, "
          f"{a.rounds} rounds, medians; specload options: {' '.join(extra) or '(none)'}")
    print(f"reference client : {ref_tok:>10,.0f} tok/s   {med(x['cpu_us'] for x in ref):.2f} us CPU/token")
    print(f"specload headless: {spl_tok:>10,.0f} tok/s   {med(x['cpu_us'] for x in spl):.2f} us CPU/token "
          f"({med(x['cpu_us_run'] for x in spl):.2f} without the {startup_cpu:.2f} s start-up)")
    print(f"specload / reference throughput: {spl_tok / ref_tok:.0%}   (target >= 60 %)")
    print(f"simulator CPU share during the runs: reference {med(x['sim_cpu_share'] for x in ref):.0%}, "
          f"specload {med(x['sim_cpu_share'] for x in spl):.0%} of a core")


if __name__ == "__main__":
    main()
