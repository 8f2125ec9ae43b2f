"""Start-up: from launching ``specload run`` to its first load request arriving at the server.

    python benchmarks/startup.py [--rounds 5]

A tiny asyncio HTTP server on 127.0.0.1 notes when each request arrives; the time from ``Popen`` to
the first POST of the load (``--api chat --model m``, so no probe request is sent first) is the
start-up cost a user waits for. Also prints the modules imported on that path that are known to be
heavy (textual, torch, transformers must never be among them). Target (issue #6): under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

SSE = (
    b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n'
    b'data: {"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":1}}\n\ndata: [DONE]\n\n'
)


async def measure(rounds: int) -> list[float]:
    first_post: list[float] = []
    arrived = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        if length:
            await reader.readexactly(length)
        if head.startswith(b"POST"):
            if not arrived.is_set():
                first_post.append(time.perf_counter())
                arrived.set()
            body = SSE
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
        else:
            body = b'{"data":[{"id":"m"}]}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    times = []
    for _ in range(rounds):
        arrived.clear()
        first_post.clear()
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specload.cli", "run", f"http://127.0.0.1:{port}", "-c", "1", "-n", "1",
            "--api", "chat", "--model", "m", "--max-tokens", "1", "--no-health", "--metrics-url", "off",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        await asyncio.wait_for(arrived.wait(), 30)
        times.append(first_post[0] - t0)
        await asyncio.wait_for(proc.wait(), 30)
    server.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    times = asyncio.run(measure(a.rounds))
    print(f"launch -> first load request: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {len(times)} runs (target < 1000 ms)")
    code = (
        "import sys, specload.cli as c, specload.cli_run, specload.headless, specload.session\n"
        "heavy = [m for m in ('textual', 'torch', 'transformers', 'numpy', 'matplotlib') if m in sys.modules]\n"
        "print('heavy modules on the headless start path:', heavy or 'none')\n"
    )
    print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
