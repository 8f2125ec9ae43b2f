"""The built-in prompt set measured: per category, the prompts, the multi-turn rows and the prompt
lengths in tokens, on three counts side by side.

- ``server``: the real llama-server's own count of the chat request specload sends (the row's first
  turn as a user message through the model's chat template: ``POST /apply-template``, then
  ``POST /tokenize`` of that prompt). Its tokenizer is the tiny test model's (a 512-token BPE trained on a
  few lines), which splits English far finer than a production model's: read it as what this
  server counts, not as a typical length.
- ``cl100k``: OpenAI's cl100k_base BPE (a common production tokenizer) on the text alone, when the
  ``bpe-openai`` package (which carries its tables) is installed; ``-`` otherwise.
- ``estimate``: specload's own estimate without a tokenizer (1.3 tokens a word).

Usage: ``python benchmarks/builtin_prompts.py`` (starts and stops its own llama-server on
127.0.0.1; needs ``shared/real-server``). Prints a Markdown table for the README.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specload.engine.datasets import estimate_tokens, load_builtin
from tests.integration.real_server_util import OwnServer, missing_reason


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def server_count(base: str, text: str) -> int:
    prompt = _post(base + "/apply-template", {"messages": [{"role": "user", "content": text}]})["prompt"]
    return len(_post(base + "/tokenize", {"content": prompt, "add_special": True})["tokens"])


def _cl100k():  # type: ignore[no-untyped-def]
    try:
        import bpe_openai  # type: ignore[import-not-found]
    except ImportError:
        return None
    enc = bpe_openai.get_encoding("cl100k_base")
    return lambda text: len(enc.encode(text))


def _fig(xs: list[int]) -> str:
    if not xs:
        return "-"
    return f"{min(xs):,} / {statistics.median(xs):,.0f} / {statistics.mean(xs):,.0f} / {max(xs):,}"


def main() -> int:
    reason = missing_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    ds = load_builtin()
    cl100k = _cl100k()
    counts: dict[str, dict[str, list[int]]] = {}
    multi: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="specload-builtin-") as tmp, OwnServer(Path(tmp) / "server.log") as srv:
        for conv in ds.conversations:
            assert conv.category is not None
            c = counts.setdefault(conv.category, {"server": [], "cl100k": [], "estimate": []})
            multi[conv.category] = multi.get(conv.category, 0) + (len(conv.turns) > 1)
            text = conv.turns[0]
            c["server"].append(server_count(srv.url, text))
            if cl100k is not None:
                c["cl100k"].append(cl100k(text))
            c["estimate"].append(estimate_tokens(text))
    print(f"built-in set {ds.name}: {len(ds.conversations)} prompts, sha256 {ds.digest}; "
          "tokens of the first turn, min / p50 / mean / max\n")
    print("| category | prompts | multi-turn | real llama-server (chat, template included) | cl100k (text) | specload estimate (text) |")
    print("| --- | --- | --- | --- | --- | --- |")
    every: dict[str, list[int]] = {"server": [], "cl100k": [], "estimate": []}
    for cat, c in counts.items():
        print(f"| {cat} | {len(c['server'])} | {multi[cat]} | {_fig(c['server'])} | {_fig(c['cl100k'])} | {_fig(c['estimate'])} |")
        for k in every:
            every[k] += c[k]
    print(f"| all | {len(every['server'])} | {sum(multi.values())} | {_fig(every['server'])} | "
          f"{_fig(every['cl100k'])} | {_fig(every['estimate'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
