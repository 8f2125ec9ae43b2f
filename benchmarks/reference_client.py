"""The lean reference client: raw asyncio streams, one connection per request, counting ``data:``
events without parsing them. It is the yardstick for specload's ceiling: what a Python client that
does almost nothing per token reaches against the same server in the same run.

    python benchmarks/reference_client.py URL --concurrency 64 --requests 1000 --max-tokens 500

Prints one JSON line: requests, events, wall_s, cpu_s, events_per_s, cpu_us_per_event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlparse


async def one(host: str, port: int, body: bytes) -> int:
    reader, writer = await asyncio.open_connection(host, port)
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
    writer.close()
    return events


async def main_async(url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    u = urlparse(url)
    body = json.dumps(
        {"model": "sim-llm", "prompt": "hello", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    remaining = requests
    total = 0

    async def worker() -> None:
        nonlocal remaining, total
        while remaining > 0:
            remaining -= 1
            n = await one(u.hostname, u.port, body)
            total += n  # not `total += await ...`: that reads total before the await

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "requests": requests,
        "events": total,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "events_per_s": round(total / wall, 1),
        "cpu_us_per_event": round(cpu / max(1, total) * 1e6, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=500)
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(main_async(a.url, a.concurrency, a.requests, a.max_tokens))))


if __name__ == "__main__":
    main()
