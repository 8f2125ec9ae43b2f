"""The SSE decoder alone: a normal LLM stream (the hot path) and a hostile newline-less line.

    python benchmarks/sse_decoder.py [--baseline REV] [--line-mb 40] [--read-kb 64]

For each decoder it prints the CPU time to decode a typical stream (50,000 compact chat chunks cut
into socket-sized reads, as the client sees them) and to read one ``--line-mb`` MB line without a
newline in ``--read-kb`` KB reads (a hostile server; the decoder caps events at 4 MiB and raises,
so the figure is the time to reach the cap and give up). ``--baseline REV`` also loads
``specload/engine/sse.py`` as it was at git revision REV and measures it in the same run, so the
ratio holds on a shared machine. The old decoder had no cap: its line figure is the whole line.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_decoder(rev: str | None):  # a module
    if rev is None:
        from specload.engine import sse

        return sse
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:specload/engine/sse.py"],
                         capture_output=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / f"sse_{rev.replace('/', '_')}.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def normal_reads(n_events: int = 50_000, read_bytes: int = 4096) -> list[bytes]:
    ev = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
    stream = ev * n_events
    return [stream[i:i + read_bytes] for i in range(0, len(stream), read_bytes)]


def cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def bench(mod, reads: list[bytes], line_mb: int, read_kb: int, rounds: int = 5) -> tuple[float, float, str]:
    def normal() -> None:
        d = mod.SSEDecoder()
        n = 0
        for r in reads:
            n += len(d.feed(r))
        assert n == 50_000

    normal_s = min(cpu(normal) for _ in range(rounds))
    piece = b"x" * (read_kb << 10)
    count = (line_mb << 20) // len(piece)
    outcome = "read whole"

    def line() -> None:
        nonlocal outcome
        d = mod.SSEDecoder()
        d.feed(b"data: ")
        try:
            for _ in range(count):
                d.feed(piece)
        except ValueError as e:
            outcome = f"stopped: {e}"

    line_s = cpu(line)
    return normal_s, line_s, outcome


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", help="git revision of the decoder to compare with")
    ap.add_argument("--line-mb", type=int, default=40)
    ap.add_argument("--read-kb", type=int, default=64)
    a = ap.parse_args()
    reads = normal_reads()
    rows = [("current", load_decoder(None))]
    if a.baseline:
        rows.append((a.baseline, load_decoder(a.baseline)))
    results = {}
    for name, mod in rows:
        normal_s, line_s, outcome = bench(mod, reads, a.line_mb, a.read_kb)
        results[name] = normal_s
        print(f"{name:>10}: normal stream {normal_s * 1e3:7.1f} ms CPU for 50,000 events "
              f"({normal_s / 50_000 * 1e9:.0f} ns/event); {a.line_mb} MB line in {a.read_kb} KB reads: "
              f"{line_s:.3f} s CPU ({outcome})")
    if a.baseline:
        print(f"normal stream, current / {a.baseline}: {results['current'] / results[a.baseline]:.2f}x CPU")


if __name__ == "__main__":
    main()
