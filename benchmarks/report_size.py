"""Size and build time of the HTML report (and the PNG plot) for a 10,000-request run.

    python benchmarks/report_size.py [--requests 10000] [--concurrency 8,16,32,64]

Makes a real record against the built-in simulator (fast pinned timing, so the run takes a minute
or so), writes its HTML report and PNG plot the way ``specload report RUN --html/--plot`` does, and
prints the sizes and times. The report's data grows with the run's duration (one value per
timeline bin, at most 3,600 bins), not with its request count: the same 10,000 requests are also
laid out as if they had taken one and ten hours (synthetic columns, same code path), to show the
bound.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import simulator

import specload.report.peers  # noqa: F401 - registers the peer readers
from specload.record.runs import load_run
from specload.report.figures import page_from_runs
from specload.report.html import write_html


def stretched(run, hours: float):  # a runs.Run
    """The run's requests spread evenly over ``hours`` (a long run's shape, same request count)."""
    span = hours * 3600
    levels = []
    for i, lv in enumerate(run.levels):
        n = lv.n
        a = span * i / len(run.levels)
        b = span * (i + 1) / len(run.levels)
        start = np.linspace(a, b - 10, n)
        e2e = lv.e2e_ms if lv.e2e_ms is not None else np.full(n, 1000.0)
        levels.append(replace(lv, start_s=start, end_s=start + np.nan_to_num(e2e) / 1e3, _steady=[]))
    server = tuple({"t_s": float(t), "source": "metrics", "running": 8.0, "queued": 0.0, "token_usage": 0.2,
                    "gen_tok_s": 900.0, "accept_len": 2.4} for t in np.arange(0, span, 1.0))
    timeline = replace(run.timeline, server=server, events=(), crashes=())
    return replace(run, levels=tuple(levels), timeline=timeline, end={"elapsed_s": span, "reason": "completed"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", default="8,16,32,64")
    a = ap.parse_args()
    levels = [int(c) for c in a.concurrency.split(",")]
    per_level = a.requests // len(levels)
    with simulator("--ttft-ms", "5", "--itl-ms", "1", "--spec-tokens", "3", "--accept-rate", "0.7") as (url, _), \
            tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "run.jsonl"
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "specload.cli", "run", url, "-c", a.concurrency, "-n", str(per_level),
             "--max-tokens", "48", "--ignore-eos", "--record", str(rec)],
            capture_output=True, text=True, timeout=1800,
        )
        if p.returncode:
            raise SystemExit(p.stderr[-600:])
        run_s = time.perf_counter() - t0
        run = load_run(str(rec))
        n = sum(lv.n for lv in run.levels)
        print(f"record: {n} requests at C={a.concurrency} in {run_s:.0f} s, {rec.stat().st_size / 1e6:.1f} MB")
        cases = [("as recorded", run)] + [(f"spread over {h} h", stretched(run, h)) for h in (1, 10)]
        for name, r in cases:
            t0 = time.perf_counter()
            page = page_from_runs([SimpleNamespace(label=r.label, runs=(r,))])
            size = write_html(Path(tmp) / "r.html", page)
            dt = time.perf_counter() - t0
            tl = page.runs[0].timeline
            bins = len(tl.t_s) if tl else 0
            print(f"HTML, {name}: {size / 1e3:.0f} kB ({bins} bins of {tl.bin_s if tl else 0:g} s), built in {dt:.2f} s")
        try:
            from specload.report.plot import render_plot

            t0 = time.perf_counter()
            size = render_plot(page_from_runs([SimpleNamespace(label=run.label, runs=(run,))]).series,
                               Path(tmp) / "r.png")
            print(f"PNG plot: {size / 1e3:.0f} kB in {time.perf_counter() - t0:.2f} s")
        except Exception as e:  # noqa: BLE001 - matplotlib is optional
            print(f"PNG plot: skipped ({e})")


if __name__ == "__main__":
    main()
