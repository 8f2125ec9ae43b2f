"""A test double for ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] [-lms N]``.

``install(dir)`` writes an executable ``nvidia-smi`` into ``dir`` (put it first on PATH). It prints the
documented CSV: the fields in the order asked, ``, `` between them, a header line (``name [unit]``)
unless ``noheader``, units after the values unless ``nounits``, ``[N/A]`` / ``[Not Supported]`` for a
field a GPU does not report, and loops every N ms with ``-lms N`` (``--loop-ms=N``, ``-l S``). A field
it does not know ends it with nvidia-smi's message and exit status 2.

Set by environment variables:

- ``FAKE_SMI_GPUS``: how many GPUs (2);
- ``FAKE_SMI_MODE``: ``ok``; ``na`` (GPU 1's power.draw is ``[N/A]``, every clocks.sm ``[Not
  Supported]``); ``die`` (exits 1 after ``FAKE_SMI_DIE_AFTER`` loops, 2 by default); ``lost`` (from the
  second loop GPU 1 gives ``Unable to determine the device handle for GPU 00000000:3B:00.0: Unknown
  Error`` instead of its line); ``gpu-lost-field`` (GPU 1's fields read ``[GPU is lost]`` from the second
  loop); ``nodriver`` (the driver message, exit 9); ``nogpu`` (``No devices were found``, exit 6);
- ``FAKE_SMI_LOOPS``: loops at most (bounded: 600), then it exits 0;
- ``FAKE_SMI_POWER_FROM``: a file holding one number per GPU line (watts), read at every loop: a
  simulator writes its GPUs' draw there, so the power follows the load.

Loop ``k``, GPU ``i``: utilization ``(10 i + 7 k) % 101`` %, memory used ``1000 + 100 i + k`` of 81559 MiB,
power ``100 + 10 i + k`` W (two decimals), SM clock 1980 MHz, temperature ``40 + i`` C.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

UNITS = {"utilization.gpu": "%", "memory.used": "MiB", "memory.total": "MiB", "power.draw": "W",
         "power.draw.instant": "W", "power.draw.average": "W", "clocks.sm": "MHz", "clocks.current.sm": "MHz"}
KNOWN = {"index", "name", "uuid", "pci.bus_id", "timestamp", "temperature.gpu", *UNITS}


def install(directory: Path) -> Path:
    """Write the ``nvidia-smi`` double into ``directory``; returns its path."""
    path = directory / "nvidia-smi"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def value(field: str, i: int, k: int, mode: str, power: list[float] | None) -> str:
    if mode == "na" and (field == "clocks.sm" or (field.startswith("power.draw") and i == 1)):
        return "[Not Supported]" if field == "clocks.sm" else "[N/A]"
    if mode == "gpu-lost-field" and i == 1 and k >= 1 and field != "index":
        return "[GPU is lost]"
    if field == "index":
        return str(i)
    if field == "name":
        return "NVIDIA H100 80GB HBM3"
    if field == "uuid":
        return f"GPU-{i:08x}-0000-0000-0000-000000000000"
    if field == "pci.bus_id":
        return f"00000000:{0x18 + i:02X}:00.0"
    if field == "timestamp":
        return time.strftime("%Y/%m/%d %H:%M:%S.000")
    if field == "utilization.gpu":
        return str((10 * i + 7 * k) % 101)
    if field == "memory.used":
        return str(1000 + 100 * i + k)
    if field == "memory.total":
        return "81559"
    if field.startswith("power.draw"):
        w = power[i] if power is not None and i < len(power) else 100 + 10 * i + k
        return f"{w:.2f}"
    if field in ("clocks.sm", "clocks.current.sm"):
        return "1980"
    return str(40 + i)  # temperature.gpu


def read_power(path: str | None) -> list[float] | None:
    if not path:
        return None
    try:
        return [float(x) for x in Path(path).read_text().split()]
    except (OSError, ValueError):
        return None


def main(argv: list[str]) -> int:
    fields: list[str] = []
    fmt = ""
    loop_s: float | None = None
    it = iter(argv)
    for a in it:
        if a.startswith("--query-gpu="):
            fields = a.split("=", 1)[1].split(",")
        elif a == "--query-gpu":
            fields = next(it).split(",")
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a == "-lms":
            loop_s = int(next(it)) / 1000
        elif a.startswith("--loop-ms="):
            loop_s = int(a.split("=", 1)[1]) / 1000
        elif a == "-l":
            loop_s = float(next(it))
    for f in fields:
        if f not in KNOWN:
            print(f'Field "{f}" is not a valid field to query.', flush=True)
            return 2
    mode = os.environ.get("FAKE_SMI_MODE", "ok")
    if mode == "nodriver":
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
              "the latest NVIDIA driver is installed and running.", flush=True)
        return 9
    if mode == "nogpu":
        print("No devices were found", flush=True)
        return 6
    gpus = int(os.environ.get("FAKE_SMI_GPUS", "2"))
    loops = min(int(os.environ.get("FAKE_SMI_LOOPS", "600")), 600)
    die_after = int(os.environ.get("FAKE_SMI_DIE_AFTER", "2"))
    units = "nounits" not in fmt
    if "noheader" not in fmt:
        print(", ".join(f"{f} [{UNITS[f]}]" if f in UNITS else f for f in fields), flush=True)
    for k in range(loops if loop_s is not None else 1):
        if mode == "die" and k >= die_after:
            print("Failed to query GPU: Unknown Error", file=sys.stderr, flush=True)
            return 1
        power = read_power(os.environ.get("FAKE_SMI_POWER_FROM"))
        out = []
        for i in range(gpus):
            if mode == "lost" and i == 1 and k >= 1:
                out.append("Unable to determine the device handle for GPU 00000000:3B:00.0: Unknown Error")
                continue
            cells = []
            for f in fields:
                v = value(f, i, k, mode, power)
                cells.append(f"{v} {UNITS[f]}" if units and f in UNITS and not v.startswith("[") else v)
            out.append(", ".join(cells))
        print("\n".join(out), flush=True)
        if loop_s is not None:
            time.sleep(loop_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
