"""The figures of one specload ramp against the real llama-server, without and with speculation.

Runs ``specload run URL --launch "<llama-server ...>" -c 1,2,4,8 -n 16 --max-tokens 128 --api chat``
twice (plain, then ``--spec-type ngram-mod``) and prints, per level: throughput, TTFT p50, TPOT p50,
ITL p50 and the speculative acceptance length three ways:

- ``specload``: what specload shows, from its own /metrics scrapes (``server`` lines with source
  ``metrics``: 1 + accepted/drafts over the scrape intervals that ended inside the level; ``-`` when
  no scrape with drafts fell in the level, which is what a 1 s scrape interval does to short levels);
- ``log``: the server's per-request counters from its ``draft acceptance`` log lines, as specload
  parsed them (``log:llamacpp``), summed over the level's requests;
- a run total from the server's ``llamacpp:spec_decode_*`` counters, polled by this script at
  20 Hz while specload runs (the launched server is fresh, so its counters start at 0). specload
  stops the server within milliseconds of the last response, so the last poll usually misses the
  final requests: the line says how many tokens it covers. The log-line sums are the exact
  counterpart (tests/integration/test_real_server.py checks that they equal the counter deltas).

Usage: ``python benchmarks/real_server_figures.py [--requests 16] [--max-tokens 128]``. Needs
``shared/real-server`` (``SPECLOAD_SHARED`` overrides where ``shared`` is). Loopback only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.real_server_util import (
    free_port,
    http_get,
    llama_cmd,
    missing_reason,
    parse_llamacpp_metrics,
    run_specload,
)

LEVELS = "1,2,4,8"


class CounterPoller(threading.Thread):
    """Polls ``/metrics`` until stopped; keeps the last good scrape."""

    def __init__(self, url: str, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.interval = interval
        self.last: dict[str, float] = {}
        self.scrapes = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            status, text = http_get(self.url, timeout=0.5)
            if status == 200:
                self.last = parse_llamacpp_metrics(text)
                self.scrapes += 1
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def _level_windows(record) -> list[tuple[int, float, float]]:  # type: ignore[no-untyped-def]
    starts = [(e["value"]["index"], e["t_s"]) for e in record.events if e["kind"] == "level"]
    end = record.end["elapsed_s"] if record.end else float("inf")
    out = []
    for i, (index, t) in enumerate(starts):
        out.append((index, t, starts[i + 1][1] if i + 1 < len(starts) else end))
    return out


def _accept_len(accepted: float, steps: float) -> str:
    return f"{1 + accepted / steps:.2f}" if steps else "-"


def run_one(label: str, extra: tuple[str, ...], args: argparse.Namespace, workdir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    poller = CounterPoller(url + "/metrics")
    poller.start()
    try:
        run = run_specload(
            url, "--launch", llama_cmd(port, *extra), "--api", "chat", "-c", LEVELS,
            "-n", str(args.requests), "--max-tokens", str(args.max_tokens),
            workdir=workdir, timeout=300, name=label,
        )  # fmt: skip
    finally:
        poller.stop()
    if run.returncode != 0 or run.record is None or run.summary is None:
        print(f"{label}: specload failed: {run.describe()}")
        return
    rec = run.record
    levels = {lv["level_index"]: lv for lv in rec.levels}
    windows = _level_windows(rec)
    print(f"\n== {label}: llama-server {' '.join(extra) or '(no speculation)'}; "
          f"{run.summary['ok']}/{run.summary['requests']} ok, {run.elapsed_s:.1f} s")  # fmt: skip
    print(f"{'C':>3} {'req':>4} {'tok/s':>8} {'TTFT p50':>9} {'TPOT p50':>9} {'ITL p50':>8}  "
          f"{'accept len specload':>19} {'accept len log':>14}")  # fmt: skip
    tot_log_acc = tot_log_steps = tot_m_acc = tot_m_drafts = 0.0
    for index, t0, t1 in windows:
        lv = levels.get(index)
        if lv is None:
            continue
        m = [
            s
            for s in rec.servers
            if s["source"] == "metrics" and t0 < s["t_s"] <= t1 and s.get("extra", {}).get("drafts")
        ]
        m_acc = sum(s["extra"]["accepted_tokens"] for s in m)
        m_drafts = sum(s["extra"]["drafts"] for s in m)
        logs = [
            s for s in rec.servers
            if s["source"] == "log:llamacpp" and s["extra"].get("kind") == "spec" and t0 <= s["t_s"] <= t1
        ]  # fmt: skip
        l_acc = sum(s["extra"]["accepted_tokens"] for s in logs)
        l_steps = sum(
            s["extra"]["accepted_tokens"] / (s["accept_len"] - 1) for s in logs if s.get("accept_len", 1) > 1
        )
        tot_log_acc += l_acc
        tot_log_steps += l_steps
        tot_m_acc += m_acc
        tot_m_drafts += m_drafts
        itl = [
            r["itl_ms_p50"] for r in rec.requests if r["level_index"] == index and r["itl_ms_p50"] is not None
        ]
        itl_p50 = sorted(itl)[len(itl) // 2] if itl else float("nan")
        print(
            f"{lv['concurrency']:>3} {lv['requests']:>4} {lv['throughput_tok_s']:>8.0f} "
            f"{lv['ttft_ms_p50']:>7.1f}ms {lv['tpot_ms_p50']:>7.3f}ms {itl_p50:>6.3f}ms  "
            f"{_accept_len(m_acc, m_drafts):>19} {_accept_len(l_acc, l_steps):>14}"
        )
    for r in rec.requests:
        if not r["ok"]:
            e = r["error"]
            print(
                f"    failed request {r['id']} at C={r['level']}: {e['kind']} (retries {r['retries']}): {e['detail']}"
            )
    c = poller.last
    drafts = c.get("llamacpp:spec_decode_num_drafts_total", 0.0)
    accepted = c.get("llamacpp:spec_decode_num_accepted_tokens_total", 0.0)
    draft_tokens = c.get("llamacpp:spec_decode_num_draft_tokens_total", 0.0)
    predicted = c.get("llamacpp:tokens_predicted_total", 0.0)
    out_tokens = sum(r["output_tokens"] for r in rec.requests if r["ok"])
    print(
        f"run total: server counters at this script's last /metrics poll ({poller.scrapes} polls; specload stops "
        f"the server right after the last response, so the poll covers {predicted:.0f} of {out_tokens} tokens): drafts {drafts:.0f}, draft tokens {draft_tokens:.0f}, "
        f"accepted {accepted:.0f} -> accept len {_accept_len(accepted, drafts)}, "
        f"rate {accepted / draft_tokens if draft_tokens else float('nan'):.3f}"
    )
    print(
        f"           specload /metrics deltas: accepted {tot_m_acc:.0f} in {tot_m_drafts:.0f} drafts "
        f"-> {_accept_len(tot_m_acc, tot_m_drafts)}; log lines: accepted {tot_log_acc:.0f} in "
        f"{tot_log_steps:.0f} steps -> {_accept_len(tot_log_acc, tot_log_steps)}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", "-n", type=int, default=16, help="requests per level")
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    reason = missing_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory(prefix="specload-real-") as tmp:
        work = Path(tmp)
        run_one("plain", (), args, work)
        run_one("ngram-mod", ("--spec-type", "ngram-mod"), args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
