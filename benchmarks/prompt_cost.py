"""CPU per synthetic prompt: what ``PromptSource.next()`` costs the engine for each request.

    python benchmarks/prompt_cost.py [--n 20000] [--tokens 128,1024] [--before PATH]

Times ``next()`` for the calibrated-by-usage model (per-word average, the usual case against a server
without a tokenizer endpoint) and the exact model (each word's count known, from ``/tokenize``), at
each asked length, best of 5 passes. ``--before PATH`` runs the same in another checkout (e.g.
``git worktree add /tmp/before main``), in its own interpreter, and prints the ratio, so both are
measured in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(n: int, tokens: list[int]) -> dict[str, float]:
    from specload.engine.prompts import PromptSource
    from specload.engine.words import VOCABULARY, TokenModel

    models = {"per-word": TokenModel("usage", per_word=1.7, overhead=3.0, opening=1.0),
              "exact": TokenModel("tokenize", overhead=3.0, opening=1.0,
                                  word_tokens={w: 1 + len(w) // 4 for w in VOCABULARY})}
    out: dict[str, float] = {}
    for name, model in models.items():
        for t in tokens:
            src = PromptSource(synthetic_tokens=t, seed=1, nonce="abcd1234")
            src.set_model(model)
            best = float("inf")
            for _ in range(5):
                t0 = time.process_time()
                for _ in range(n):
                    src.next()
                best = min(best, time.process_time() - t0)
            out[f"{name} {t} tok"] = best / n * 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--tokens", default="128,1024")
    ap.add_argument("--before", default=None, metavar="PATH")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one checkout's figures
    a = ap.parse_args()
    tokens = [int(x) for x in a.tokens.split(",")]
    now = measure(a.n, tokens)
    if a.json:
        print(json.dumps(now))
        return
    before: dict[str, float] = {}
    if a.before:
        root = Path(a.before).resolve()
        py = root / ".venv" / "bin" / "python"
        res = subprocess.run(
            [str(py) if py.exists() else sys.executable, "-P", str(HERE / "prompt_cost.py"), "--json",
             "--n", str(a.n), "--tokens", a.tokens],
            env={"PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=600, check=True)
        before = json.loads(res.stdout)
    for key, us in now.items():
        was = before.get(key)
        extra = f"   before {was:7.2f} us   x{was / us:.2f} faster" if was else ""
        print(f"{key:>18}: {us:7.2f} us per prompt{extra}")


if __name__ == "__main__":
    main()
