"""The lean reference client: raw asyncio streams, one connection per request, counting ``data:``
events without parsing them. It is the yardstick for specload's ceiling: what a Python client that
does almost nothing per token reaches against the same server in the same run.

    python benchmarks/reference_client.py URL --concurrency 64 --requests 1000 --max-tokens 500

Prints one JSON line: requests, failed (connection errors), events, wall_s, cpu_s, events_per_s, cpu_us_per_event, and
``lag_ms``: the worst wake-up delay of each second (a 5 ms sleep's oversleep, as specload's probe), from 2 s after
the ramp's end to the last request's start (all C open), as specload's record measures its own loop lag.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlparse


async def one(host: str, port: int, body: bytes) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    try:  # closed also when the server resets it (counted as failed by the caller)
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (host.encode(), len(body), body)
        )
        await writer.drain()
        events = 0
        tail = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            buf = tail + data
            events += buf.count(b"data: ")
            # keep the last few bytes so a "data: " split across reads is counted once
            tail = buf[-5:]
            events -= tail.count(b"data: ")
    finally:
        writer.close()
    return events


async def main_async(url: str, concurrency: int, requests: int, max_tokens: int, ramp_up: float = 0.0) -> dict:
    u = urlparse(url)
    body = json.dumps(
        {"model": "sim-llm", "prompt": "hello", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    remaining = requests
    total = 0
    failed = 0
    last_start = 0.0
    worst: dict[int, float] = {}  # second -> worst oversleep (ms)

    async def worker(i: int) -> None:
        nonlocal remaining, total, last_start, failed
        if ramp_up:
            await asyncio.sleep(ramp_up * i / concurrency)  # connections opened evenly over the ramp
        while remaining > 0:
            remaining -= 1
            last_start = time.perf_counter()
            try:
                n = await one(u.hostname, u.port, body)
            except OSError:  # a refused or reset connection (a server at its limit): counted, not fatal
                failed += 1
                continue
            total += n  # not `total += await ...`: that reads total before the await

    async def lag_probe() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            late = (time.perf_counter() - t - 0.005) * 1e3
            sec = int(t - t0)
            worst[sec] = max(worst.get(sec, 0.0), late)

    cpu0, t0 = time.process_time(), time.perf_counter()
    probe = asyncio.ensure_future(lag_probe())
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    probe.cancel()
    steady = sorted(v for s, v in worst.items() if ramp_up + 2 <= s < int(last_start - t0))
    return {
        "requests": requests,
        "failed": failed,
        "events": total,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "events_per_s": round(total / wall, 1),
        "cpu_us_per_event": round(cpu / max(1, total) * 1e6, 3),
        "lag_ms": [round(v, 1) for v in steady],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--ramp-up", type=float, default=0.0, help="seconds over which the C connections open")
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(main_async(a.url, a.concurrency, a.requests, a.max_tokens, a.ramp_up))))


if __name__ == "__main__":
    main()
