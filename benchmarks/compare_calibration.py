"""Calibration of ``specload report A B``: how often its headline verdict is wrong, and how often right.

    python benchmarks/compare_calibration.py [--mode virtual|real] [--pairs 20] [--known 10]
                                             [--levels 1,4,16,64] [--requests-per-level N] [--jobs 2]

Runs specload against the built-in simulator many times, each run with a simulator of its own seed
(acceptance draws, step and prefill noise all differ), and compares the records with the same code
``report`` uses. ``--mode virtual`` (default) runs the simulator and the session in one process in
virtual time (``specload.sim.virtual_time``): the timings are the simulator's schedule, so the figures
measure the statistics against the simulator's own randomness, immune to the machine's load, and runs
can go in parallel. ``--mode real`` runs ``specload run`` in real time: the figures then also contain
the machine's timing noise (run-to-run variation that a single run per side cannot see).

- identical pairs: two runs of the same settings with different seeds. Any ``better`` or ``worse``
  headline verdict is a false positive; the rate per level should be at most about 5% (the intervals
  are 95% ones, and ``--min-effect`` only lowers it).
- known differences, each run against a baseline run of its own (the identical pairs' first runs):
  decode steps 5% slower, 20% slower, and speculative decoding off (the baseline has it on). The
  detection rate is the share of levels whose headline verdict says the expected direction.

The default sample size is specload's own (``-n`` unset: 4 x C requests per level, at least 10), which
is what a user gets without asking for more. The simulator runs at 10 ms per decode step and 64
output tokens so that a run takes seconds; every run is bounded (``--max-duration``). The machine may
be shared: the figures include whatever timing noise that adds, as real runs would.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # the repository: specload and tests.virtual_runs
from specload.record.runs import load_run
from specload.report.compare import Side, compare
from specload.stats import intervals as iv

BASE_SIM = "--step-ms 10 --max-batch 64 --spec-tokens 3 --accept-rate 0.7 --quiet"
BASE_SIM_FIELDS = {"step_ms": 10.0, "max_batch": 64, "spec_tokens": 3, "accept_rate": 0.7}
VARIANTS = {
    "step +5%": ("--step-ms 10.5", "worse"),
    "step +20%": ("--step-ms 12", "worse"),
    "spec off": ("--spec-tokens 0", "worse"),
}
VARIANT_FIELDS = {"": {}, "--step-ms 10.5": {"step_ms": 10.5}, "--step-ms 12": {"step_ms": 12.0},
                  "--spec-tokens 0": {"spec_tokens": 0}}
REPORTED = ("throughput", "per_request_tok_s", "tpot_p50")


def sim_args(extra: str, seed: int) -> str:
    # later options win in click: the variant's --step-ms or --spec-tokens overrides the base
    return f"{BASE_SIM} {extra} --seed {seed}".strip()


def virtual_run(job: tuple[str, str, int, str, int | None, int]) -> str:
    path, extra, seed, levels, n, max_tokens = job
    from tests.virtual_runs import virtual_record

    virtual_record(Path(path), levels=tuple(int(x) for x in levels.split(",")), n=n, seed=seed,
                   max_tokens=max_tokens, sim={**BASE_SIM_FIELDS, **VARIANT_FIELDS[extra]})
    return path


def one_run(path: Path, args: argparse.Namespace, extra: str, seed: int) -> Path:
    if args.mode == "virtual":
        return path  # made by virtual_run in a worker process
    cmd = [sys.executable, "-m", "specload.cli", "run", "-c", args.levels, "--max-tokens", str(args.max_tokens),
           "--ignore-eos", "--max-duration", "300", "--record", str(path), "--sim-args", sim_args(extra, seed)]
    if args.requests_per_level:
        cmd += ["-n", str(args.requests_per_level)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if p.returncode != 0:
        raise SystemExit(f"run failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return path


def wilson(k: int, n: int) -> str:
    e = iv.share_ci(k, n)
    if e.value is None:
        return "-"
    return f"{100 * e.value:4.1f}% [{100 * e.ci_low:4.1f}, {100 * e.ci_high:4.1f}]"  # type: ignore[operator]


def verdicts(base: Path, other: Path, min_effect: float) -> dict[tuple[int, str], tuple[str, float | None]]:
    a, b = load_run(str(base), "a"), load_run(str(other), "b")
    c = compare([Side("a", (a,)), Side("b", (b,))], min_effect=min_effect, metrics=REPORTED)
    out = {}
    for lc in c.levels:
        for m in REPORTED:
            r = lc.result("b", m)
            if r is None or r.decision is None:
                continue
            hw = None
            if r.ratio is not None and math.isfinite(r.ratio.ci_low):
                hw = 100 * (r.ratio.ci_high - r.ratio.ci_low) / 2
            out[(lc.key.concurrency, m)] = (r.decision.verdict, hw)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=20, help="identical pairs (2 runs each)")
    ap.add_argument("--known", type=int, default=10, help="runs per known difference (each vs a baseline run)")
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--requests-per-level", type=int, default=None, help="default: specload's (4 x C, >= 10)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--min-effect", type=float, default=2.0, help="percent")
    ap.add_argument("--mode", choices=("virtual", "real"), default="virtual")
    ap.add_argument("--jobs", type=int, default=None,
                    help="runs at once (default: 2 in virtual time, 1 in real time, where more adds noise)")
    ap.add_argument("--keep", help="keep the records in this directory")
    a = ap.parse_args()
    if a.known > a.pairs:
        raise SystemExit("--known must not exceed --pairs (each known run needs a baseline run)")
    levels = [int(x) for x in a.levels.split(",")]
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="specload-calib-"))
    tmp.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    jobs = []  # (path, extra, seed)
    for i in range(a.pairs):
        jobs.append((tmp / f"base-{i}-a.jsonl", "", 1000 + 2 * i))
        jobs.append((tmp / f"base-{i}-b.jsonl", "", 1001 + 2 * i))
    for vi, (_name, (extra, _)) in enumerate(VARIANTS.items()):
        for i in range(a.known):
            jobs.append((tmp / f"var{vi}-{i}.jsonl", extra, 5000 + 100 * vi + i))
    todo = [j for j in jobs if not j[0].exists()]  # --keep DIR resumes
    print(f"{len(jobs)} runs ({len(todo)} to make, {a.mode} time) in {tmp}; simulator: {BASE_SIM}; levels {a.levels}, "
          f"{a.max_tokens} tokens, requests per level: {a.requests_per_level or '4 x C (>= 10)'}", flush=True)
    done = 0
    jobs_n = a.jobs or (2 if a.mode == "virtual" else 1)
    if a.mode == "virtual":
        pool_cm = ProcessPoolExecutor(max(1, jobs_n))
        work = [(str(p), extra, seed, a.levels, a.requests_per_level, a.max_tokens) for p, extra, seed in todo]
        results = pool_cm.map(virtual_run, work)
    else:
        pool_cm = ThreadPoolExecutor(max(1, jobs_n))  # type: ignore[assignment]
        results = pool_cm.map(lambda j: one_run(j[0], a, j[1], j[2]), todo)
    with pool_cm:
        for _ in results:
            done += 1
            if done % 10 == 0:
                print(f"  {done}/{len(todo)} runs, {time.monotonic() - t0:.0f} s", flush=True)
    made_s = time.monotonic() - t0

    me = a.min_effect / 100
    print(f"\nidentical pairs: {a.pairs} (different seeds); headline = output tok/s; min effect ±{a.min_effect:g}%; "
          "FPR = better or worse, with its 95% interval")
    ident = [verdicts(tmp / f"base-{i}-a.jsonl", tmp / f"base-{i}-b.jsonl", me) for i in range(a.pairs)]
    print(f"{'metric':<18} {'C':>3} {'FPR':>22} {'better':>6} {'worse':>5} {'no diff':>7} {'insuff':>6} "
          f"{'ratio CI ±% (median)':>20}")
    pooled = {m: [0, 0] for m in REPORTED}
    for m in REPORTED:
        for c in levels:
            vs = [d.get((c, m)) for d in ident]
            vs = [v for v in vs if v is not None]
            counts = {k: sum(1 for v, _ in vs if v == k) for k in iv.VERDICTS}
            fp = counts["better"] + counts["worse"]
            pooled[m][0] += fp
            pooled[m][1] += len(vs)
            hws = sorted(h for _, h in vs if h is not None)
            med = f"{hws[len(hws) // 2]:.1f}" if hws else "-"
            print(f"{m:<18} {c:>3} {wilson(fp, len(vs)):>22} {counts['better']:>6} {counts['worse']:>5} "
                  f"{counts['no_difference']:>7} {counts['insufficient']:>6} {med:>20}")
    for m, (k, n) in pooled.items():
        print(f"{m:<18} all {wilson(k, n):>22}   (pooled over levels)")

    print(f"\nknown differences: {a.known} runs each against a baseline run; detection = the headline verdict "
          "says the expected direction")
    print(f"{'variant':<10} {'C':>3} {'detected':>22} {'wrong way':>9} {'no diff':>7} {'insuff':>6} {'ratio (median)':>14}")
    for vi, (name, (_, expect)) in enumerate(VARIANTS.items()):
        ds = [verdicts(tmp / f"base-{i}-a.jsonl", tmp / f"var{vi}-{i}.jsonl", me) for i in range(a.known)]
        ratios = []
        for i in range(a.known):
            ra = load_run(str(tmp / f"base-{i}-a.jsonl"))
            rb = load_run(str(tmp / f"var{vi}-{i}.jsonl"))
            ratios.append({lb.concurrency: (lb.summary.throughput_tok_s / la.summary.throughput_tok_s)
                           for la, lb in zip(ra.levels, rb.levels, strict=False) if la.summary and lb.summary})
        for c in levels:
            vs = [d.get((c, "throughput")) for d in ds]
            vs = [v for v, _ in (x for x in vs if x is not None)]
            hit = sum(1 for v in vs if v == expect)
            wrong = sum(1 for v in vs if v in ("better", "worse") and v != expect)
            rs = sorted(r[c] for r in ratios if c in r)
            med = f"x{rs[len(rs) // 2]:.3f}" if rs else "-"
            print(f"{name:<10} {c:>3} {wilson(hit, len(vs)):>22} {wrong:>9} {vs.count('no_difference'):>7} "
                  f"{vs.count('insufficient'):>6} {med:>14}")
    print(f"\n{len(todo)} runs made in {made_s:.0f} s ({a.mode} time, {jobs_n} at once), "
          f"{time.monotonic() - t0:.0f} s in all (2-core machine, shared with other work)")
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
