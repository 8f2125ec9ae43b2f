"""Start-up: from launching ``specload run`` to its first load request, and ``specload tui`` to its
first frame.

    python benchmarks/startup.py [--rounds 5]

A tiny asyncio HTTP server on 127.0.0.1 answers at once and notes when each request arrives: the
calibration's (``/tokenize`` is not found, so two small non-streamed generations size the prompts)
and the load's (streamed). ``run`` is launched three ways in each round, interleaved: with the
calibration (the default), with ``--tokens-per-word`` (calibration skipped: the prompt lengths are
known), and with ``--prompt`` (no synthetic prompts). The time from ``Popen`` to the first load
request is the start-up a user waits for; the calibration's share is the first minus the second.
``tui`` runs on a pseudo-terminal of its own (80x24); its first frame is the first time the header's
"client cpu" has been drawn. Also prints the modules imported on the headless path that are known to
be heavy (textual, torch, transformers must never be among them). Targets (issue 29): ``run``
under 0.5 s without calibration.

specload's bytecode is compiled first and the children may use it (``PYTHONDONTWRITEBYTECODE`` is
lifted for them), as after ``pip install``: without cached bytecode every start compiles specload's
modules from source again (~200 ms of CPU here).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import proc_cpu_s

SSE = (
    b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n'
    b'data: {"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":1}}\n\ndata: [DONE]\n\n'
)


async def measure(rounds: int) -> dict[str, list[float]]:
    first_post: list[float] = []
    any_request: list[float] = []
    child: list[int] = []  # the run's pid, and its CPU seconds when its first load request came
    cpu_at_first: list[float] = []
    arrived = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # a client that left before its request (a run stopped at its first one)
            return
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = await reader.readexactly(length) if length else b""
        if not any_request:
            any_request.append(time.perf_counter())
        if head.startswith(b"POST") and b"tokenize" in head.split(b"\r\n")[0]:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        elif head.startswith(b"POST") and b'"stream":true' not in body.replace(b" ", b""):
            words = len(body.split(b" "))  # a calibration request: what a server counts for it
            body = (b'{"choices":[{"message":{"content":"x"},"text":"x","finish_reason":"length"}],'
                    b'"usage":{"prompt_tokens":%d,"completion_tokens":1}}' % round(words * 1.3 + 5))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
        elif head.startswith(b"POST"):
            if not arrived.is_set():
                first_post.append(time.perf_counter())
                if child:
                    cpu_at_first.append(proc_cpu_s(child[0]))
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
    url = f"http://127.0.0.1:{port}"
    variants = {"calibrated": [], "--tokens-per-word": ["--tokens-per-word", "1.3"], "--prompt": ["--prompt", "hi"]}
    times: dict[str, list[float]] = {k: [] for k in [*variants, "first request (calibrated)", "tui first frame"]}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(rounds):
        names = list(variants)
        for name in names[r % 3:] + names[:r % 3]:
            arrived.clear()
            first_post.clear()
            any_request.clear()
            child.clear()
            cpu_at_first.clear()
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "specload.cli", "run", url, "-c", "1", "-n", "1", "--api", "chat",
                "--model", "m", "--max-tokens", "1", "--no-health", "--metrics-url", "off", "--gpu-metrics", "off", "--no-record",
                *variants[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            child.append(proc.pid)
            await asyncio.wait_for(arrived.wait(), 30)
            times[name].append(first_post[0] - t0)
            if cpu_at_first:
                cpu[name].append(cpu_at_first[0])
            if name == "calibrated":
                times["first request (calibrated)"].append(any_request[0] - t0)
            await asyncio.wait_for(proc.wait(), 30)
        times["tui first frame"].append(await asyncio.to_thread(tui_first_frame, url))
    server.close()
    for name, cs in cpu.items():
        times[f"run's own CPU until its first load request, {name}"] = cs
    return times


def tui_first_frame(url: str) -> float:
    """Seconds from launching ``specload tui URL`` on a pty (80x24) to its header drawn."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    cwd = tempfile.TemporaryDirectory()  # the dashboard writes its record where it runs
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specload.cli", "tui", url, "-c", "1", "--api", "chat", "--model", "m",
         "--max-tokens", "1", "--no-health", "--metrics-url", "off", "--gpu-metrics", "off", "--tokens-per-word", "1.3"],
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True, close_fds=True, cwd=cwd.name,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    os.close(slave)
    seen = b""
    took = float("nan")
    try:
        deadline = t0 + 60
        while time.perf_counter() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
                if b"client cpu" in seen:
                    took = time.perf_counter() - t0
                    break
    finally:
        proc.kill()
        proc.wait(10)
        os.close(master)
        cwd.cleanup()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import compileall

    compileall.compile_dir(str(Path(__file__).parent.parent / "specload"), quiet=1)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    load = os.getloadavg()[0]
    times = asyncio.run(measure(a.rounds))
    print(f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; {a.rounds} rounds, interleaved")
    for name, ts in times.items():
        what = name if name.startswith(("first", "tui", "run's")) else f"run -> first load request, {name}"
        print(f"{what}: median {statistics.median(ts) * 1000:.0f} ms, min {min(ts) * 1000:.0f} ms, "
              f"max {max(ts) * 1000:.0f} ms")
    cal = [c - k for c, k in zip(times["calibrated"], times["--tokens-per-word"], strict=True)]
    print(f"calibration's share (calibrated minus --tokens-per-word, per round): median "
          f"{statistics.median(cal) * 1000:.0f} ms; target: run without calibration < 500 ms")
    code = (
        "import sys, specload.cli as c, specload.cli_run, specload.headless, specload.session\n"
        "heavy = [m for m in ('textual', 'torch', 'transformers', 'numpy', 'matplotlib') if m in sys.modules]\n"
        "print('heavy modules on the headless start path:', heavy or 'none')\n"
    )
    print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
