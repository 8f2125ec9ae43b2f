"""Prompt lengths as the server counts them: asked for N tokens, what did the server count?

    python benchmarks/prompt_lengths.py [--tokens 128,512] [--before /path/to/older/checkout]

For each target (the simulator in vLLM shape with its tokenizer endpoint, the same without one, the
simulator as llama-server, and the real llama-server of ../shared/real-server when present, launched
by specload itself as the real-server tests do) and API, one small headless run per asked length;
prints the mean and range of the server's ``usage.prompt_tokens`` over the run's requests and how
the prompts were sized (the record's calibration event). ``--before`` runs the same commands with
another checkout of specload (e.g. ``git worktree add /tmp/old a2ba60e``), which sized prompts by a
guess of 1.3 tokens a word, so the two can be read side by side. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import simulator

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SPECLOAD_SHARED") or REPO.parent / "shared")
REAL = SHARED / "real-server"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(code: Path, url: str, api: str, tokens: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        rec = os.path.join(tmp, "r.jsonl")
        env = {**os.environ, "PYTHONPATH": str(code)}
        p = subprocess.run(
            [sys.executable, "-m", "specload.cli", "run", url, "--api", api, "-c", "2", "-n", "8", "--max-tokens", "4",
             "--prompt-tokens", str(tokens), "--record", rec, "--metrics-url", "off", "--no-health", *extra],
            capture_output=True, text=True, timeout=180, env=env, cwd=tmp,
        )
        if p.returncode:
            return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
        counted, method = [], "guess (1.3 tokens a word)"
        with open(rec) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") == "request" and r.get("ok") and r.get("prompt_tokens") is not None:
                    counted.append(r["prompt_tokens"])
                elif r.get("type") == "event" and r.get("kind") == "calibration":
                    method = r["value"]["prompts"]["method"]
        return {"counted": counted, "method": method}


def line(target: str, api: str, tokens: int, label: str, res: dict) -> str:
    if "error" in res:
        return f"{target:<28} {api:<12} {tokens:>5} {label:<7} error: {res['error'][:80]}"
    c = res["counted"]
    if not c:
        return f"{target:<28} {api:<12} {tokens:>5} {label:<7} no usage.prompt_tokens"
    m = statistics.mean(c)
    return (f"{target:<28} {api:<12} {tokens:>5} {label:<7} {m:>8.1f} {min(c):>5}-{max(c):<5} "
            f"{100 * (m / tokens - 1):>+7.1f} %  {res['method']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="128,512")
    ap.add_argument("--before", type=Path, help="another checkout of specload to run the same commands with")
    a = ap.parse_args()
    sizes = [int(x) for x in a.tokens.split(",")]
    codes = [("now", REPO)] + ([("before", a.before.resolve())] if a.before else [])
    print(f"{'target':<28} {'api':<12} {'asked':>5} {'code':<7} {'counted':>8} {'range':<11} {'off':>9}  sized by")
    sims = [
        ("simulator (vLLM, /tokenize)", (), ("chat", "completions")),
        ("simulator (no tokenizer)", ("--no-tokenize",), ("chat",)),
        ("simulator (llama.cpp)", ("--flavor", "llamacpp"), ("chat",)),
    ]
    for name, args, apis in sims:
        with simulator("--ttft-ms", "2", "--itl-ms", "1", "--spec-tokens", "0", *args) as (url, _):
            for api in apis:
                for n in sizes:
                    for label, code in codes:
                        print(line(name, api, n, label, run(code, url, api, n, [])), flush=True)
    binary = REAL / "llama-server"
    if not binary.exists():
        print(f"(real llama-server not found at {binary}: skipped)")
        return
    for api in ("chat", "completions"):
        for n in sizes:
            for label, code in codes:
                port = free_port()
                launch = (f"{binary} -m {REAL / 'tiny-llama-f32.gguf'} -a tiny --host 127.0.0.1 --port {port} "
                          f"-c 32768 -np 8 -t 2 --metrics --slots --log-timestamps --log-prefix")
                res = run(code, f"http://127.0.0.1:{port}", api, n, ["--launch", launch, "--ready-timeout", "60"])
                print(line("real llama-server (tiny)", api, n, label, res), flush=True)


if __name__ == "__main__":
    main()
