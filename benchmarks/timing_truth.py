"""Timing truth: specload's TTFT and TPOT against the server's own measurement of the same requests.

    python benchmarks/timing_truth.py [--levels 1,16] [--requests-per-level 8x]

The simulator logs, per request, the TTFT and TPOT it measured itself (``Finish request: ...
ttft_ms=... tpot_ms=...``). specload's figures for the same requests should differ only by the
client's share: loopback, HTTP and parsing. Prints, per concurrency, the medians on both sides, the
TTFT bias (client - server, ms) and the TPOT difference (%). Targets (issue #6): TTFT bias at most
+2 ms at C=1 and +5 ms at C=16; TPOT within 0.5 %.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from specload.record.reader import read_record

FINISH = re.compile(r"Finish request: .*?status=200 .*?ttft_ms=([\d.]+) tpot_ms=([\d.]+)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="1,16")
    ap.add_argument("--per-level", type=int, default=8, help="requests per level = this x C")
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    print(f"{'C':>3} {'n':>4} | {'TTFT client':>11} {'server':>8} {'bias ms':>8} | "
          f"{'TPOT client':>11} {'server':>8} {'diff %':>7}")
    for c in (int(x) for x in a.levels.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "sim.log"
            rec = Path(tmp) / "run.jsonl"
            sim = subprocess.Popen(
                [sys.executable, "-m", "specload.sim", "--port", "0", "--ttft-ms", "30", "--itl-ms", "10",
                 "--spec-tokens", "0", "--log-file", str(log), "--log-interval", "60"],
                stdout=subprocess.PIPE, text=True,
            )
            try:
                url = sim.stdout.readline().split("listening on ")[1].strip()
                n = c * a.per_level
                p = subprocess.run(
                    [sys.executable, "-m", "specload.cli", "run", url, "-c", str(c), "-n", str(n),
                     "--max-tokens", str(a.max_tokens), "--ignore-eos", "--api", "chat", "--warmup-requests",
                     str(c), "--record", str(rec), "--no-health", "--metrics-url", "off"],
                    capture_output=True, text=True, timeout=300,
                )
                if p.returncode:
                    raise SystemExit(p.stderr[-600:])
            finally:
                sim.terminate()
                sim.wait(10)
            server = [(float(t), float(tp)) for t, tp in FINISH.findall(log.read_text())][c:]  # skip warm-up
            data = read_record(str(rec))
            client = [(r["ttft_ms"], r["tpot_ms"]) for r in data.requests if r["ok"] and not r["warmup"]]
            med = statistics.median
            ct, st = med(x[0] for x in client), med(x[0] for x in server)
            cp, sp = med(x[1] for x in client), med(x[1] for x in server)
            print(f"{c:>3} {len(client):>4} | {ct:>11.3f} {st:>8.3f} {ct - st:>+8.3f} | "
                  f"{cp:>11.4f} {sp:>8.4f} {100 * (cp - sp) / sp:>+7.3f}")


if __name__ == "__main__":
    main()
